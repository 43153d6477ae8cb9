package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	ctroci "github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"hookbox.dev/hookbox/compiler"
	"hookbox.dev/hookbox/internal/initsecrets"
	"hookbox.dev/hookbox/render"
)

var update = flag.Bool("update", false, "rewrite golden files")

// withOnly builds containerd's default spec with one option applied.
func withOnly(t *testing.T, opt ctroci.SpecOpts) *specs.Spec {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), Namespace)
	s, err := ctroci.GenerateSpec(ctx, nil, &containers.Container{ID: "t"}, opt)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sampleRender(t *testing.T) *render.Render {
	t.Helper()
	spec := `apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: sample}
spec:
  engine: {kind: claude, path: /opt/claude}
  prompt: review
  workspace: /src/ws
  env: {allow: [LANG], set: {MODE: ci}}
  secrets: [API_KEY]
  limits: {memory: 512Mi, pids: 64, cpus: 1500m}
`
	parsed, err := compiler.Parse([]byte(spec), "sample.yaml", "/src", nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := compiler.Compile(parsed[0])
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestReadonlyRootfs(t *testing.T) {
	s := withOnly(t, WithReadonlyRootfs("/runs/x/rootfs"))
	if s.Root == nil || s.Root.Path != "/runs/x/rootfs" || !s.Root.Readonly {
		t.Errorf("root %+v", s.Root)
	}
}

func TestProcessEnvIsExactlyTheRender(t *testing.T) {
	r := sampleRender(t)
	s := withOnly(t, WithProcess(r, map[string]string{"LANG": "C.UTF-8"}))
	want := []string{"API_KEY=" + PlaceholderValue, "HOME=/run/hookbox/home", "LANG=C.UTF-8", "MODE=ci", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, e := range r.Process.Env {
		if e.Name == "SHELL" { // Claude Code's profile: bash where this host has it
			want = append(want, "SHELL="+e.Value)
		}
	}
	// The secret's value comes from hookbox-init (WithProcess).
	want = append(want, initsecrets.EnvName+"=API_KEY")
	if !slices.Equal(s.Process.Env, want) {
		t.Errorf("env %q, want %q", s.Process.Env, want)
	}
	if !slices.Equal(s.Process.Args, r.Process.Argv) || s.Process.Cwd != "/workspace" || s.Process.Terminal {
		t.Errorf("process %+v", s.Process)
	}
	plan := withOnly(t, WithProcess(r, nil))
	if !slices.Contains(plan.Process.Env, "API_KEY="+PlaceholderValue) {
		t.Errorf("without values, resolved variables carry the placeholder: %q", plan.Process.Env)
	}
}

func TestUnprivilegedUser(t *testing.T) {
	s := withOnly(t, WithUnprivilegedUser(65532, 65532))
	if s.Process.User.UID != 65532 || s.Process.User.GID != 65532 || len(s.Process.User.AdditionalGids) != 0 {
		t.Errorf("user %+v", s.Process.User)
	}
	ctx := namespaces.WithNamespace(context.Background(), Namespace)
	if _, err := ctroci.GenerateSpec(ctx, nil, &containers.Container{ID: "t"}, WithUnprivilegedUser(0, 0)); err == nil {
		t.Error("uid 0 must be refused")
	}
}

func TestNoCapabilities(t *testing.T) {
	caps := withOnly(t, WithNoCapabilities()).Process.Capabilities
	for name, set := range map[string][]string{"bounding": caps.Bounding, "effective": caps.Effective,
		"permitted": caps.Permitted, "inheritable": caps.Inheritable, "ambient": caps.Ambient} {
		if len(set) != 0 {
			t.Errorf("%s capabilities %q, want none", name, set)
		}
	}
}

func TestIsolatedNamespaces(t *testing.T) {
	s := withOnly(t, WithIsolatedNamespaces())
	for _, want := range isolatedNamespaces {
		i := slices.IndexFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == want })
		if i < 0 || s.Linux.Namespaces[i].Path != "" {
			t.Errorf("namespace %s must be new, got %+v", want, s.Linux.Namespaces)
		}
	}
}

func TestLimits(t *testing.T) {
	res := withOnly(t, WithLimits(render.Limits{MemoryBytes: 1 << 30, Pids: 77, MilliCPUs: 1500})).Linux.Resources
	if *res.Memory.Limit != 1<<30 || *res.Memory.Swap != 1<<30 {
		t.Errorf("memory %+v (swap must equal the limit: no swap)", res.Memory)
	}
	if *res.Pids.Limit != 77 {
		t.Errorf("pids %+v", res.Pids)
	}
	if *res.CPU.Quota != 150000 || *res.CPU.Period != 100000 {
		t.Errorf("cpu quota %d period %d, want 150000/100000", *res.CPU.Quota, *res.CPU.Period)
	}
	if res := withOnly(t, WithLimits(render.Limits{})).Linux.Resources; res.CPU != nil && res.CPU.Quota != nil {
		t.Errorf("no CPU limit requested, got %+v", res.CPU)
	}
}

func TestNofile(t *testing.T) {
	s := withOnly(t, WithNofile(4096))
	i := slices.IndexFunc(s.Process.Rlimits, func(l specs.POSIXRlimit) bool { return l.Type == "RLIMIT_NOFILE" })
	if i < 0 || s.Process.Rlimits[i].Soft != 4096 || s.Process.Rlimits[i].Hard != 4096 {
		t.Errorf("rlimits %+v", s.Process.Rlimits)
	}
}

func TestDevMountsAndNoRunMount(t *testing.T) {
	s := withOnly(t, WithNoexecDev())
	for _, m := range s.Mounts {
		if m.Destination == "/dev" && !slices.Contains(m.Options, "noexec") {
			t.Errorf("/dev must be noexec: %q", m.Options)
		}
	}
	s = withOnly(t, WithShmInodes())
	if i := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == "/dev/shm" }); i < 0 || !slices.Contains(s.Mounts[i].Options, "nr_inodes=4096") {
		t.Errorf("/dev/shm must have an inode limit: %+v", s.Mounts)
	}
	s = withOnly(t, ctroci.WithoutRunMount)
	for _, m := range s.Mounts {
		if m.Destination == "/run" {
			t.Error("the default /run tmpfs would be a writable, executable place")
		}
	}
}

