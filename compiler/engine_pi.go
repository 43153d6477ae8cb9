package compiler

import (
	"path"
	"strings"

	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/canonjson"
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

// piProviderHosts are the hosts of pi's built-in models per provider (the
// baseUrl of every model of that provider in pi-ai 0.73.1's model table).
var piProviderHosts = map[string]string{
	"anthropic": "api.anthropic.com:443",
	"google":    "generativelanguage.googleapis.com:443",
	"mistral":   "api.mistral.ai:443",
	"openai":    "api.openai.com:443",
	"xai":       "api.x.ai:443",
}

// piModelProvider is the provider a model name selects: the prefix of a
// PROVIDER/MODEL name, else the unambiguous model-name prefix.
func piModelProvider(model string) string {
	if provider, _, ok := strings.Cut(model, "/"); ok {
		return provider
	}
	return piProvider(model)
}

func piModelAPI(s *SpawnSpec) []string {
	if host, ok := piProviderHosts[piModelProvider(s.Engine.Model)]; ok {
		return []string{host}
	}
	return nil
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
		// pi passes each model's baseUrl to its SDK explicitly, so the SDKs'
		// ANTHROPIC_BASE_URL / OPENAI_BASE_URL defaults are never read
		// (measured with 0.73.1: ANTHROPIC_BASE_URL set, still CONNECT
		// api.anthropic.com:443): no base-URL variable to check.
		profiles:     piProfiles,
		reservedEnv:  []string{"NODE_OPTIONS"},
		baseURL:      piBaseURL,
		modelAPI:     piModelAPI,
		modelAPIHint: "set engine.model to a model whose provider hookbox knows (claude-..., gpt-..., gemini-..., mistral-..., grok-..., or PROVIDER/MODEL), or list the hosts as HOST:PORT",
		check: func(p *Parsed, diags *diagnostics) {
			refuseOptionLikePrompt(p, diags, "-@")
		},
		build: buildPi,
	})
}

// piProfiles: measured in a hookbox container (docs/engines.md).
// dist/cli.js is `#!/usr/bin/env node` and loads its dependencies from
// node_modules, so its package (with them) is its runfiles tree. Its bash
// tool runs `/bin/bash -c <command>` (it takes /bin/bash when it exists).
// It re-execs nothing.
var piProfiles = []*engineProfile{{
	version:     "0.73.1",
	toolShell:   &shellRule{name: "/bin/bash", argv0: argv0Path, forms: [][]string{{"-c", freeArg}}},
	nodePackage: true,
	env: func(c *compilation) map[string]string {
		return map[string]string{"NODE_OPTIONS": nodeHeapOptions(c)}
	},
}}

// piModelsPath is pi's models.json under HOME (its agent directory,
// ~/.pi/agent, in the tmpfs run dir).
var piModelsPath = path.Join(render.HomeDir, ".pi", "agent", "models.json")

// piBaseURL sends the model's provider to url: pi 0.73.1 passes each
// built-in model's own base URL to its SDK (ANTHROPIC_BASE_URL is never
// read), and a provider entry in models.json overrides it for all of them.
func piBaseURL(c *compilation, url string) error {
	provider := piModelProvider(c.spec.Engine.Model)
	if provider == "" {
		c.p.errf(c.diags, "spec.engine.baseURL", "set engine.model to a model whose provider hookbox knows (claude-..., gpt-..., gemini-..., or PROVIDER/MODEL)",
			"engine pi: baseURL needs the model's provider, and model %q names none", c.spec.Engine.Model)
		return nil
	}
	data, err := canonjson.Marshal(map[string]any{"providers": map[string]any{provider: map[string]string{"baseUrl": url}}})
	if err != nil {
		return err
	}
	c.addFile(piModelsPath, 0o644, string(data))
	return nil
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
