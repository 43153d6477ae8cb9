package doctor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	hostfacts "hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/internal/host/hosttest"
)

// fixture lays files out under a temp dir, as they would be under /.
func fixture(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	// A legacy v1 host (hosttest has the hybrid and v2 kinds).
	mountinfoV1 = `22 1 0:21 / /proc rw - proc proc rw
25 23 0:23 / /sys/fs/cgroup ro - tmpfs tmpfs ro,mode=755
26 25 0:24 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
27 25 0:25 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
28 25 0:26 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
`
	filesystemsFull = "nodev\tsysfs\nnodev\ttmpfs\nnodev\tproc\nnodev\tcgroup\nnodev\tcgroup2\nnodev\ttracefs\nnodev\toverlay\n\text4\n"
)

func TestCgroupLayout(t *testing.T) {
	tests := []struct {
		name, mountinfo    string
		layout, v2Mount    string
		status             Status
		detailHas, fixHas  string
		wantControllersLen int
	}{
		{"hybrid", hosttest.MountinfoHybrid, "hybrid", "/sys/fs/cgroup/unified", OK,
			"hybrid: cgroup v1 controllers (blkio, cpu, cpuacct, cpuset, devices, freezer, memory, pids) + cgroup2 at /sys/fs/cgroup/unified", "", 8},
		{"v2", hosttest.MountinfoV2, "v2", "/sys/fs/cgroup", OK, "v2 (unified) at /sys/fs/cgroup", "", 0},
		{"v1", mountinfoV1, "v1", "", Warn, "v1 only (cpu, cpuacct, memory, pids)", "systemd.unified_cgroup_hierarchy=1", 4},
		{"none", "22 1 0:21 / /proc rw - proc proc rw\n", "", "", Fail, "no cgroup filesystem", "mount -t cgroup2", 0},
		{"cgroup2 elsewhere too", "1 1 0:1 / /run/x rw - cgroup2 none rw\n" + hosttest.MountinfoV2, "v2", "/sys/fs/cgroup", OK, "", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fixture(t, map[string]string{"proc/self/mountinfo": tt.mountinfo})
			mounts, err := hostfacts.ReadMounts(filepath.Join(root, "proc/self/mountinfo"))
			if err != nil {
				t.Fatal(err)
			}
			cg, err := hostfacts.CgroupsOf(mounts)
			if err != nil || layoutName(cg.Mode) != tt.layout || cg.Unified != tt.v2Mount || len(cg.V1Controllers()) != tt.wantControllersLen {
				t.Errorf("cgroups = %+v, %v", cg, err)
			}
			checkIs(t, cgroupLayoutCheck(cg, nil), CheckCgroupLayout, tt.status, tt.detailHas, tt.fixHas)
		})
	}
	c := cgroupLayoutCheck(hostfacts.Cgroups{}, errors.New("boom"))
	checkIs(t, c, CheckCgroupLayout, Fail, "cannot read mountinfo: boom", "mount -t proc")
}

