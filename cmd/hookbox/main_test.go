package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/plan"
	"hookbox.dev/hookbox/render"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func writeSpec(t *testing.T, dir, name, content string) string {
	t.Helper()
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

const validHead = "apiVersion: hookbox.dev/v1alpha1\nkind: Spawn\nmetadata:\n  name: ok\nspec:\n"

// TestMalformedSpecs: every malformed spec exits 2 and names
// file:line:column and the field path of the problem.
func TestMalformedSpecs(t *testing.T) {
	engine := "  engine:\n    kind: claude\n    path: /opt/claude\n  prompt: hi\n  workspace: .\n"
	cases := []struct {
		name string
		spec string
		want string // "line:col: path" expected after the file name
	}{
		{"unknown field", validHead + engine + "  promt: hi\n", "11:3: spec.promt: unknown field"},
		{"unknown nested field", validHead + "  engine:\n    kind: claude\n    path: /opt/claude\n    modle: x\n  prompt: hi\n  workspace: .\n", "9:5: spec.engine.modle: unknown field"},
		{"wrong type string", validHead + "  engine:\n    kind: claude\n    path: /opt/claude\n    model: 5\n  prompt: hi\n  workspace: .\n", "9:12: spec.engine.model: expected a string, got an integer"},
		{"wrong type list", validHead + engine + "  tools: /bin/sh\n", "11:10: spec.tools: expected a list"},
		{"bad duration", validHead + engine + "  limits:\n    timeout: soon\n", "12:14: spec.limits.timeout: \"soon\" is not a duration"},
		{"duration without unit", validHead + engine + "  limits:\n    timeout: 30\n", "12:14: spec.limits.timeout: \"30\" has no unit"},
		{"bad quantity", validHead + engine + "  limits:\n    memory: lots\n", "12:13: spec.limits.memory: \"lots\" is not a quantity"},
		{"missing engine path", validHead + "  engine:\n    kind: claude\n  prompt: hi\n  workspace: .\n", "7:5: spec.engine.path: spec.engine.path is required"},
		{"unknown engine kind", validHead + "  engine:\n    kind: cursor\n    path: /x\n  workspace: .\n", "7:11: spec.engine.kind: unknown engine kind \"cursor\""},
		{"network other than none", validHead + engine + "  network: host\n", "11:12: spec.network: network \"host\" is not supported"},
		{"bad DNS name", strings.Replace(validHead, "name: ok", "name: My_Spawn", 1) + engine, "4:9: metadata.name: \"My_Spawn\" is not a DNS-1123 label"},
		{"missing name", strings.Replace(validHead, "  name: ok\n", "  labels: {}\n", 1) + engine, "4:3: metadata.name: metadata.name is required"},
		{"wrong apiVersion", strings.Replace(validHead, "v1alpha1", "v1", 1) + engine, "1:13: apiVersion: apiVersion is \"hookbox.dev/v1\""},
		{"unknown kind", strings.Replace(validHead, "kind: Spawn", "kind: Pod", 1) + engine, "2:7: kind: unknown kind \"Pod\""},
		{"duplicate key", validHead + engine + "  workspace: /other\n", "11:3: spec.workspace: duplicate key \"workspace\" (first at line 10:3)"},
		{"hook with a pipe", validHead + engine + "  hooks:\n    - {name: h, event: Stop, argv: \"echo hi | tee x\"}\n", "12:36: spec.hooks[0].argv: \"echo hi | tee x\": pipe"},
		{"empty hook argv", validHead + engine + "  hooks:\n    - {name: h, event: Stop, argv: []}\n", "12:36: spec.hooks[0].argv: hook argv is empty"},
		{"unknown hook event", validHead + engine + "  hooks:\n    - {name: h, event: OnSave, argv: [/bin/true]}\n", "12:24: spec.hooks[0].event: engine claude has no hook event \"OnSave\""},
		{"bad trace mode", validHead + engine + "  trace: {mode: paranoid}\n", "11:17: spec.trace.mode: unknown trace mode"},
		{"bad effort", validHead + "  engine:\n    kind: claude\n    path: /opt/claude\n    effort: extreme\n  prompt: hi\n  workspace: .\n", "9:13: spec.engine.effort: unknown effort \"extreme\""},
		{"reserved env", validHead + engine + "  env:\n    set: {HOME: /root}\n", "12:17: spec.env.set.HOME: HOME is reserved"},
		{"bad secret name", validHead + engine + "  secrets: [GOOD, bad-name]\n", "11:19: spec.secrets[1]:"},
		{"artifact escaping", validHead + engine + "  artifacts: [../etc/passwd]\n", "11:15: spec.artifacts[0]: artifact \"../etc/passwd\" leaves the run dir"},
		{"watchdog on late engine", validHead + "  engine:\n    kind: gemini\n    path: /opt/gemini\n  prompt: hi\n  workspace: .\n  limits:\n    idle: 5m\n", "12:11: spec.limits.idle: engine gemini prints only when it finishes"},
		{"pi prompt option-like", validHead + "  engine:\n    kind: pi\n    path: /opt/pi\n  prompt: \"--help me\"\n  workspace: .\n", "9:11: spec.prompt: engine pi would read a prompt starting with \"-\""},
		{"missing workspace", validHead + "  engine:\n    kind: claude\n    path: /opt/claude\n  prompt: hi\n", "6:3: spec.workspace: spec.workspace is required"},
		{"syntax error", validHead + "  engine: [unclosed\n", "6:1: syntax error"},
		{"list item bad", "apiVersion: hookbox.dev/v1alpha1\nkind: SpawnList\nitems:\n  - metadata: {name: a}\n    spec: {engine: {kind: exec, path: /bin/true}, workspace: ., network: wifi}\n", "5:74: items[0].spec.network: network \"wifi\" is not supported"},
		{"null for explicit-empty field", validHead + engine + "  mcpServers:\n", "11:14: spec.mcpServers: null is ambiguous"},
	}
	if len(cases) < 15 {
		t.Fatalf("the acceptance asks for at least 15 malformed specs, have %d", len(cases))
	}
	dir := t.TempDir()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := writeSpec(t, dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml", tc.spec)
			code, stdout, stderr := runCLI(t, "render", file)
			if code != exitSpec {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, exitSpec, stderr)
			}
			if stdout != "" {
				t.Errorf("a failed render printed to stdout: %q", stdout)
			}
			if want := file + ":" + tc.want; !strings.Contains(stderr, want) {
				t.Errorf("stderr does not contain %q:\n%s", want, stderr)
			}
		})
	}
}

