package mounts

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/render"
)

// treeOf maps every file and symlink under root to its content (symlinks:
// "-> target"), with "+x" appended for executables.
func treeOf(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			out[rel] = "-> " + target
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[rel] = string(data)
		if fi.Mode()&0o100 != 0 {
			out[rel] += "+x"
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writeDeep is writeFile with the parent directories made.
func writeDeep(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	mkdirs(t, filepath.Dir(p))
	writeFile(t, p, content, mode)
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", src+"/.", dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
}

// applyPatch applies patch to a copy of lower with git apply (after
// git apply --check) and returns the resulting tree.
func applyPatch(t *testing.T, lower, patch string) map[string]string {
	t.Helper()
	work := t.TempDir()
	copyTree(t, lower, work)
	for _, args := range [][]string{{"apply", "--check", patch}, {"apply", patch}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(work))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return treeOf(t, work)
}

// fakeLayers builds a lower tree and an upper layer by hand, the way
// overlayfs records changes: copied-up files, whiteouts (0:0 character
// devices, which need root) and an opaque directory (a trusted xattr).
func fakeLayers(t *testing.T) OverlayLayers {
	testenv.RequireRoot(t)
	base := t.TempDir()
	l := StoreLayers(filepath.Join(base, "lower"), filepath.Join(base, "store"))
	mkdirs(t, l.Lower, l.Upper, l.Work)
	writeDeep(t, filepath.Join(l.Lower, "keep.txt"), "same\n", 0o644)
	writeDeep(t, filepath.Join(l.Lower, "edit.txt"), "one\ntwo\n", 0o644)
	writeDeep(t, filepath.Join(l.Lower, "gone.txt"), "bye\n", 0o644)
	writeDeep(t, filepath.Join(l.Lower, "touched.txt"), "unchanged\n", 0o644)
	writeDeep(t, filepath.Join(l.Lower, "run.sh"), "echo\n", 0o644)
	writeDeep(t, filepath.Join(l.Lower, "old/a"), "a\n", 0o644)
	writeDeep(t, filepath.Join(l.Lower, "old/deep/b"), "b\n", 0o644)
	writeDeep(t, filepath.Join(l.Lower, "swap/x"), "x\n", 0o644)
	writeDeep(t, filepath.Join(l.Lower, "swap/y"), "y\n", 0o644)
	writeDeep(t, filepath.Join(l.Lower, "sub/inner.txt"), "inner\n", 0o644)
	symlink(t, "keep.txt", filepath.Join(l.Lower, "link"))

	writeDeep(t, filepath.Join(l.Upper, "edit.txt"), "one\n2\n", 0o644)
	writeDeep(t, filepath.Join(l.Upper, "touched.txt"), "unchanged\n", 0o644)
	writeDeep(t, filepath.Join(l.Upper, "run.sh"), "echo\n", 0o755)
	writeDeep(t, filepath.Join(l.Upper, "new dir/new.bin"), "\x00\x01binary\xff", 0o644)
	writeDeep(t, filepath.Join(l.Upper, "sub/inner.txt"), "changed\n", 0o644)
	writeDeep(t, filepath.Join(l.Upper, "swap/y"), "Y\n", 0o644)
	symlink(t, "edit.txt", filepath.Join(l.Upper, "link"))
	for _, w := range []string{"gone.txt", "old"} {
		if err := unix.Mknod(filepath.Join(l.Upper, w), unix.S_IFCHR, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Setxattr(filepath.Join(l.Upper, "swap"), opaqueXattr, []byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(l.Upper, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestWalkUpper(t *testing.T) {
	l := fakeLayers(t)
	got, err := WalkUpper(l)
	if err != nil {
		t.Fatal(err)
	}
	want := WorkspaceChanges{
		Added:    []string{"new dir/new.bin"},
		Modified: []string{"edit.txt", "link", "run.sh", "sub/inner.txt", "swap/y"},
		Deleted:  []string{"gone.txt", "old/a", "old/deep/b", "swap/x"},
		Skipped:  []SkippedChange{{Path: "pipe", Kind: "p---------"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestWalkUpperUnreadableIsAnError(t *testing.T) {
	l := StoreLayers(filepath.Join(t.TempDir(), "lower"), filepath.Join(t.TempDir(), "missing-store"))
	if _, err := WalkUpper(l); err == nil {
		t.Fatal("a missing upper layer walked as no changes")
	}
}

func TestHarvestWorkspacePatchApplies(t *testing.T) {
	l := fakeLayers(t)
	lowerBefore := treeOf(t, l.Lower)
	dst := t.TempDir()
	diff, err := HarvestWorkspace(l, dst, filepath.Join(t.TempDir(), "scratch"))
	if err != nil {
		t.Fatal(err)
	}
	patch := filepath.Join(dst, render.WorkspacePatch)
	data, err := os.ReadFile(patch)
	if err != nil {
		t.Fatal(err)
	}
	if diff.PatchBytes != int64(len(data)) || !strings.Contains(string(data), "diff --git a/edit.txt b/edit.txt") || !strings.Contains(string(data), "GIT binary patch") {
		t.Fatalf("patch (%d bytes reported):\n%s", diff.PatchBytes, data)
	}
	got := applyPatch(t, l.Lower, patch)
	want := map[string]string{
		"keep.txt": "same\n", "edit.txt": "one\n2\n", "touched.txt": "unchanged\n", "run.sh": "echo\n+x",
		"new dir/new.bin": "\x00\x01binary\xff", "sub/inner.txt": "changed\n", "swap/y": "Y\n", "link": "-> edit.txt",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("patched tree:\n got %q\nwant %q", got, want)
	}
	if after := treeOf(t, l.Lower); !reflect.DeepEqual(after, lowerBefore) {
		t.Errorf("the lower layer changed: %q", after)
	}
	var changes WorkspaceChanges
	raw, err := os.ReadFile(filepath.Join(dst, render.WorkspaceChanges))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &changes); err != nil || !reflect.DeepEqual(changes, diff.Changes) {
		t.Errorf("%s: %v %+v", render.WorkspaceChanges, err, changes)
	}
}

func TestHarvestWorkspaceNoChanges(t *testing.T) {
	base := t.TempDir()
	l := StoreLayers(filepath.Join(base, "lower"), filepath.Join(base, "store"))
	mkdirs(t, l.Lower, l.Upper, l.Work)
	writeDeep(t, filepath.Join(l.Lower, "a"), "a", 0o644)
	dst := t.TempDir()
	diff, err := HarvestWorkspace(l, dst, filepath.Join(base, "scratch"))
	if err != nil || !diff.Changes.Empty() || diff.PatchBytes != 0 {
		t.Fatalf("%+v, %v", diff, err)
	}
	if _, err := os.Stat(filepath.Join(dst, render.WorkspacePatch)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an empty patch was written: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, render.WorkspaceChanges)); err != nil {
		t.Errorf("no %s: %v", render.WorkspaceChanges, err)
	}
}

// TestWorkspaceOverlayMount mounts the planned overlay on the host (the
// runtime does the same in the container's mount namespace), edits through
// it, and checks that the host workspace is untouched and the harvested
// patch reproduces the edited tree.
func TestWorkspaceOverlayMount(t *testing.T) {
	testenv.RequireRoot(t)
	base := t.TempDir()
	lower := filepath.Join(base, "ws")
	writeDeep(t, filepath.Join(lower, "edit.txt"), "old\n", 0o644)
	writeDeep(t, filepath.Join(lower, "gone.txt"), "bye\n", 0o644)
	writeDeep(t, filepath.Join(lower, "dir/f"), "f\n", 0o644)
	before := treeOf(t, lower)
	host := HostPaths{RunDir: filepath.Join(base, "tmpfs"), WorkspaceStore: filepath.Join(base, "store")}
	r := sampleRender(lower)
	r.Files = nil
	r.Mounts[0] = render.Mount{Destination: render.WorkspaceDir, Kind: render.MountOverlay, Source: lower}
	p, err := MountPlan(r, host, Features{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidateBeforeLaunch(p, host); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(p.Mounts, func(m Mount) bool { return m.Type == TypeOverlay })
	m := p.Mounts[i]
	if err := CreateWorkspaceStore(host.WorkspaceStore, p.WorkspaceStore, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	defer Unmount(host.WorkspaceStore)
	if err := Create(host.RunDir, p.RunDir, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	defer Unmount(host.RunDir)
	if err := Validate(p); err != nil {
		t.Fatal(err)
	}
	merged := filepath.Join(base, "merged")
	mkdirs(t, merged)
	var flags uintptr
	var data []string
	for _, o := range m.Options {
		switch o {
		case "nosuid":
			flags |= unix.MS_NOSUID
		case "nodev":
			flags |= unix.MS_NODEV
		case "noexec":
			flags |= unix.MS_NOEXEC
		default:
			data = append(data, o)
		}
	}
	if err := unix.Mount("overlay", merged, "overlay", flags, strings.Join(data, ",")); err != nil {
		t.Fatalf("mount overlay %q: %v", data, err)
	}
	writeDeep(t, filepath.Join(merged, "edit.txt"), "new\n", 0o644)
	writeDeep(t, filepath.Join(merged, "added.txt"), "hello\n", 0o644)
	if err := os.Remove(filepath.Join(merged, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(merged, "dir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(merged, "dir"), 0o755); err != nil { // opaque now
		t.Fatal(err)
	}
	writeDeep(t, filepath.Join(merged, "dir/g"), "g\n", 0o644)
	wantTree := treeOf(t, merged)
	if err := unix.Unmount(merged, 0); err != nil {
		t.Fatal(err)
	}
	if got := treeOf(t, lower); !reflect.DeepEqual(got, before) {
		t.Fatalf("the host workspace changed: %q", got)
	}
	dst := t.TempDir()
	diff, err := HarvestWorkspace(*m.Overlay, dst, filepath.Join(base, "scratch"))
	if err != nil {
		t.Fatal(err)
	}
	want := WorkspaceChanges{Added: []string{"added.txt", "dir/g"}, Modified: []string{"edit.txt"}, Deleted: []string{"dir/f", "gone.txt"}}
	if !reflect.DeepEqual(diff.Changes, want) {
		t.Errorf("changes %+v, want %+v", diff.Changes, want)
	}
	if got := applyPatch(t, lower, filepath.Join(dst, render.WorkspacePatch)); !reflect.DeepEqual(got, wantTree) {
		t.Errorf("patched tree %q, want %q", got, wantTree)
	}
}

func TestOverlayPlanAndShape(t *testing.T) {
	hp := HostPaths{ConfigDir: host.ConfigDir, RunDir: host.RunDir, WorkspaceStore: "/var/lib/hookbox/runs/r1/workspace-store"}
	r := sampleRender("/src/ws")
	r.Mounts[0] = render.Mount{Destination: render.WorkspaceDir, Kind: render.MountOverlay, Source: "/src/ws"}
	p, err := MountPlan(r, hp, Features{RecursiveReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	m := p.Mounts[slices.IndexFunc(p.Mounts, func(m Mount) bool { return m.Destination == render.WorkspaceDir })]
	wantOpts := []string{"nosuid", "nodev", "noexec", "redirect_dir=off", "metacopy=off", "index=off", "xino=off",
		"lowerdir=/src/ws", "upperdir=" + hp.WorkspaceStore + "/upper", "workdir=" + hp.WorkspaceStore + "/work"}
	if m.Type != TypeOverlay || m.Source != "overlay" || !slices.Equal(m.Options, wantOpts) || p.WorkspaceStore != RunDirSize(r) {
		t.Fatalf("overlay %+v (store %+v)", m, p.WorkspaceStore)
	}
	if _, err := MountPlan(r, HostPaths{ConfigDir: host.ConfigDir, RunDir: host.RunDir}, Features{}); err == nil {
		t.Error("an overlay without a workspace store was planned")
	}
	looser := map[string]func(m *Mount){
		"extra option": func(m *Mount) { m.Options = append(m.Options, "userxattr") },
		"missing option": func(m *Mount) {
			m.Options = slices.DeleteFunc(slices.Clone(m.Options), func(o string) bool { return o == "redirect_dir=off" })
		},
		"other destination": func(m *Mount) { m.Destination = "/grants/ws" },
		"no layers":         func(m *Mount) { m.Overlay = nil },
		"upper elsewhere": func(m *Mount) {
			l := *m.Overlay
			l.Upper = "/var/tmp/upper"
			m.Overlay = &l
			m.Options = overlayOptions(l)
		},
		"store in workspace": func(m *Mount) {
			l := StoreLayers("/src/ws", "/src/ws/.store")
			m.Overlay, m.Options = &l, overlayOptions(l)
		},
		"comma in lower": func(m *Mount) {
			l := StoreLayers("/src/a,b", hp.WorkspaceStore)
			m.Overlay, m.Options = &l, overlayOptions(l)
		},
		"lower is the upper": func(m *Mount) {
			l := *m.Overlay
			l.Lower = l.Upper
			m.Overlay, m.Options = &l, overlayOptions(l)
		},
	}
	for name, change := range looser {
		q := Plan{Mounts: slices.Clone(p.Mounts)}
		i := slices.IndexFunc(q.Mounts, func(m Mount) bool { return m.Type == TypeOverlay })
		change(&q.Mounts[i])
		SortMounts(q.Mounts)
		if err := validateShape(q); err == nil {
			t.Errorf("%s: accepted %+v", name, q.Mounts[i])
		}
	}
	bindWithLayers := Plan{Mounts: []Mount{bindRO("/workspace", "/src/ws")}}
	bindWithLayers.Mounts[0].Overlay = m.Overlay
	if err := validateShape(bindWithLayers); err == nil {
		t.Error("a bind with overlay layers was accepted")
	}
}