func TestCgroupControllers(t *testing.T) {
	hybrid := mustCgroups(t, hosttest.MountinfoHybrid)
	v2 := mustCgroups(t, hosttest.MountinfoV2)
	v1NoPids := mustCgroups(t, strings.ReplaceAll(mountinfoV1, "rw,pids", "rw,net_cls"))

	t.Run("hybrid as root", func(t *testing.T) {
		ok, c := cgroupControllersCheck(host{root: t.TempDir()}, hybrid)
		checkIs(t, c, CheckCgroupControllers, OK, "cpu, memory, pids available (cgroup v1)", "")
		if !ok {
			t.Error("limits reported unavailable")
		}
	})
	t.Run("hybrid not root", func(t *testing.T) {
		ok, c := cgroupControllersCheck(host{root: t.TempDir(), euid: 1000}, hybrid)
		checkIs(t, c, CheckCgroupControllers, Warn, "v1 controllers are not delegated", "run hookbox as root")
		if ok {
			t.Error("limits reported available")
		}
	})
	t.Run("v1 missing pids", func(t *testing.T) {
		ok, c := cgroupControllersCheck(host{root: t.TempDir()}, v1NoPids)
		checkIs(t, c, CheckCgroupControllers, Warn, "no pids controller in cgroup v1", "enable the controllers")
		if ok {
			t.Error("limits reported available")
		}
	})
	t.Run("v2 as root", func(t *testing.T) {
		root := fixture(t, map[string]string{"sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory hugetlb pids rdma misc\n"})
		ok, c := cgroupControllersCheck(host{root: root}, v2)
		checkIs(t, c, CheckCgroupControllers, OK, "/sys/fs/cgroup/cgroup.controllers", "")
		if !ok {
			t.Error("limits reported unavailable")
		}
	})
	t.Run("v2 without memory", func(t *testing.T) {
		root := fixture(t, map[string]string{"sys/fs/cgroup/cgroup.controllers": "cpu io pids\n"})
		_, c := cgroupControllersCheck(host{root: root}, v2)
		checkIs(t, c, CheckCgroupControllers, Warn, "no memory controller", "")
	})
	userCg := "sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/hb.scope"
	t.Run("v2 delegated", func(t *testing.T) {
		root := fixture(t, map[string]string{
			"proc/self/cgroup":                 "0::/user.slice/user-1000.slice/user@1000.service/app.slice/hb.scope\n",
			userCg + "/cgroup.controllers":     "cpu memory pids\n",
			"sys/fs/cgroup/cgroup.controllers": "cpu memory pids io\n",
		})
		uid := os.Geteuid()
		if uid == 0 { // hand the scope to a user, as systemd's Delegate=yes does
			uid = 1000
			if err := os.Chown(filepath.Join(root, userCg), uid, uid); err != nil {
				t.Fatal(err)
			}
		}
		ok, c := cgroupControllersCheck(host{root: root, euid: uid}, v2)
		checkIs(t, c, CheckCgroupControllers, OK, "delegated to euid", "")
		if !ok {
			t.Error("limits reported unavailable")
		}
		// Someone else's scope is not delegated to us.
		ok, c = cgroupControllersCheck(host{root: root, euid: uid + 1}, v2)
		checkIs(t, c, CheckCgroupControllers, Warn, "does not own its cgroup", "Delegate=yes")
		if ok {
			t.Error("limits reported available")
		}
	})
	t.Run("no cgroups", func(t *testing.T) {
		_, c := cgroupControllersCheck(host{root: t.TempDir()}, hostfacts.Cgroups{})
		checkIs(t, c, CheckCgroupControllers, Fail, "no cgroup hierarchy", "")
	})
}

func TestOverlayAndTmpfs(t *testing.T) {
	full := fsTypes(t, filesystemsFull)
	noOverlay := fsTypes(t, "nodev\tproc\n\text4\n")

	checkIs(t, overlayCheck(host{root: t.TempDir()}, full, nil), CheckOverlayfs, OK, "overlay in /proc/filesystems", "")
	withModule := fixture(t, map[string]string{
		"proc/sys/kernel/osrelease":                                    "6.1.0-18-amd64\n",
		"lib/modules/6.1.0-18-amd64/kernel/fs/overlayfs/overlay.ko.xz": "",
	})
	checkIs(t, overlayCheck(host{root: withModule}, noOverlay, nil), CheckOverlayfs, Warn,
		"not loaded (/lib/modules/6.1.0-18-amd64/kernel/fs/overlayfs/overlay.ko.xz)", "modprobe overlay")
	checkIs(t, overlayCheck(host{root: t.TempDir()}, noOverlay, nil), CheckOverlayfs, Fail, "no overlayfs", "CONFIG_OVERLAY_FS")
	checkIs(t, overlayCheck(host{root: t.TempDir()}, nil, errors.New("no proc")), CheckOverlayfs, Fail, "cannot read /proc/filesystems", "mount -t proc")

	checkIs(t, tmpfsCheck(full, nil), CheckTmpfs, OK, "tmpfs in /proc/filesystems", "")
	checkIs(t, tmpfsCheck(noOverlay, nil), CheckTmpfs, Fail, "no tmpfs", "CONFIG_TMPFS")
}

