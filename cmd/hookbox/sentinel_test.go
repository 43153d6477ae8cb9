package main

import (
	"strings"
	"testing"
)

// TestSecretSentinelNeverPrinted plants a sentinel value in the host
// environment under every name the examples forward (secrets and
// allow-listed variables) and checks that no output of `hookbox render`,
// successful or failing, in any format, contains it. A render holds
// references; values are resolved only at launch.
func TestSecretSentinelNeverPrinted(t *testing.T) {
	const sentinel = "hbx-sentinel-3b9f1c7e"
	for _, name := range []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "LANG"} {
		t.Setenv(name, sentinel)
	}
	dir := t.TempDir()
	broken := writeSpec(t, dir, "broken.yaml", validHead+
		"  engine: {kind: claude, path: /opt/claude}\n  prompt: hi\n  workspace: .\n  secrets: [ANTHROPIC_API_KEY, bad-name]\n  env: {allow: [LANG, LANG], set: {ANTHROPIC_API_KEY: x}}\n")
	runs := [][]string{
		{"render", "../../examples/review.yaml"},
		{"render", "--format", "text", "../../examples/review.yaml"},
		{"render", "../../examples/pipeline.yaml"},
		{"render", "--format", "text", "../../examples/pipeline.yaml"},
		{"render", "../../examples/codex.yaml"},
		{"render", broken},
		{"render", "--format", "text", broken},
		{"schema"},
	}
	for _, args := range runs {
		code, stdout, stderr := runCLI(t, args...)
		if strings.Contains(stdout, sentinel) || strings.Contains(stderr, sentinel) {
			t.Errorf("%v printed the secret sentinel (exit %d)", args, code)
		}
		if args[len(args)-1] == broken && code != exitSpec {
			t.Errorf("%v: exit %d, want %d", args, code, exitSpec)
		}
	}
	// And the secret is still named, as a reference, in the render.
	_, stdout, _ := runCLI(t, "render", "../../examples/review.yaml")
	if !strings.Contains(stdout, `{"name":"ANTHROPIC_API_KEY","source":"secret"}`) {
		t.Errorf("the render must reference the secret by name:\n%s", stdout)
	}
}
