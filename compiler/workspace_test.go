package compiler

import (
	"reflect"
	"strings"
	"testing"

	"hookbox.dev/hookbox/render"
)

// workspaceSpec is an exec spawn whose workspace line (line 6, value at
// column 14) is given.
func workspaceSpec(workspace string, extra ...string) string {
	return strings.Replace(spawnYAML("{kind: exec, path: /bin/true}", extra...), "  workspace: /ws\n", "  workspace: "+workspace+"\n", 1)
}

func TestWorkspaceShapes(t *testing.T) {
	for name, tc := range map[string]struct {
		workspace string
		path      string
		line, col int
		text      string
	}{
		"number":       {"5", "spec.workspace", 6, 14, "expected a directory or a mapping"},
		"list":         {"[/ws]", "spec.workspace", 6, 14, "expected a directory or a mapping"},
		"no path":      {"{mode: overlay}", "spec.workspace", 6, 14, "workspace has no path"},
		"unknown mode": {"{path: /ws, mode: rw}", "spec.workspace.mode", 6, 32, `workspace mode "rw" is not supported`},
		"unknown key":  {"{path: /ws, upper: /tmp}", "spec.workspace.upper", 6, 26, `unknown field "upper"`},
		"path number":  {"{path: 5}", "spec.workspace.path", 6, 21, "expected a string"},
		"mode number":  {"{path: /ws, mode: 1}", "spec.workspace.mode", 6, 32, "expected a string"},
		"empty path":   {`{path: ""}`, "spec.workspace", 6, 14, "spec.workspace is required"},
	} {
		t.Run(name, func(t *testing.T) {
			wantDiagnostic(t, workspaceSpec(tc.workspace), tc.path, tc.line, tc.col, tc.text)
		})
	}
}

func TestWorkspaceModes(t *testing.T) {
	readOnly := render.Mount{Destination: render.WorkspaceDir, Kind: render.MountBind, Source: "/ws", ReadOnly: true}
	overlay := render.Mount{Destination: render.WorkspaceDir, Kind: render.MountOverlay, Source: "/ws"}
	for workspace, want := range map[string]render.Mount{
		"/ws":                         readOnly,
		"{path: /ws}":                 readOnly,
		"{path: /ws, mode: readonly}": readOnly,
		"{path: /ws, mode: overlay}":  overlay,
		"{path: ws, mode: overlay}":   {Destination: render.WorkspaceDir, Kind: render.MountOverlay, Source: "/specs/ws"},
	} {
		r := compileSpec(t, workspaceSpec(workspace))
		var got render.Mount
		for _, m := range r.Mounts {
			if m.Destination == render.WorkspaceDir {
				got = m
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("workspace %s: mount %+v, want %+v", workspace, got, want)
		}
	}
	// The string form and the explicit read-only mapping are the same render.
	a, _, _ := compileSpec(t, workspaceSpec("/ws")).Digest()
	b, _, _ := compileSpec(t, workspaceSpec("{path: /ws, mode: readonly}")).Digest()
	if a != b {
		t.Errorf("read-only forms differ: %s vs %s", a, b)
	}
}

func TestWorkspacePatchArtifactNeedsOverlay(t *testing.T) {
	wantDiagnostic(t, workspaceSpec("/ws", "  artifacts: [workspace.patch]"), "spec.artifacts[0]", 7, 15, "only for an overlay workspace")
	compileSpec(t, workspaceSpec("{path: /ws, mode: overlay}", "  artifacts: [workspace.patch]"))
}

func TestScriptWriteIntoOverlayWorkspace(t *testing.T) {
	step := "  engine: {kind: scripted, path: /opt/s, script: [{write: {path: /workspace/a.txt, content: x}}]}"
	overlay := strings.Replace(workspaceSpec("{path: /ws, mode: overlay}"), "  engine: {kind: exec, path: /bin/true}", step, 1)
	compileSpec(t, overlay)
	readOnly := strings.Replace(workspaceSpec("/ws"), "  engine: {kind: exec, path: /bin/true}", step, 1)
	if diags := specDiagnostics(t, readOnly); len(diags) != 1 || !strings.Contains(diags[0].Message, "outside the writable run dir") {
		t.Errorf("a write into a read-only workspace: %v", diags)
	}
}