func TestTracefs(t *testing.T) {
	full := fsTypes(t, filesystemsFull)
	at, c := tracefsCheck(mustMounts(t, hosttest.MountinfoV2), full, nil)
	checkIs(t, c, CheckTracefs, OK, "tracefs at /sys/kernel/tracing", "")
	if at != "/sys/kernel/tracing" {
		t.Errorf("mount = %q", at)
	}
	debug := "1 1 0:7 / /sys/kernel/debug rw - debugfs debugfs rw\n2 1 0:12 / /sys/kernel/debug/tracing rw - tracefs tracefs rw\n"
	if at, c := tracefsCheck(mustMounts(t, debug), full, nil); at != "/sys/kernel/debug/tracing" || c.Status != OK {
		t.Errorf("debugfs tracing: %q %+v", at, c)
	}
	at, c = tracefsCheck(mustMounts(t, hosttest.MountinfoHybrid), full, nil)
	checkIs(t, c, CheckTracefs, Warn, "tracefs is not mounted", "")
	if at != "" || c.Fix != "mount -t tracefs tracefs /sys/kernel/tracing" {
		t.Errorf("unmounted: %q, fix %q", at, c.Fix)
	}
	_, c = tracefsCheck(nil, fsTypes(t, "nodev\tproc\n"), nil)
	checkIs(t, c, CheckTracefs, Warn, "no tracefs", "CONFIG_FTRACE")
	// Elsewhere than the two usual places counts, as it does for the
	// tracer (cilium/ebpf finds tracefs in mountinfo); a subtree does not.
	if at, _ := tracefsCheck(mustMounts(t, "1 1 0:12 / /mnt/t rw - tracefs tracefs rw\n"), full, nil); at != "/mnt/t" {
		t.Errorf("tracefs at /mnt/t: %q", at)
	}
	if at, _ := tracefsCheck(mustMounts(t, "1 1 0:12 /instances/x /mnt/t rw - tracefs tracefs rw\n"), full, nil); at != "" {
		t.Errorf("a tracefs subtree accepted: %q", at)
	}
}

func TestBTF(t *testing.T) {
	root := fixture(t, map[string]string{"sys/kernel/btf/vmlinux": strings.Repeat("x", 3<<19)})
	checkIs(t, btfCheck(host{root: root}), CheckBTF, OK, "/sys/kernel/btf/vmlinux (1.5 MiB)", "")
	checkIs(t, btfCheck(host{root: t.TempDir()}), CheckBTF, Warn, "no kernel BTF", "CONFIG_DEBUG_INFO_BTF=y")
	empty := fixture(t, map[string]string{"sys/kernel/btf/vmlinux": ""})
	checkIs(t, btfCheck(host{root: empty}), CheckBTF, Warn, "no kernel BTF", "")
}

func TestBPF(t *testing.T) {
	status := func(capEff string) map[string]string {
		return map[string]string{
			"proc/self/status":                          "Name:\tdoctor\nCapInh:\t0000000000000000\nCapEff:\t" + capEff + "\nCapBnd:\t000001ffffffffff\n",
			"proc/sys/kernel/unprivileged_bpf_disabled": "2\n",
		}
	}
	tests := []struct {
		name, capEff      string
		euid              int
		status            Status
		detailHas, fixHas string
	}{
		{"root, this machine", "000001fffeffffff", 0, OK, "euid 0 with CAP_SYS_ADMIN (kernel.unprivileged_bpf_disabled=2)", ""},
		{"bpf and perfmon", "000000c000000000", 1000, OK, "euid 1000 with CAP_BPF and CAP_PERFMON", ""},
		{"bpf only", "0000008000000000", 1000, Warn, "without CAP_BPF and CAP_PERFMON", "run hookbox as root"},
		{"unprivileged", "0000000000000000", 1000, Warn, "kernel.unprivileged_bpf_disabled=2", "tracer helper"},
		{"restricted root", "00000000a80425fb", 0, Warn, "restricted container", "grant CAP_BPF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fixture(t, status(tt.capEff))
			checkIs(t, bpfCheck(host{root: root, euid: tt.euid}), CheckBPF, tt.status, tt.detailHas, tt.fixHas)
		})
	}
	checkIs(t, bpfCheck(host{root: t.TempDir()}), CheckBPF, Warn, "cannot read capabilities", "")
	noSysctl := fixture(t, map[string]string{"proc/self/status": "CapEff:\t0000000000200000\n"})
	checkIs(t, bpfCheck(host{root: noSysctl}), CheckBPF, OK, "kernel.unprivileged_bpf_disabled=unknown", "")
}

