package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	hostfacts "hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/internal/host/hosttest"
	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/launcher/daemon"
)

func TestContainerdCheck(t *testing.T) {
	down := fmt.Errorf("%w at /run/containerd/containerd.sock: no socket there", daemon.ErrNoAnswer)
	denied := fmt.Errorf("%w at /run/containerd/containerd.sock: permission denied: %w", daemon.ErrNoAnswer, syscall.EACCES)
	tests := []struct {
		name              string
		f                 containerdFacts
		status            Status
		detailHas, fixHas string
	}{
		{"system answers", containerdFacts{Address: daemon.SystemAddress, Source: daemon.SourceSystem, Version: "1.6.20~ds1", Binary: "/usr/bin/containerd"}, OK,
			"containerd 1.6.20~ds1 answers at /run/containerd/containerd.sock (system); binary /usr/bin/containerd", ""},
		{"flag down", containerdFacts{Address: "/x.sock", Source: daemon.SourceFlag, PingErr: down, Binary: "/usr/bin/containerd"}, Fail, "(from --address)", "--address"},
		{"env down", containerdFacts{Address: "/x.sock", Source: daemon.SourceEnv, PingErr: down, Binary: "/usr/bin/containerd"}, Fail, "(from $HOOKBOX_CONTAINERD_ADDRESS)", "unset HOOKBOX_CONTAINERD_ADDRESS"},
		{"managed answers", containerdFacts{Source: daemon.SourceSystem, PingErr: down, ManagedAddress: "/run/hookbox/containerd/containerd.sock", ManagedVersion: "1.6.20~ds1", ManagedPID: 42, Binary: "/usr/bin/containerd"}, OK,
			"managed containerd 1.6.20~ds1 answers at /run/hookbox/containerd/containerd.sock (pid 42)", ""},
		{"manageable", containerdFacts{Source: daemon.SourceSystem, PingErr: down, Binary: "/usr/bin/containerd"}, OK,
			"hookbox run will start a managed containerd (binary /usr/bin/containerd)", ""},
		{"no binary", containerdFacts{Source: daemon.SourceSystem, PingErr: down}, Fail, "no containerd binary on PATH", "apt-get install containerd runc, or pass --address"},
		{"not root", containerdFacts{Source: daemon.SourceSystem, PingErr: down, Binary: "/usr/bin/containerd", EUID: 1000}, Fail, "needs root", "rootless"},
		{"permission denied", containerdFacts{Source: daemon.SourceSystem, PingErr: denied, Binary: "/usr/bin/containerd", EUID: 1000}, Fail, "permission denied", "run hookbox as root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkIs(t, containerdCheck(tt.f), CheckContainerd, tt.status, tt.detailHas, tt.fixHas)
		})
	}
}

func TestRuncCheck(t *testing.T) {
	debian := "runc version 1.1.5+ds1\ncommit: 1.1.5+ds1-1+deb12u1\nspec: 1.0.2-dev\ngo: go1.19.8\nlibseccomp: 2.5.4\n"
	checkIs(t, runcCheck(runcFacts{Path: "/usr/sbin/runc", Output: debian}), CheckRunc, OK, "runc 1.1.5+ds1 at /usr/sbin/runc", "")
	checkIs(t, runcCheck(runcFacts{LookErr: exec.ErrNotFound}), CheckRunc, Fail, "not on PATH", "apt-get install runc")
	checkIs(t, runcCheck(runcFacts{Path: "/usr/sbin/runc", RunErr: errors.New("exit status 2")}), CheckRunc, Fail, "--version failed: exit status 2", "reinstall")
	checkIs(t, runcCheck(runcFacts{Path: "/usr/local/bin/runc", Output: "crun version 1.8.1\n"}), CheckRunc, Warn, "printed no version", "is runc")
}

// gatherRunc runs the binary it finds: a stand-in script proves the wiring.
func TestGatherRunc(t *testing.T) {
	dir := t.TempDir()
	script := dir + "/runc"
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho 'runc version 9.9.9'\necho 'spec: 1.2.0'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := gatherRunc(context.Background(), func(string) (string, error) { return script, nil })
	checkIs(t, runcCheck(f), CheckRunc, OK, "runc 9.9.9 at "+script, "")
}

