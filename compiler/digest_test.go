package compiler

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// digestBase is a spec touching every execution-relevant field once.
const digestBase = `apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata:
  name: digest
  labels: {team: a}
spec:
  engine:
    kind: claude
    path: /opt/claude
    model: claude-opus-4-7
    effort: high
    args: [--permission-mode, dontAsk]
  prompt: review the change
  workspace: /src/ws
  addDirs: [/src/docs]
  mcpServers:
    docs: {command: [/opt/docs-mcp, --stdio]}
  hooks:
    - name: lint
      event: PreToolUse
      matcher: Bash
      argv: [/opt/lint, --strict]
      required: true
      timeout: 30s
  tools: [/bin/sh, /usr/bin/git]
  env:
    allow: [LANG, TZ]
    set: {MODE: ci}
  secrets: [API_KEY, OTHER_KEY]
  limits:
    timeout: 20m
    firstOutput: 2m
    idle: 5m
    memory: 4Gi
    pids: 512
    cpus: "2"
    tmpfs: 512Mi
  network: none
  artifacts: [review.md, notes.md]
  trace:
    mode: verify
    allow: [/usr/bin/git]
`

func digestOf(t *testing.T, spec string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prompt.md"), []byte("review the change"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "spawn.yaml")
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	renders, err := CompileFileWithParams(file, nil)
	if err != nil {
		t.Fatalf("compile:\n%s\n%v", spec, err)
	}
	digest, _, err := renders[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	return digest
}

func TestDigestChangesWithExecutionRelevantFields(t *testing.T) {
	base := digestOf(t, digestBase)
	cases := []struct{ name, old, new string }{
		{"name", "name: digest", "name: digest2"},
		{"engine path", "path: /opt/claude", "path: /opt/claude2"},
		{"model", "model: claude-opus-4-7", "model: claude-sonnet-4-6"},
		{"effort", "effort: high", "effort: low"},
		{"engine args", "args: [--permission-mode, dontAsk]", "args: [--permission-mode, plan]"},
		{"prompt", "prompt: review the change", "prompt: review the change!"},
		{"workspace", "workspace: /src/ws", "workspace: /src/ws2"},
		{"addDirs", "addDirs: [/src/docs]", "addDirs: [/src/docs, /src/more]"},
		{"mcp server", "--stdio]}", "--stdio, -v]}"},
		{"mcp unset", "  mcpServers:\n    docs: {command: [/opt/docs-mcp, --stdio]}\n", ""},
		{"mcp empty", "  mcpServers:\n    docs: {command: [/opt/docs-mcp, --stdio]}\n", "  mcpServers: {}\n"},
		{"hook argv", "argv: [/opt/lint, --strict]", "argv: [/opt/lint, --lax]"},
		{"hook event", "event: PreToolUse", "event: PostToolUse"},
		{"hook matcher", "matcher: Bash", "matcher: Edit"},
		{"hook required", "required: true", "required: false"},
		{"hook timeout", "timeout: 30s", "timeout: 31s"},
		{"tools", "tools: [/bin/sh, /usr/bin/git]", "tools: [/bin/sh, /usr/bin/git, /usr/bin/rg]"},
		{"env allow", "allow: [LANG, TZ]", "allow: [LANG]"},
		{"env set", "set: {MODE: ci}", "set: {MODE: dev}"},
		{"secrets", "secrets: [API_KEY, OTHER_KEY]", "secrets: [API_KEY]"},
		{"timeout", "timeout: 20m", "timeout: 21m"},
		{"firstOutput", "firstOutput: 2m", "firstOutput: 3m"},
		{"idle", "idle: 5m", "idle: 6m"},
		{"memory", "memory: 4Gi", "memory: 5Gi"},
		{"pids", "pids: 512", "pids: 513"},
		{"cpus", `cpus: "2"`, `cpus: "3"`},
		{"tmpfs", "tmpfs: 512Mi", "tmpfs: 256Mi"},
		{"artifacts", "artifacts: [review.md, notes.md]", "artifacts: [review.md]"},
		{"trace mode", "mode: verify", "mode: enforce"},
		{"trace allow", "allow: [/usr/bin/git]", "allow: []"},
	}
	seen := map[string]string{base: "base"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(digestBase, tc.old) {
				t.Fatalf("test bug: %q not in the base spec", tc.old)
			}
			got := digestOf(t, strings.Replace(digestBase, tc.old, tc.new, 1))
			if got == base {
				t.Errorf("changing %s did not change the digest", tc.name)
			}
			if other, dup := seen[got]; dup {
				t.Errorf("changing %s gives the same digest as %s", tc.name, other)
			}
			seen[got] = tc.name
		})
	}
}

