package compiler

import (
	"fmt"
	"slices"

	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/canonjson"
)

// scripted: hookbox's own deterministic engine. argv is its binary, the
// script path and, with hooks, the same settings file Claude Code would get:
// it runs hooks exactly as Claude Code does, so hook verification can be
// tested offline. It re-execs itself to daemonize and fork (Go cannot fork
// without exec), under the argv[0] values listed in the render.

// Scripted engine flags and self-exec names; the engine binary reads these.
const (
	ScriptedDaemonArgv0 = "hookbox-scripted-daemon"
	ScriptedChildArgv0  = "hookbox-scripted-child"
)

var scriptedFlags = flagTable{
	{kind: flagValue, name: "--script", value: constant(render.ScriptPath)},
	{kind: flagValue, name: "--settings", value: func(c *compilation) any {
		if len(c.spec.Hooks) == 0 {
			return ""
		}
		return claudeSettingsPath
	}},
	{kind: flagValue, name: "--prompt", value: func(c *compilation) any { return c.p.Prompt }},
}

func init() {
	registerEngine(&engineDef{
		kind:          "scripted",
		streamsEarly:  true,
		prompt:        promptOptional,
		hooks:         &hookStyle{events: claudeEvents, toolEvents: claudeToolEvents},
		selfExecArgv0: []string{ScriptedChildArgv0, ScriptedDaemonArgv0},
		build:         buildScripted,
	})
}

func buildScripted(c *compilation) error {
	flags, err := scriptedFlags.argv(c)
	if err != nil {
		return err
	}
	c.r.Process.Argv = append(append([]string{c.spec.Engine.Path}, flags...), c.userArgs()...)
	script := render.Script{Version: render.ScriptVersion}
	for i, step := range c.spec.Engine.Script {
		out, err := c.scriptStep(step)
		if err != nil {
			return fmt.Errorf("spec.engine.script[%d]: %w", i, err)
		}
		script.Steps = append(script.Steps, out)
	}
	data, err := canonjson.Marshal(script)
	if err != nil {
		return err
	}
	c.addFile(render.ScriptPath, 0o644, string(data))
	if len(c.spec.Hooks) > 0 {
		return c.addClaudeSettings()
	}
	return nil
}

func (c *compilation) scriptStep(s ScriptStep) (render.ScriptStep, error) {
	out := render.ScriptStep{
		Stderr:        s.Stderr,
		SleepMS:       s.Sleep.Milliseconds(),
		AllocateBytes: s.Allocate.Value(),
		EnvHash:       s.EnvHash,
		Exit:          s.Exit,
	}
	if s.Hook != "" {
		// The step names a hook; the engine fires its event (and, for a
		// tool event, a tool its matcher accepts), as Claude Code would.
		for _, h := range c.spec.Hooks {
			if h.Name == s.Hook {
				out.Hook = &render.ScriptHook{Event: h.Event, Tool: h.Matcher}
			}
		}
	}
	if s.Print != nil {
		data, err := canonjson.Marshal(s.Print)
		if err != nil {
			return out, err
		}
		out.Print = data
	}
	if s.Write != nil {
		out.Write = &render.ScriptWrite{Path: s.Write.Path, Content: s.Write.Content}
	}
	if s.Daemonize != nil {
		out.Daemonize = &render.ScriptDaemonize{Marker: s.Daemonize.Marker}
	}
	if s.Fork != nil {
		out.Fork = &render.ScriptFork{Count: s.Fork.Count, SleepMS: s.Fork.Sleep.Milliseconds(),
			AllocateBytes: s.Fork.Allocate.Value(), Wait: s.Fork.Wait}
	}
	if s.Probe != nil {
		out.Probe = &render.ScriptProbe{Paths: slices.Clone(s.Probe.Paths), Dial: slices.Clone(s.Probe.Dial)}
	}
	if len(s.Exec) > 0 {
		out.Exec = slices.Clone([]string(s.Exec)) // already container paths
	}
	return out, nil
}