// A whole report from a fixture host laid out like this machine, with
// tracefs mounted and rootless prerequisites in place.
func TestReportFromFixture(t *testing.T) {
	root := fixture(t, map[string]string{
		"proc/self/mountinfo":                       hosttest.MountinfoHybrid + "50 23 0:12 / /sys/kernel/tracing rw - tracefs tracefs rw\n",
		"proc/filesystems":                          filesystemsFull,
		"proc/self/status":                          "CapEff:\t000001fffeffffff\n",
		"proc/self/ns/net":                          "",
		"proc/sys/kernel/unprivileged_bpf_disabled": "2\n",
		"proc/sys/kernel/osrelease":                 "6.18.44-fc-v509\n",
		"proc/sys/user/max_user_namespaces":         "96365\n",
		"sys/kernel/btf/vmlinux":                    "BTF",
		"sys/kernel/security/lsm":                   "lockdown,capability,landlock,bpf",
		"etc/subuid":                                "root:100000:65536\n",
		"etc/subgid":                                "root:100000:65536\n",
	})
	h := host{root: root, user: "root", lookPath: func(name string) (string, error) { return "/usr/bin/" + name, nil }}
	cf := containerdFacts{Address: daemon.SystemAddress, Source: daemon.SourceSystem, Version: "1.6.20~ds1", Binary: "/usr/bin/containerd"}
	rc := runcFacts{Path: "/usr/sbin/runc", Output: "runc version 1.1.5+ds1\n"}
	r := h.report(cf, rc)

	var names []string
	for _, c := range r.Checks {
		names = append(names, c.Name)
		if c.Status != OK {
			t.Errorf("%s: %s %q (fix %q)", c.Name, c.Status, c.Detail, c.Fix)
		}
	}
	wantNames := []string{"containerd", "runc", "cgroup-layout", "cgroup-controllers", "overlayfs", "tmpfs", "tracefs", "btf", "bpf", "bpf-lsm", "user-namespaces", "rootlesskit", "newuidmap", "subuid", "egress"}
	if !reflect.DeepEqual(names, wantNames) {
		t.Errorf("check order = %q", names)
	}
	want := Capabilities{
		CanTrace: true, CanEnforce: true, CanDeny: true, NetworkIsolation: true, UserNamespaces: true, Tmpfs: true,
		CgroupLimits: true, Rootless: true, Egress: true, CgroupLayout: "hybrid",
		Cgroup2Mount: "/sys/fs/cgroup/unified", TracefsMount: "/sys/kernel/tracing",
	}
	if r.Capabilities != want {
		t.Errorf("capabilities:\n got %+v\nwant %+v", r.Capabilities, want)
	}
	if r.Worst() != OK {
		t.Errorf("Worst = %s", r.Worst())
	}
	// Deterministic: the same host gives the same bytes.
	a, _ := json.Marshal(r)
	b, _ := json.Marshal(h.report(cf, rc))
	if string(a) != string(b) {
		t.Errorf("two reports differ:\n%s\n%s", a, b)
	}
	for _, key := range []string{`"can_trace":true`, `"can_enforce":true`, `"network_isolation":true`, `"user_namespaces":true`, `"tmpfs":true`, `"cgroup_limits":true`, `"rootless":true`, `"cgroup_layout":"hybrid"`, `"checks":[{"name":"containerd","status":"ok"`} {
		if !strings.Contains(string(a), key) {
			t.Errorf("JSON lacks %s: %s", key, a)
		}
	}

	// Without tracefs: no tracing, no enforcement; the rest unchanged.
	if err := os.WriteFile(root+"/proc/self/mountinfo", []byte(hosttest.MountinfoHybrid), 0o644); err != nil {
		t.Fatal(err)
	}
	r = h.report(cf, rc)
	if r.Capabilities.CanTrace || r.Capabilities.CanEnforce || r.Capabilities.CanDeny || r.Capabilities.TracefsMount != "" || r.Worst() != Warn {
		t.Errorf("without tracefs: %+v, worst %s", r.Capabilities, r.Worst())
	}

	// A non-root user without rootless prerequisites: nothing to mount
	// a tmpfs or isolate a network with.
	h.euid, h.user, h.uid = 1000, "alice", 1000
	h.lookPath = func(string) (string, error) { return "", exec.ErrNotFound }
	r = h.report(containerdFacts{Source: daemon.SourceSystem, PingErr: daemon.ErrNoAnswer}, runcFacts{LookErr: exec.ErrNotFound})
	c := r.Capabilities
	if c.Rootless || c.Tmpfs || c.NetworkIsolation || c.CgroupLimits || !c.UserNamespaces || r.Worst() != Fail {
		t.Errorf("unprivileged: %+v, worst %s", c, r.Worst())
	}
}

