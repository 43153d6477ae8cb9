package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/render"
)

// overlaySpec is e.spec with the workspace as an overlay.
func (e *env) overlaySpec(name, script string, extra ...string) string {
	e.t.Helper()
	file := e.spec(name, script, extra...)
	data, err := os.ReadFile(file)
	if err != nil {
		e.t.Fatal(err)
	}
	content := strings.Replace(string(data), "  workspace: ./ws\n", "  workspace: {path: ./ws, mode: overlay}\n", 1)
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return file
}

// snapshot maps every file under root to its content and mode.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		entry := fi.Mode().String()
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			entry += " " + string(data)
		}
		out[rel] = entry
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestWorkspaceOverlayEdit: the engine edits, adds and deletes files under
// /workspace; the host workspace stays byte-identical, and the harvested
// patch applied to a copy gives the edited tree.
func TestWorkspaceOverlayEdit(t *testing.T) {
	e := newEnv(t)
	ws := filepath.Join(e.specDir, "ws")
	// The container user is not the host owner: the files it edits must
	// be writable to it in the host tree too (the overlay keeps them).
	for name, content := range map[string]string{"edit.txt": "old line\n", "gone.txt": "delete me\n"} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o666); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(ws, name), 0o666)
	}
	before := snapshot(t, ws)
	spec := e.overlaySpec("overlay-edit", `- write: {path: /workspace/edit.txt, content: "new line\n"}
		- write: {path: /workspace/added/new.txt, content: "fresh\n"}
		- exec: [/usr/bin/rm, /workspace/gone.txt]
		- exit: 0`, "  tools: [/usr/bin/rm]", "  artifacts: [workspace.patch]")
	r := e.run(spec)
	res := r.mustResult(t)
	if res.Status != launcher.StatusCompleted {
		t.Fatalf("status %s %v %s\n%s", res.Status, res.Reasons, res.Error, r.stderr)
	}
	if got := snapshot(t, ws); !reflect.DeepEqual(got, before) {
		t.Fatalf("the host workspace changed:\n got %q\nwant %q", got, before)
	}
	want := &launcher.WorkspaceResult{Mode: "overlay", Added: 1, Modified: 1, Deleted: 1, PatchBytes: res.Workspace.PatchBytes}
	if !reflect.DeepEqual(res.Workspace, want) || res.Workspace.PatchBytes <= 0 {
		t.Fatalf("workspace %+v", res.Workspace)
	}
	if onDisk := readResultFile(t, res); !reflect.DeepEqual(onDisk.Workspace, res.Workspace) {
		t.Errorf("result.json workspace %+v", onDisk.Workspace)
	}
	patch := filepath.Join(res.RecordDir, launcher.ArtifactDir, render.WorkspacePatch)
	if fi, err := os.Stat(patch); err != nil || fi.Size() != res.Workspace.PatchBytes {
		t.Fatalf("patch %v (%d bytes reported)", err, res.Workspace.PatchBytes)
	}
	if len(res.Artifacts) != 1 || res.Artifacts[0].Status != "found" {
		t.Errorf("artifacts %+v", res.Artifacts)
	}
	copyDir := t.TempDir()
	if out, err := exec.Command("cp", "-a", ws+"/.", copyDir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	for _, args := range [][]string{{"apply", "--check", patch}, {"apply", patch}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = copyDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	files := map[string]string{}
	for _, name := range []string{"README.md", "edit.txt", "added/new.txt", "gone.txt"} {
		if data, err := os.ReadFile(filepath.Join(copyDir, name)); err == nil {
			files[name] = string(data)
		}
	}
	wantFiles := map[string]string{"README.md": "workspace\n", "edit.txt": "new line\n", "added/new.txt": "fresh\n"}
	if !reflect.DeepEqual(files, wantFiles) {
		t.Errorf("patched copy %q, want %q", files, wantFiles)
	}
	if mounted := strings.Count(readFile(t, "/proc/self/mountinfo"), res.RecordDir); mounted != 0 {
		t.Errorf("%d mounts left under %s", mounted, res.RecordDir)
	}
}

// TestWorkspaceOverlayUnchangedIsEmpty: a run whose contract is an edit
// (it declares workspace.patch) and changes nothing is completed_empty.
func TestWorkspaceOverlayUnchangedIsEmpty(t *testing.T) {
	e := newEnv(t)
	spec := e.overlaySpec("overlay-empty", "- print: nothing to do\n- exit: 0", "  artifacts: [workspace.patch]")
	r := e.run(spec)
	res := r.mustResult(t)
	if res.Status != launcher.StatusCompletedEmpty || res.Workspace == nil || res.Workspace.PatchBytes != 0 || res.Workspace.Error != "" {
		t.Fatalf("status %s %v workspace %+v %s\n%s", res.Status, res.Reasons, res.Workspace, res.Error, r.stderr)
	}
	if !strings.Contains(strings.Join(res.Reasons, ","), launcher.ReasonWorkspaceUnchanged) {
		t.Errorf("reasons %v", res.Reasons)
	}
	if _, err := os.Stat(filepath.Join(res.RecordDir, launcher.ArtifactDir, render.WorkspaceChanges)); err != nil {
		t.Errorf("no %s: %v", render.WorkspaceChanges, err)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