// TestAllErrorsReportedTogether: one file with many problems lists them all.
func TestAllErrorsReportedTogether(t *testing.T) {
	spec := validHead + "  engine:\n    kind: claude\n    path: /opt/claude\n    model: 5\n  promt: hi\n  workspace: .\n  network: host\n  limits: {timeout: x, memory: y}\n"
	file := writeSpec(t, t.TempDir(), "many.yaml", spec)
	code, _, stderr := runCLI(t, "render", file)
	if code != exitSpec {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"spec.engine.model", "spec.promt", "spec.network", "spec.limits.timeout", "spec.limits.memory", "spec.prompt: engine claude needs a prompt"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("missing %q in:\n%s", want, stderr)
		}
	}
	if !strings.Contains(stderr, "(6 problems)") {
		t.Errorf("expected a count of 6 problems:\n%s", stderr)
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{{"render"}, {"render", "a", "b"}, {"render", "--format", "xml", "x.yaml"}, {"render", "--bogus", "x"}} {
		if code, _, stderr := runCLI(t, args...); code != exitSpec {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, stderr)
		}
	}
	if code, _, _ := runCLI(t, "render", filepath.Join(t.TempDir(), "missing.yaml")); code != exitFailure {
		t.Errorf("a missing file should exit %d, got %d", exitFailure, code)
	}
}

func TestRenderExamples(t *testing.T) {
	code, stdout, stderr := runCLI(t, "render", "../../examples/pipeline.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.HasPrefix(stdout, "[{") || !strings.HasSuffix(stdout, "}]\n") {
		t.Errorf("a SpawnList should print a JSON array, got %.80q…", stdout)
	}
	code, stdout, _ = runCLI(t, "render", "--format", "text", "--spawn", "review-docs", "../../examples/pipeline.yaml")
	if code != 0 || !strings.Contains(stdout, "spawn review-docs") || strings.Contains(stdout, "review-tests") {
		t.Errorf("--spawn selects one spawn, got exit %d:\n%s", code, stdout)
	}
	if code, _, _ = runCLI(t, "render", "--spawn", "nope", "../../examples/pipeline.yaml"); code != exitSpec {
		t.Errorf("unknown --spawn should exit 2, got %d", code)
	}
}

func TestRenderOCI(t *testing.T) {
	code, stdout, stderr := runCLI(t, "render", "--format", "oci", "../../examples/hello.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var spec struct {
		Process struct {
			Args []string          `json:"args"`
			User struct{ UID int } `json:"user"`
		} `json:"process"`
		Root struct {
			Readonly bool `json:"readonly"`
		} `json:"root"`
		Linux struct {
			CgroupsPath string `json:"cgroupsPath"`
		} `json:"linux"`
	}
	if err := json.Unmarshal([]byte(stdout), &spec); err != nil {
		t.Fatalf("--format oci must print one JSON spec: %v", err)
	}
	if len(spec.Process.Args) < 2 || spec.Process.Args[0] != render.InitPath || !strings.HasSuffix(spec.Process.Args[1], "/bin/hookbox-scripted-engine") ||
		spec.Process.User.UID != 65532 || !spec.Root.Readonly || spec.Linux.CgroupsPath != "/hookbox/plan" {
		t.Errorf("unexpected spec: %+v", spec)
	}
}