// TestRealHost runs the real probes as root on whatever host this is and
// checks them against what the host independently shows: the containerd
// check against which daemon answers (a system one, the managed one that
// `make demo` leaves running, or none yet), the cgroup checks against the
// one layout detector.
func TestRealHost(t *testing.T) {
	testenv.Require(t, testenv.Root, testenv.Containerd, testenv.Runc)
	ctx := context.Background()
	r := Run(ctx, Options{})
	out, _ := json.MarshalIndent(r, "", "  ")
	t.Logf("report:\n%s", out)
	byName := map[string]Check{}
	for _, c := range r.Checks {
		byName[c.Name] = c
		switch {
		case c.Status != OK && c.Status != Warn && c.Status != Fail:
			t.Errorf("%s: status %q", c.Name, c.Status)
		case c.Status != OK && c.Fix == "":
			t.Errorf("%s is %s without a fix", c.Name, c.Status)
		}
	}
	for _, name := range []string{CheckContainerd, CheckRunc, CheckCgroupLayout, CheckCgroupControllers, CheckOverlayfs, CheckTmpfs, CheckTracefs, CheckBTF, CheckBPF, CheckBPFLSM, CheckUserNamespaces, CheckRootlesskit, CheckUIDMap, CheckSubIDs} {
		if _, ok := byName[name]; !ok {
			t.Errorf("no %s check in the report", name)
		}
	}

	checkIs(t, byName[CheckContainerd], CheckContainerd, OK, answeringContainerd(ctx, t), "")
	checkIs(t, byName[CheckRunc], CheckRunc, OK, "runc 1.", "")
	checkIs(t, byName[CheckOverlayfs], CheckOverlayfs, OK, "", "")
	checkIs(t, byName[CheckTmpfs], CheckTmpfs, OK, "", "")
	checkIs(t, byName[CheckBTF], CheckBTF, OK, "/sys/kernel/btf/vmlinux", "")
	checkIs(t, byName[CheckBPF], CheckBPF, OK, "euid 0 with CAP_SYS_ADMIN", "")
	checkIs(t, byName[CheckUserNamespaces], CheckUserNamespaces, OK, "(root)", "")

	cg, err := hostfacts.HostCgroups()
	if err != nil {
		t.Fatal(err)
	}
	if r.Capabilities.CgroupLayout != layoutName(cg.Mode) || r.Capabilities.Cgroup2Mount != cg.Unified {
		t.Errorf("capabilities: layout %q at %q; the detector says %v at %q", r.Capabilities.CgroupLayout, r.Capabilities.Cgroup2Mount, cg.Mode, cg.Unified)
	}
	layout := byName[CheckCgroupLayout]
	switch cg.Mode {
	case hostfacts.CgroupUnified:
		checkIs(t, layout, CheckCgroupLayout, OK, "v2 (unified) at "+cg.Unified, "")
	case hostfacts.CgroupHybrid:
		checkIs(t, layout, CheckCgroupLayout, OK, "hybrid: cgroup v1 controllers ("+strings.Join(v1Names(cg), ", ")+") + cgroup2 at "+cg.Unified, "")
	case hostfacts.CgroupLegacy:
		checkIs(t, layout, CheckCgroupLayout, Warn, "v1 only", "systemd.unified_cgroup_hierarchy=1")
	default:
		checkIs(t, layout, CheckCgroupLayout, Fail, "no cgroup filesystem", "mount -t cgroup2")
	}
	// Root's limits need cpu, memory and pids where runc applies them: in
	// the v1 hierarchies, else at the cgroup2 root.
	controllers := slices.Collect(maps.Keys(cg.V1Controllers()))
	if cg.Mode == hostfacts.CgroupUnified {
		controllers, _ = hostfacts.ReadCgroupControllers(cg.Unified)
	}
	limits := cg.Mode != hostfacts.CgroupUnavailable
	for _, c := range limitControllers {
		limits = limits && slices.Contains(controllers, c)
	}
	if ctrl := byName[CheckCgroupControllers]; (ctrl.Status == OK) != limits || r.Capabilities.CgroupLimits != limits {
		t.Errorf("controllers %q on a %v host: check %+v, cgroup_limits %v", controllers, cg.Mode, ctrl, r.Capabilities.CgroupLimits)
	}

	// tracefs may or may not be mounted; CanTrace follows it exactly.
	tr := byName[CheckTracefs]
	switch tr.Status {
	case OK:
		if r.Capabilities.CanTrace != (cg.Unified != "") {
			t.Errorf("tracefs mounted, cgroup2 at %q, but %+v", cg.Unified, r.Capabilities)
		}
	case Warn:
		if tr.Fix != "mount -t tracefs tracefs /sys/kernel/tracing" || r.Capabilities.CanTrace {
			t.Errorf("tracefs: %+v, can_trace %v", tr, r.Capabilities.CanTrace)
		}
	default:
		t.Errorf("tracefs: %+v", tr)
	}
	if !r.Capabilities.NetworkIsolation || !r.Capabilities.Tmpfs || !r.Capabilities.UserNamespaces {
		t.Errorf("root on this host: %+v", r.Capabilities)
	}
}