func TestBPFLSM(t *testing.T) {
	for name, tt := range map[string]struct {
		files       map[string]string
		active      bool
		status      Status
		detail, fix string
	}{
		"active": {map[string]string{"sys/kernel/security/lsm": "lockdown,capability,landlock,bpf"}, true, OK, "/proc/<pid>/mem included", ""},
		"not in the list": {map[string]string{"sys/kernel/security/lsm": "capability,yama,apparmor"}, false, Warn,
			"seccomp still denies ptrace", "lsm=capability,yama,apparmor,bpf"},
		"no securityfs": {map[string]string{}, false, Warn, "securityfs is not mounted", "mount -t securityfs securityfs /sys/kernel/security"},
	} {
		t.Run(name, func(t *testing.T) {
			active, c := bpfLSMCheck(host{root: fixture(t, tt.files)})
			if active != tt.active {
				t.Errorf("active = %v, want %v", active, tt.active)
			}
			checkIs(t, c, CheckBPFLSM, tt.status, tt.detail, tt.fix)
		})
	}
}

func TestUserNamespaces(t *testing.T) {
	tests := []struct {
		name              string
		files             map[string]string
		euid              int
		want              bool
		status            Status
		detailHas, fixHas string
	}{
		{"root, this machine", map[string]string{"proc/sys/user/max_user_namespaces": "96365\n"}, 0, true, OK, "user.max_user_namespaces=96365 (root)", ""},
		{"user", map[string]string{"proc/sys/user/max_user_namespaces": "96365\n"}, 1000, true, OK, "user.max_user_namespaces=96365", ""},
		{"disabled", map[string]string{"proc/sys/user/max_user_namespaces": "0\n"}, 0, false, Warn, "disabled", "sysctl -w user.max_user_namespaces="},
		{"no kernel support", map[string]string{}, 0, false, Warn, "no user namespaces", "CONFIG_USER_NS"},
		{"debian clone off", map[string]string{"proc/sys/user/max_user_namespaces": "100\n", "proc/sys/kernel/unprivileged_userns_clone": "0\n"}, 1000, false, Warn,
			"kernel.unprivileged_userns_clone=0", "sysctl -w kernel.unprivileged_userns_clone=1"},
		{"debian clone off, root", map[string]string{"proc/sys/user/max_user_namespaces": "100\n", "proc/sys/kernel/unprivileged_userns_clone": "0\n"}, 0, true, OK, "(root)", ""},
		{"ubuntu apparmor", map[string]string{"proc/sys/user/max_user_namespaces": "100\n", "proc/sys/kernel/apparmor_restrict_unprivileged_userns": "1\n"}, 1000, false, Warn,
			"AppArmor", "apparmor_restrict_unprivileged_userns=0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, c := userNamespacesCheck(host{root: fixture(t, tt.files), euid: tt.euid})
			checkIs(t, c, CheckUserNamespaces, tt.status, tt.detailHas, tt.fixHas)
			if got != tt.want {
				t.Errorf("usable = %v", got)
			}
		})
	}
}