func TestPlannedMountsCannotReplaceDefaults(t *testing.T) {
	ctx := namespaces.WithNamespace(context.Background(), Namespace)
	_, err := ctroci.GenerateSpec(ctx, nil, &containers.Container{ID: "t"}, WithPlannedMounts([]specs.Mount{{Destination: "/proc", Type: "bind", Source: "/"}}))
	if err == nil {
		t.Fatal("a planned mount over /proc must be refused")
	}
}

// No secret's value is ever in the spec (containerd writes it to disk):
// the secret's entry holds the placeholder, in its place, and the init is
// told which secrets to read; a host variable's value is in the spec and
// Redact takes it out.
func TestSecretsNeverInTheSpec(t *testing.T) {
	r := sampleRender(t)
	// Even a secret's value handed in as a host value stays out.
	spec, err := Generate(context.Background(), r, Launch{RunID: "r1", Rootfs: "rootfs", HostValues: map[string]string{"LANG": "hbx-sentinel-host", "API_KEY": "hbx-secret"}})
	if err != nil {
		t.Fatal(err)
	}
	if data, _ := json.Marshal(spec); bytes.Contains(data, []byte("hbx-secret")) {
		t.Errorf("the spec holds the secret's value: %q", spec.Process.Env)
	}
	if !slices.Contains(spec.Process.Env, "API_KEY="+PlaceholderValue) || spec.Process.Env[len(spec.Process.Env)-1] != initsecrets.EnvName+"=API_KEY" {
		t.Errorf("the secret's entry and the init's list: %q", spec.Process.Env)
	}
	redacted := Redact(spec, r)
	data, _ := json.Marshal(redacted)
	if bytes.Contains(data, []byte("hbx-sentinel")) {
		t.Errorf("redacted spec still holds a resolved value")
	}
	if !slices.Contains(spec.Process.Env, "LANG=hbx-sentinel-host") {
		t.Error("Redact must not modify its input")
	}

	r.Init = nil
	if _, err := Generate(context.Background(), r, Launch{RunID: "r1", Rootfs: "rootfs", HostValues: map[string]string{}}); err == nil || !strings.Contains(err.Error(), "secrets API_KEY reach the engine only through hookbox-init") {
		t.Errorf("a render without an init cannot get its secrets: %v", err)
	}
}