// answeringContainerd is what the containerd check must say on this host,
// found by asking the daemons directly: the system (or configured) address
// if it answers, else the managed daemon if it runs, else that hookbox run
// will start one.
func answeringContainerd(ctx context.Context, t *testing.T) string {
	t.Helper()
	addr, _, err := daemon.SelectAddress("")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := daemon.Ping(ctx, addr, daemon.DefaultPingTimeout); err == nil {
		return fmt.Sprintf("containerd %s answers at %s", v.Version, addr)
	}
	m := daemon.ManagedPaths(daemon.Options{}.Dirs())
	if st, err := m.Status(ctx); err == nil && st.Answering {
		return fmt.Sprintf("managed containerd %s answers at %s (pid %d)", st.Version, m.Address, st.PID)
	}
	return "hookbox run will start a managed containerd (binary /"
}

func TestRootlessChecks(t *testing.T) {
	user := host{euid: 1001, user: "alice"}
	// Delegated subtree with no controller (a hybrid host after rootless
	// setup): own cgroups, no limits.
	delegated, limits, c := cgroupDelegationCheck(user, delegationFacts{Self: "/hookbox-rootless/1001/session", Root: "/hookbox-rootless/1001"})
	if !delegated || limits || c.Status != Warn || !strings.Contains(c.Detail, "limit-unavailable:cpu, limit-unavailable:memory, limit-unavailable:pids") || c.Fix == "" {
		t.Errorf("hybrid after setup: %v %v %+v", delegated, limits, c)
	}
	delegated, limits, c = cgroupDelegationCheck(user, delegationFacts{Root: "/user.slice/user-1001.slice/user@1001.service", Controllers: []string{"cpu", "memory", "pids", "io"}})
	if !delegated || !limits || c.Status != OK {
		t.Errorf("systemd delegation: %v %v %+v", delegated, limits, c)
	}
	delegated, _, c = cgroupDelegationCheck(user, delegationFacts{Self: "/"})
	if delegated || c.Status != Warn || !strings.Contains(c.Detail, "run-cgroup-unavailable") || !strings.Contains(c.Fix, "rootless setup --user alice") {
		t.Errorf("no delegation: %v %+v", delegated, c)
	}
	traced, c := tracerHelperCheck(user, helperFacts{Socket: "/run/x.sock", Err: errors.New("connect: no such file")})
	if traced || c.Status != Warn || !strings.Contains(c.Detail, "tracer-unavailable:rootless") || !strings.Contains(c.Fix, "hookbox tracer serve") {
		t.Errorf("no helper: %v %+v", traced, c)
	}
	if traced, c := tracerHelperCheck(user, helperFacts{Socket: "/run/x.sock"}); !traced || c.Status != OK {
		t.Errorf("helper: %v %+v", traced, c)
	}
	// Doctor reads the helper's socket for real.
	if f := gatherHelper(filepath.Join(t.TempDir(), "none.sock")); f.Err == nil {
		t.Error("a missing socket answered")
	}
}

func TestDaemonOutsideDelegation(t *testing.T) {
	f := delegationFacts{Root: "/hookbox-rootless/1001"}
	in := Check{Name: CheckCgroupDelegation, Status: OK}
	if ok, c := daemonOutsideCheck(in, f, "/hookbox-rootless/1001/session"); !ok || c.Status != OK {
		t.Errorf("daemon inside: %v %+v", ok, c)
	}
	if ok, c := daemonOutsideCheck(in, f, "/"); ok || c.Status != Warn || !strings.Contains(c.Fix, "hookbox daemon stop") {
		t.Errorf("daemon outside: %v %+v", ok, c)
	}
	if ok, _ := daemonOutsideCheck(in, f, "/hookbox-rootless/10012"); ok {
		t.Error("a sibling subtree with the same prefix is outside")
	}
	if ok, _ := daemonOutsideCheck(in, f, ""); !ok {
		t.Error("no running daemon: nothing to say")
	}
}

// TestEgressCheck: egress is offered to root holding CAP_SYS_ADMIN and to
// users with the rootless prerequisites; otherwise a warning with a fix.
func TestEgressCheck(t *testing.T) {
	for _, tc := range []struct {
		name     string
		euid     int
		capEff   string
		rootless bool
		want     bool
	}{
		{"root", 0, "000001fffeffffff", false, true},
		{"root without CAP_SYS_ADMIN", 0, "0000000000000000", false, false},
		{"user with rootless prerequisites", 1000, "0000000000000000", true, true},
		{"user without them", 1000, "0000000000000000", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := host{root: fixture(t, map[string]string{"proc/self/status": "CapEff:\t" + tc.capEff + "\n"}), euid: tc.euid}
			got, c := egressCheck(h, tc.rootless)
			if got != tc.want || (got != (c.Status == OK)) || (!got && c.Fix == "") {
				t.Errorf("egress %v, check %+v", got, c)
			}
		})
	}
}