func TestRootlessPrerequisites(t *testing.T) {
	none := func(string) (string, error) { return "", errors.New("not found") }
	all := func(name string) (string, error) { return "/usr/bin/" + name, nil }
	onlyUID := func(name string) (string, error) {
		if name == "newuidmap" {
			return "/usr/bin/newuidmap", nil
		}
		return "", errors.New("not found")
	}
	checkIs(t, rootlesskitCheck(all), CheckRootlesskit, OK, "rootlesskit at /usr/bin/rootlesskit", "")
	checkIs(t, rootlesskitCheck(none), CheckRootlesskit, Warn, "not on PATH", "apt-get install rootlesskit")
	checkIs(t, uidmapCheck(all), CheckUIDMap, OK, "/usr/bin/newuidmap, /usr/bin/newgidmap", "")
	checkIs(t, uidmapCheck(onlyUID), CheckUIDMap, Warn, "newgidmap not on PATH", "apt-get install uidmap")
	checkIs(t, uidmapCheck(none), CheckUIDMap, Warn, "newuidmap and newgidmap not on PATH", "apt-get install uidmap")

	root := fixture(t, map[string]string{
		"etc/subuid": "alice:100000:65536\nbob:165536:0\n1001:300000:65536\n",
		"etc/subgid": "alice:100000:65536\n1001:300000:65536\n",
	})
	checkIs(t, subIDsCheck(host{root: root, user: "alice", uid: 1000}), CheckSubIDs, OK, "/etc/subuid 100000:65536, /etc/subgid 100000:65536", "")
	checkIs(t, subIDsCheck(host{root: root, user: "carol", uid: 1001}), CheckSubIDs, OK, "/etc/subuid 300000:65536", "")
	checkIs(t, subIDsCheck(host{root: root, user: "bob", uid: 1002}), CheckSubIDs, Warn, "no /etc/subuid or /etc/subgid entry for bob", "usermod --add-subuids 100000-165535 --add-subgids 100000-165535 bob")
	checkIs(t, subIDsCheck(host{root: t.TempDir(), uid: 0}), CheckSubIDs, Warn, "entry for 0", "")
	onlyUIDs := fixture(t, map[string]string{"etc/subuid": "root:100000:65536\n", "etc/subgid": ""})
	checkIs(t, subIDsCheck(host{root: onlyUIDs, user: "root"}), CheckSubIDs, Warn, "no /etc/subgid entry for root", "")
}

func TestKernelAtLeast(t *testing.T) {
	for rel, want := range map[string]bool{"6.18.44-fc-v509": true, "5.3.0": true, "5.3-rc1": true, "5.2.21": false, "4.19.0-26-amd64": false, "garbage": false} {
		h := host{root: fixture(t, map[string]string{"proc/sys/kernel/osrelease": rel + "\n"})}
		if got := kernelAtLeast(h, 5, 3); got != want {
			t.Errorf("kernelAtLeast(%q, 5.3) = %v", rel, got)
		}
	}
	if kernelAtLeast(host{root: t.TempDir()}, 5, 3) {
		t.Error("no osrelease: true")
	}
}

func mustMounts(t *testing.T, mountinfo string) []hostfacts.Mount {
	t.Helper()
	mounts, err := hostfacts.ParseMounts(strings.NewReader(mountinfo))
	if err != nil {
		t.Fatal(err)
	}
	return mounts
}

func mustCgroups(t *testing.T, mountinfo string) hostfacts.Cgroups {
	t.Helper()
	cg, err := hostfacts.CgroupsOf(mustMounts(t, mountinfo))
	if err != nil {
		t.Fatal(err)
	}
	return cg
}

func fsTypes(t *testing.T, content string) map[string]bool {
	t.Helper()
	root := fixture(t, map[string]string{"filesystems": content})
	fss, err := readFilesystems(filepath.Join(root, "filesystems"))
	if err != nil {
		t.Fatal(err)
	}
	return fss
}

// checkIs asserts a check's name and status, and that its detail and fix
// contain the given fragments ("" = anything; fixHas "" also requires no
// fix on an ok check).
func checkIs(t *testing.T, c Check, name string, status Status, detailHas, fixHas string) {
	t.Helper()
	if c.Name != name || c.Status != status {
		t.Errorf("check = %+v, want %s %s", c, name, status)
	}
	if !strings.Contains(c.Detail, detailHas) {
		t.Errorf("%s detail %q lacks %q", name, c.Detail, detailHas)
	}
	if !strings.Contains(c.Fix, fixHas) {
		t.Errorf("%s fix %q lacks %q", name, c.Fix, fixHas)
	}
	if status == OK && c.Fix != "" {
		t.Errorf("%s is ok but has a fix: %q", name, c.Fix)
	}
	if status != OK && c.Fix == "" {
		t.Errorf("%s is %s without a fix", name, status)
	}
	if strings.Contains(c.Detail, "\n") || strings.Contains(c.Fix, "\n") {
		t.Errorf("%s: detail or fix spans lines: %+v", name, c)
	}
}
