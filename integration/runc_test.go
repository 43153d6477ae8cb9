package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/compiler"
	"hookbox.dev/hookbox/images"
	"hookbox.dev/hookbox/internal/initseccomp"
	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/mounts"
	"hookbox.dev/hookbox/oci"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/runfiles"
)

// probeResult is one line of integration/probe's report.
type probeResult struct {
	Check  string `json:"check"`
	OK     bool   `json:"ok"`
	Errno  string `json:"errno"`
	Detail string `json:"detail"`
}

// programDir is a temporary directory for programs the container runs. It
// is outside /tmp: the container mounts a tmpfs over /tmp, and programs
// appear in the container at their host path.
func programDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "hookbox-it-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// buildStatic builds a Go program statically into dir.
func buildStatic(t *testing.T, pkg, dir string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg))
	if err := goBuild(out, pkg); err != nil {
		t.Fatal(err)
	}
	return out
}

// bundle is a runc bundle assembled the way hookbox assembles a run:
// runfiles tree over the base image as a read-only overlay rootfs, the
// host tmpfs run dir, the mount plan and the hardened spec.
type bundle struct {
	dir, runDir string
	render      *render.Render
	id          string
	// filter is the seccomp program the bundle's init installs.
	filter []byte
}

func assembleBundle(t *testing.T, spec string, specDir string) *bundle {
	t.Helper()
	ctx := context.Background()
	tmp := t.TempDir()
	parsed, err := compiler.Parse([]byte(spec), "spawn.yaml", specDir, os.ReadFile)
	if err != nil {
		t.Fatal(err)
	}
	r, err := compiler.Compile(parsed[0])
	if err != nil {
		t.Fatal(err)
	}

	store, err := runfiles.OpenStore(filepath.Join(tmp, "state"))
	if err != nil {
		t.Fatal(err)
	}
	// The init as plan.Runfiles places it (hookbox-init at render.InitPath).
	initBin := buildStatic(t, "hookbox.dev/hookbox/cmd/hookbox-init", programDir(t))
	res, err := runfiles.AssembleRender(ctx, store, r, images.MountPoints, map[string]string{r.Init.Path: initBin}, runfiles.RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := mounts.CheckPrograms(r); err != nil {
		t.Fatal(err)
	}

	base := filepath.Join(tmp, "base")
	if err := images.NewDefinition(nil).WriteRootfs(base); err != nil {
		t.Fatal(err)
	}
	b := &bundle{dir: filepath.Join(tmp, "bundle"), runDir: filepath.Join(tmp, "run"), render: r,
		id: fmt.Sprintf("hbx-it-%d", time.Now().UnixNano())}
	rootfs := filepath.Join(b.dir, "rootfs")
	mountRootfs(t, rootfs, []string{res.TreeDir, base})
	t.Cleanup(func() { exec.Command("runc", "delete", "--force", b.id).Run() })
	if err := mounts.Create(b.runDir, mounts.RunDirSize(r), r.Process.UID, r.Process.GID); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := mounts.Unmount(b.runDir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	configDir := filepath.Join(tmp, "etc")
	if err := os.MkdirAll(configDir, 0o755); err != nil {
		t.Fatal(err)
	}
	plan, err := mounts.MountPlan(r, mounts.HostPaths{ConfigDir: configDir, RunDir: b.runDir}, mounts.HostFeatures())
	if err != nil {
		t.Fatal(err)
	}
	if err := mounts.Validate(plan); err != nil {
		t.Fatal(err)
	}
	digest, _, err := r.Digest()
	if err != nil {
		t.Fatal(err)
	}
	s, err := oci.Generate(ctx, r, oci.Launch{RunID: b.id, RenderDigest: digest, Rootfs: "rootfs", Mounts: oci.MountsFromPlan(plan)})
	if err != nil {
		t.Fatal(err)
	}
	// As plan.NewContainer does: the init installs the profile's program.
	filter, err := oci.SeccompInInit(s)
	if err != nil || filter == nil {
		t.Fatalf("the seccomp program for the init: %d bytes, %v", len(filter), err)
	}
	b.filter = filter
	if err := os.WriteFile(filepath.Join(configDir, initseccomp.FileName), filter, 0o444); err != nil {
		t.Fatal(err)
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// mountRootfs mounts the read-only overlay of lowers (top first) at target,
// with the options hookbox gives containerd, for runc's rootfs path; the
// test's cleanup unmounts it.
func mountRootfs(t *testing.T, target string, lowers []string) {
	t.Helper()
	opts, err := mounts.RootfsOverlayOptions(lowers)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("overlay", target, "overlay", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, strings.Join(opts, ",")); err != nil {
		t.Fatalf("mount rootfs overlay at %s: %v", target, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
			t.Errorf("cleanup: unmount rootfs %s: %v", target, err)
		}
	})
}

func (b *bundle) run(t *testing.T) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "runc", "run", "--bundle", b.dir, b.id)
	var out, errOut bytes.Buffer
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// TestRuncSandbox runs the probe as the engine of a spawn under plain runc
// with the OCI spec, mount plan and rootfs hookbox generates, and checks
// every claim of the sandbox.
func TestRuncSandbox(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.Runc)
	tmp := t.TempDir()
	probe := buildStatic(t, "hookbox.dev/hookbox/integration/probe", programDir(t))
	ws := filepath.Join(tmp, "ws")
	grant := filepath.Join(tmp, "docs")
	for _, d := range []string{ws, grant} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ws, "README.md"), []byte("hello workspace\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := `apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: probe}
spec:
  engine: {kind: exec, path: ` + probe + `}
  workspace: ` + ws + `
  addDirs: [` + grant + `]
  limits: {memory: 256Mi, pids: 64, tmpfs: 16Mi}
`
	b := assembleBundle(t, spec, tmp)
	stdout, stderr, err := b.run(t)
	if err != nil {
		t.Fatalf("runc run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	results := map[string]probeResult{}
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		var r probeResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("probe output %q: %v", sc.Text(), err)
		}
		results[r.Check] = r
	}
	expect := func(check string, ok bool, errnos ...string) {
		t.Helper()
		r, found := results[check]
		switch {
		case !found:
			t.Errorf("%s: the probe did not report it", check)
		case r.OK != ok:
			t.Errorf("%s: ok=%v, want %v (%+v)", check, r.OK, ok, r)
		case !ok && len(errnos) > 0 && !slices.Contains(errnos, r.Errno):
			t.Errorf("%s: failed with %s, want one of %v", check, r.Errno, errnos)
		}
	}
	expect("read-workspace", true)
	if results["read-workspace"].Detail != "hello workspace" {
		t.Errorf("read /workspace/README.md: %q", results["read-workspace"].Detail)
	}
	expect("write-run-dir", true)
	expect("write-root", false, "EROFS")
	expect("write-workspace", false, "EROFS")
	expect("write-runfiles", false, "EROFS")
	expect("replace-runfile", false, "EROFS", "ETXTBSY", "text file busy")
	expect("write-config", false, "EROFS")
	expect("exec-run-dir", false, "EACCES")
	expect("exec-tmp", false, "EACCES")
	expect("exec-dev-shm", false, "EACCES")
	// seccomp alone (no tracer, so no BPF LSM here) denies the syscalls
	// of cross-process access; /proc/<pid>/mem is the LSM's.
	expect("inject-sibling", true)
	expect("ptrace-attach", false, "EPERM")
	expect("process-vm-writev", false, "EPERM")
	expect("pidfd-getfd", false, "EPERM")
	// The profile admits the native ABI alone: a syscall through the
	// 32-bit entry kills its thread.
	expect("compat-syscall", false, compatDenied...)
	t.Logf("proc-mem-write without the tracer: %+v", results["proc-mem-write"])
	if got := results["interfaces"].Detail; got != "lo" {
		t.Errorf("interfaces %q, want only lo", got)
	}
	expect("dial-out", false)
	for check, want := range map[string]string{
		"uid": "65532:65532", "cap-eff": "0000000000000000", "cap-bnd": "0000000000000000",
		"no-new-privs": "1", "seccomp": "2", "hostname": "probe",
	} {
		if got := results[check].Detail; got != want {
			t.Errorf("%s = %q, want %q", check, got, want)
		}
	}
	// The run dir is the host tmpfs: what the probe wrote is there to harvest.
	if data, err := os.ReadFile(filepath.Join(b.runDir, "probe.txt")); err != nil || string(data) != "probe\n" {
		t.Errorf("the probe's write did not reach the host tmpfs: %q %v", data, err)
	}
	t.Logf("root entries seen by the engine: %s", results["root-entries"].Detail)
}