// TestRenderOCIRefusesWhatRunRefuses: what a run would refuse to mount,
// render refuses too, as a spec error before anything else.
func TestRenderOCIRefusesWhatRunRefuses(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, ws := range []string{"./absent", "./link"} {
		spec := writeSpec(t, dir, "s.yaml", validHead+"  engine: {kind: exec, path: /bin/true}\n  workspace: "+ws+"\n")
		code, stdout, stderr := runCLI(t, "render", "--format", "oci", "--state-dir", filepath.Join(dir, "state"), spec)
		// Refused at compile time now: a spec error (exit 2) at the field.
		if code != 2 || stdout != "" || !strings.Contains(stderr, "s.yaml:7:14: spec.workspace: ") {
			t.Errorf("workspace %s: exit %d, stdout %q, stderr %q; want a spec error at spec.workspace", ws, code, stdout, stderr)
		}
	}
}

// TestRenderRunfilesDigest: with --runfiles the manifest is in the render,
// so changing the engine binary changes the digest.
func TestRenderRunfilesDigest(t *testing.T) {
	progDir, err := os.MkdirTemp("/var/tmp", "hookbox-cli-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(progDir)
	engine := filepath.Join(progDir, "engine")
	original, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(engine, original, 0o755); err != nil {
		t.Fatal(err)
	}
	// A static ELF file stands in for hookbox-init, which the test binary
	// does not have beside it.
	t.Setenv(plan.InitEnv, testenv.StaticELF(t))
	dir := t.TempDir()
	spec := writeSpec(t, dir, "s.yaml", validHead+"  engine: {kind: exec, path: "+engine+"}\n  workspace: .\n")
	state := filepath.Join(dir, "state")
	digestOf := func() string {
		code, stdout, stderr := runCLI(t, "render", "--runfiles", "--state-dir", state, "--format", "text", spec)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		digests := textDigests(t, stdout, "content digest")
		if len(digests) != 1 {
			t.Fatalf("one content digest expected in:\n%s", stdout)
		}
		return digests[0]
	}
	code, stdout, _ := runCLI(t, "render", "--runfiles", "--state-dir", state, spec)
	if code != 0 || !strings.Contains(stdout, `"path":"`+engine+`"`) || !strings.Contains(stdout, `"sha256":"`) {
		t.Fatalf("the render must carry the engine's manifest entry:\n%s", stdout)
	}
	if !strings.Contains(stdout, `"path":"`+render.InitPath+`","sha256":"`) {
		t.Fatalf("the render must carry the init's manifest entry:\n%s", stdout)
	}
	first := digestOf()
	if again := digestOf(); again != first {
		t.Errorf("unchanged binary, digest changed: %s → %s", first, again)
	}
	if err := os.WriteFile(engine, append(original, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	if changed := digestOf(); changed == first {
		t.Error("a changed engine binary must change the render digest")
	}
}

// TestCLIConventions: usage mistakes exit 2 whatever the command, flags
// shared by every command are persistent, and a failed doctor check is not
// a success.
func TestCLIConventions(t *testing.T) {
	state := t.TempDir()
	for _, args := range [][]string{
		{"nope"},
		{"render", "--format", "text", "--ttl", "5m", "../../examples/hello.yaml"},
		{"render", "--format", "json", "--namespace", "ci", "../../examples/hello.yaml"},
		{"run", "--set", "no-equals-sign", "../../examples/hello.yaml"},
		{"run", "--set", "a=1", "--set", "a=2", "../../examples/hello.yaml"},
	} {
		if code, _, stderr := runCLI(t, args...); code != exitSpec {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitSpec, stderr)
		}
	}
	// --state-dir before or after the command name means the same.
	for _, args := range [][]string{{"--state-dir", state, "ps"}, {"ps", "--state-dir", state}} {
		code, stdout, stderr := runCLI(t, args...)
		if code != 0 || !strings.HasPrefix(stdout, "RUN") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	code, stdout, _ := runCLI(t, "doctor", "--json", "--address", filepath.Join(t.TempDir(), "none.sock"))
	if code != exitInfra {
		t.Errorf("doctor with an unreachable --address: exit %d, want %d", code, exitInfra)
	}
	if strings.Count(strings.TrimSpace(stdout), "\n") != 0 || !json.Valid([]byte(stdout)) {
		t.Errorf("--json prints one JSON value on one line, got %q", stdout)
	}
}

// TestCompletion: --spawn completes the spawns of the spec given so far.
func TestCompletion(t *testing.T) {
	_, stdout, _ := runCLI(t, "__complete", "run", "../../examples/pipeline.yaml", "--set", "pr=1", "--set", "ref=x", "--spawn", "")
	for _, want := range []string{"review-security", "review-tests", "review-docs"} {
		if !strings.Contains(stdout, want+"\n") {
			t.Errorf("--spawn completion lacks %s:\n%s", want, stdout)
		}
	}
}
