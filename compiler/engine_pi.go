package compiler

import (
	"strings"
)

// pi: `pi -p --mode json … PROMPT`. pi has no `--` terminator and takes the
// prompt as a bare positional, so a prompt starting with '-' (an option) or
// '@' (a file reference) is refused rather than misparsed. It runs hooks only
// as TypeScript extensions, which hookbox cannot pin in a render.

// piProviders maps model-name prefixes to pi providers. Only prefixes that
// one provider alone serves are listed; for any other model hookbox passes
// no --provider and lets pi decide.
var piProviders = []struct{ prefix, provider string }{
	{"claude-", "anthropic"},
	{"codestral", "mistral"},
	{"devstral", "mistral"},
	{"gemini-", "google"},
	{"gpt-", "openai"},
	{"grok-", "xai"},
	{"magistral", "mistral"},
	{"mistral-", "mistral"},
	{"o1", "openai"},
	{"o3", "openai"},
	{"o4-", "openai"},
}

func piProvider(model string) string {
	if strings.Contains(model, "/") {
		return "" // provider/model names are explicit; pi reads them itself
	}
	lower := strings.ToLower(model)
	for _, p := range piProviders {
		if strings.HasPrefix(lower, p.prefix) {
			return p.provider
		}
	}
	return ""
}

var piFlags = flagTable{
	{kind: flagBool, name: "-p", value: always},
	{kind: flagValue, name: "--mode", value: constant("json")},
	{kind: flagValue, name: "--provider", value: func(c *compilation) any { return piProvider(c.spec.Engine.Model) }},
	{kind: flagValue, name: "--model", value: model},
	{kind: flagValue, name: "--thinking", value: func(c *compilation) any { return c.r.Engine.Effort }},
}

func init() {
	registerEngine(&engineDef{
		kind:        "pi",
		prompt:      promptRequired,
		modelEffort: true,
		noHooks:     "pi runs hooks only as TypeScript extensions, which hookbox cannot pin or verify; remove spec.hooks or use another engine",
		check: func(p *Parsed, diags *diagnostics) {
			refuseOptionLikePrompt(p, diags, "-@")
		},
		build: buildPi,
	})
}

func buildPi(c *compilation) error {
	if e := c.spec.Engine.Effort; e != "" {
		c.r.Engine.RequestedEffort = e
		c.r.Engine.Effort = piThinking(e)
	}
	if m := c.spec.Engine.Model; m != "" && !strings.Contains(m, "/") && piProvider(m) == "" {
		c.note("no --provider for model %s: its prefix does not name one provider unambiguously", m)
	}
	flags, err := piFlags.argv(c)
	if err != nil {
		return err
	}
	argv := append([]string{c.spec.Engine.Path}, flags...)
	argv = append(argv, c.userArgs()...)
	argv = append(argv, c.p.Prompt)
	c.r.Process.Argv = argv
	return nil
}