// TestSpecGolden: the full spec of a sample run, every option applied.
func TestSpecGolden(t *testing.T) {
	r := sampleRender(t)
	spec, err := Generate(context.Background(), r, Launch{
		RunID: "run-0001", RenderDigest: "sha256:0000", Rootfs: "rootfs",
		Mounts: []specs.Mount{{Destination: "/workspace", Type: "bind", Source: "/src/ws", Options: []string{"rbind", "ro"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	golden := filepath.Join("testdata", "sample.spec.json")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("spec differs from %s (go test ./oci -update after checking):\n%s", golden, got)
	}
	for _, must := range []string{`"readonly": true`, `"noNewPrivileges": true`, `"cgroupsPath": "/hookbox/run-0001"`, `"seccomp"`, `"maskedPaths"`, `"readonlyPaths"`, `"hostname": "sample"`} {
		if !strings.Contains(string(got), must) {
			t.Errorf("spec lacks %s", must)
		}
	}
}

// seccompVerdict is what a profile does with a syscall called without
// argument conditions: the action of the unconditional rules naming it
// (all of them, to catch conflicts), else the default action.
func seccompVerdict(sc *specs.LinuxSeccomp, name string) []string {
	var got []string
	for _, r := range sc.Syscalls {
		if slices.Contains(r.Names, name) && len(r.Args) == 0 {
			v := string(r.Action)
			if r.ErrnoRet != nil {
				v += fmt.Sprintf("(%d)", *r.ErrnoRet)
			}
			got = append(got, v)
		}
	}
	if len(got) == 0 {
		got = append(got, string(sc.DefaultAction)+"(default)")
	}
	return got
}

// The run's seccomp profile fails every cross-process access syscall with
// EPERM: containerd's default allows ptrace and process_vm_{readv,writev}
// on kernels since 4.8, which let one process of a run inject code into
// another (docs/threat-model.md).
func TestSeccompDeniesProcessAccess(t *testing.T) {
	spec, err := Generate(context.Background(), sampleRender(t), Launch{RunID: "r1", Rootfs: "rootfs"})
	if err != nil {
		t.Fatal(err)
	}
	eperm := fmt.Sprintf("%s(%d)", specs.ActErrno, syscall.EPERM)
	for _, name := range []string{"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "process_madvise"} {
		if got := seccompVerdict(spec.Linux.Seccomp, name); !slices.Equal(got, []string{eperm}) {
			t.Errorf("%s: %v, want only %s", name, got, eperm)
		}
	}
	for _, name := range []string{"read", "execve", "openat"} {
		if got := seccompVerdict(spec.Linux.Seccomp, name); !slices.Equal(got, []string{string(specs.ActAllow)}) {
			t.Errorf("%s: %v, want allowed", name, got)
		}
	}
}

func TestNoProcessAccessOption(t *testing.T) {
	eperm := fmt.Sprintf("%s(%d)", specs.ActErrno, syscall.EPERM)
	t.Run("default-allow profile", func(t *testing.T) {
		s := withOnly(t, func(_ context.Context, _ ctroci.Client, _ *containers.Container, s *specs.Spec) error {
			s.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{
				{Names: []string{"ptrace", "read"}, Action: specs.ActAllow},
				{Names: []string{"process_vm_writev"}, Action: specs.ActAllow},
			}}
			return WithNoProcessAccess()(context.Background(), nil, nil, s)
		})
		for _, name := range processAccessSyscalls {
			if got := seccompVerdict(s.Linux.Seccomp, name); !slices.Equal(got, []string{eperm}) {
				t.Errorf("%s: %v, want only %s", name, got, eperm)
			}
		}
		if got := seccompVerdict(s.Linux.Seccomp, "read"); !slices.Equal(got, []string{string(specs.ActAllow)}) {
			t.Errorf("read: %v, the rule it shared with ptrace must stay", got)
		}
		if len(s.Linux.Seccomp.Syscalls) != 2 {
			t.Errorf("an emptied rule must go: %+v", s.Linux.Seccomp.Syscalls)
		}
	})
	t.Run("no profile", func(t *testing.T) {
		ctx := namespaces.WithNamespace(context.Background(), Namespace)
		if _, err := ctroci.GenerateSpec(ctx, nil, &containers.Container{ID: "t"}, WithNoProcessAccess()); err == nil {
			t.Error("without a seccomp profile the option must fail, not leave ptrace allowed")
		}
	})
}