func TestDigestIgnoresPresentation(t *testing.T) {
	base := digestOf(t, digestBase)
	cases := []struct{ name, old, new string }{
		{"comment", "kind: Spawn\n", "kind: Spawn # a comment\n# another\n"},
		{"labels", "labels: {team: a}", "labels: {team: b}"},
		{"quoting", "model: claude-opus-4-7", `model: "claude-opus-4-7"`},
		{"flow vs block", "set: {MODE: ci}", "set:\n      MODE: ci"},
		{"tools order", "tools: [/bin/sh, /usr/bin/git]", "tools: [/usr/bin/git, /bin/sh]"},
		{"artifacts order", "artifacts: [review.md, notes.md]", "artifacts: [notes.md, review.md]"},
		{"env allow order", "allow: [LANG, TZ]", "allow: [TZ, LANG]"},
		{"secrets order", "secrets: [API_KEY, OTHER_KEY]", "secrets: [OTHER_KEY, API_KEY]"},
		{"effort case", "effort: high", "effort: HIGH"},
		{"prompt from file", "prompt: review the change", "promptFile: prompt.md"},
		{"network default", "  network: none\n", ""},
		{"explicit default pids", "pids: 512", "pids: 512 # same"},
		{"field order", "  network: none\n  artifacts: [review.md, notes.md]\n", "  artifacts: [review.md, notes.md]\n  network: none\n"},
		{"equivalent quantity", "memory: 4Gi", "memory: 4096Mi"},
		{"equivalent duration", "timeout: 20m", "timeout: 1200s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(digestBase, tc.old) {
				t.Fatalf("test bug: %q not in the base spec", tc.old)
			}
			if got := digestOf(t, strings.Replace(digestBase, tc.old, tc.new, 1)); got != base {
				t.Errorf("%s changed the digest", tc.name)
			}
		})
	}

	// JSON and YAML forms of the same spec give the same render.
	jsonSpec := `{"apiVersion": "hookbox.dev/v1alpha1", "kind": "Spawn",
	"metadata": {"name": "j"},
	"spec": {"engine": {"kind": "exec", "path": "/bin/true", "args": ["-x"]}, "workspace": "/w"}}`
	yamlSpec := "apiVersion: hookbox.dev/v1alpha1\nkind: Spawn\nmetadata: {name: j}\nspec:\n  engine:\n    kind: exec\n    path: /bin/true\n    args: [-x]\n  workspace: /w\n"
	if digestOf(t, jsonSpec) != digestOf(t, yamlSpec) {
		t.Error("JSON and YAML forms of one spec give different digests")
	}
}

// TestBaseDir: the render's base dir is the spec's directory, moved up as
// far as the relative paths the render keeps reach.
func TestBaseDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo", "specs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "..", "prompt.md"), []byte("p"), 0o644); err != nil {
		t.Fatal(err)
	}
	repo := filepath.Dir(dir)
	cases := []struct{ name, spec, want string }{
		{"absolute paths only", "  engine: {kind: exec, path: /bin/true}\n  workspace: /src/ws\n", ""},
		{"a relative workspace", "  engine: {kind: exec, path: /bin/true}\n  workspace: ./ws\n", dir},
		{"an engine one level up", "  engine: {kind: exec, path: ../bin/e}\n  workspace: .\n", repo},
		{"a tool up and down again", "  engine: {kind: exec, path: /bin/true}\n  workspace: /src/ws\n  tools: [../specs/t]\n", dir},
		{"a hook in a sibling directory", "  engine: {kind: claude, path: /opt/claude}\n  prompt: p\n  workspace: /src/ws\n  hooks: [{name: h, event: Stop, argv: [../hooks/h]}]\n", repo},
		{"a prompt file is not kept", "  engine: {kind: claude, path: /opt/claude}\n  workspace: /src/ws\n  promptFile: ../prompt.md\n", ""},
		{"up to the root", "  engine: {kind: exec, path: /bin/true}\n  workspace: " + strings.Repeat("../", strings.Count(dir, "/")) + "src\n", "/"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, "spawn.yaml")
			if err := os.WriteFile(file, []byte("apiVersion: hookbox.dev/v1alpha1\nkind: Spawn\nmetadata: {name: b}\nspec:\n"+tc.spec), 0o644); err != nil {
				t.Fatal(err)
			}
			renders, err := CompileFileWithParams(file, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := renders[0].BaseDir; got != tc.want {
				t.Errorf("base dir %q, want %q", got, tc.want)
			}
		})
	}
}

// TestPlanDigestKeepsPathOrder: PATH lists tool directories sorted; a
// directory of the checkout sorts the same against one outside it from
// every checkout, so the plan digest does not depend on where it lives.
func TestPlanDigestKeepsPathOrder(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(root, "m", "bin", "x") // between the two checkouts
	var digests []string
	for _, checkout := range []string{"a", "z"} {
		dir := filepath.Join(root, checkout, "spec")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, "spawn.yaml")
		spec := "apiVersion: hookbox.dev/v1alpha1\nkind: Spawn\nmetadata: {name: p}\nspec:\n" +
			"  engine: {kind: exec, path: /bin/true}\n  workspace: .\n  tools: [./bin/t, " + outside + "]\n"
		if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
		renders, err := CompileFileWithParams(file, nil)
		if err != nil {
			t.Fatal(err)
		}
		d, _, err := renders[0].PlanDigest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
	}
	if digests[0] != digests[1] {
		t.Errorf("the same spec in two checkouts: plan digests %v", digests)
	}
}
