package doctor

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	hostfacts "hookbox.dev/hookbox/internal/host"
)

// Each probe reads files under host.root (a fixture in tests) and returns
// one Check, plus what the capabilities need. Probes never fail: what they
// cannot read is part of their finding.

func (h host) path(p string) string { return filepath.Join(h.root, p) }

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// readFilesystems is the set of filesystem types in /proc/filesystems.
func readFilesystems(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	fss := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			fss[f[len(f)-1]] = true
		}
	}
	return fss, nil
}

// layoutName is a cgroup mode as the report names it: v1, hybrid, v2, or
// "" when there is no cgroup filesystem.
func layoutName(m hostfacts.CgroupMode) string {
	if m == hostfacts.CgroupUnavailable {
		return ""
	}
	return m.String()
}

// v1Names are the v1 controllers mounted, sorted.
func v1Names(cg hostfacts.Cgroups) []string {
	return slices.Sorted(maps.Keys(cg.V1Controllers()))
}

func cgroupLayoutCheck(cg hostfacts.Cgroups, mountsErr error) Check {
	c := Check{Name: CheckCgroupLayout}
	switch {
	case mountsErr != nil:
		c.Status, c.Detail, c.Fix = Fail, fmt.Sprintf("cannot read mountinfo: %v", mountsErr), "mount procfs: mount -t proc proc /proc"
	case cg.Mode == hostfacts.CgroupUnified:
		c.Status, c.Detail = OK, "v2 (unified) at "+cg.Unified
	case cg.Mode == hostfacts.CgroupHybrid:
		c.Status, c.Detail = OK, fmt.Sprintf("hybrid: cgroup v1 controllers (%s) + cgroup2 at %s", strings.Join(v1Names(cg), ", "), cg.Unified)
	case cg.Mode == hostfacts.CgroupLegacy:
		c.Status = Warn
		c.Detail = fmt.Sprintf("v1 only (%s): no cgroup2 hierarchy, so the exec tracer cannot scope events to a container", strings.Join(v1Names(cg), ", "))
		c.Fix = "boot with systemd.unified_cgroup_hierarchy=1, or mount cgroup2: mount -t cgroup2 none /sys/fs/cgroup/unified"
	default:
		c.Status, c.Detail, c.Fix = Fail, "no cgroup filesystem is mounted", "mount cgroup2: mount -t cgroup2 none /sys/fs/cgroup"
	}
	return c
}

// limitControllers are the controllers a run's limits use.
var limitControllers = []string{"cpu", "memory", "pids"}

// missingLimitControllers are the limitControllers not in have.
func missingLimitControllers(have map[string]bool) []string {
	var missing []string
	for _, n := range limitControllers {
		if !have[n] {
			missing = append(missing, n)
		}
	}
	return missing
}

// cgroupControllersCheck: are the limit controllers there, and may this
// user use them? On v1 and hybrid hosts runc applies limits through the v1
// controllers; on v2 through the cgroup2 tree. Without root, limits need a
// delegated cgroup2 subtree (v1 controllers are never delegated).
func cgroupControllersCheck(h host, cg hostfacts.Cgroups) (bool, Check) {
	c := Check{Name: CheckCgroupControllers}
	var have map[string]bool
	where := ""
	switch cg.Mode {
	case hostfacts.CgroupUnavailable:
		c.Status, c.Detail, c.Fix = Fail, "no cgroup hierarchy: no limits can be set", "mount cgroup2: mount -t cgroup2 none /sys/fs/cgroup"
		return false, c
	case hostfacts.CgroupLegacy, hostfacts.CgroupHybrid:
		have = map[string]bool{}
		for n := range cg.V1Controllers() {
			have[n] = true
		}
		where = "cgroup v1"
	case hostfacts.CgroupUnified:
		dir := cg.Unified
		if h.euid != 0 {
			dir = ownCgroupDir(h, cg.Unified)
		}
		have = readControllers(h.path(dir))
		where = filepath.Join(dir, "cgroup.controllers")
	}
	if missing := missingLimitControllers(have); len(missing) > 0 {
		c.Status = Warn
		c.Detail = fmt.Sprintf("no %s controller in %s: those limits are not enforced", strings.Join(missing, ", "), where)
		c.Fix = "enable the controllers (kernel command line, e.g. cgroup_enable=memory; on v2, +memory +pids +cpu in the parent's cgroup.subtree_control)"
		return false, c
	}
	if h.euid != 0 {
		if cg.Mode != hostfacts.CgroupUnified {
			c.Status = Warn
			c.Detail = fmt.Sprintf("euid %d on a %s host: v1 controllers are not delegated, so containers run without limits", h.euid, cg.Mode)
			c.Fix = "run hookbox as root, or use a cgroup v2 host with a delegated subtree"
			return false, c
		}
		dir := ownCgroupDir(h, cg.Unified)
		if fi, err := os.Stat(h.path(dir)); err != nil || !ownedBy(fi, h.euid) {
			c.Status = Warn
			c.Detail = fmt.Sprintf("euid %d does not own its cgroup %s: no delegated subtree, so containers run without limits", h.euid, dir)
			c.Fix = "run in a delegated scope (systemd-run --user -p Delegate=yes --scope …), or run hookbox as root"
			return false, c
		}
		c.Status, c.Detail = OK, fmt.Sprintf("cpu, memory, pids delegated to euid %d at %s", h.euid, dir)
		return true, c
	}
	c.Status, c.Detail = OK, "cpu, memory, pids available ("+where+")"
	return true, c
}

// ownCgroupDir is this process's cgroup2 directory (from /proc/self/cgroup
// "0::/path") under the cgroup2 mount.
func ownCgroupDir(h host, v2Mount string) string {
	b, err := os.ReadFile(h.path("/proc/self/cgroup"))
	if err != nil {
		return v2Mount
	}
	self, err := hostfacts.ParseProcCgroup(string(b))
	if err != nil || self.Unified == "" {
		return v2Mount
	}
	return filepath.Join(v2Mount, self.Unified)
}

// readControllers is the set of controllers cgroup2 directory dir offers;
// empty when it cannot be read.
func readControllers(dir string) map[string]bool {
	have := map[string]bool{}
	names, _ := hostfacts.ReadCgroupControllers(dir)
	for _, n := range names {
		have[n] = true
	}
	return have
}

func ownedBy(fi fs.FileInfo, uid int) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == uid
}

func overlayCheck(h host, fss map[string]bool, fssErr error) Check {
	c := Check{Name: CheckOverlayfs}
	switch {
	case fssErr != nil:
		c.Status, c.Detail, c.Fix = Fail, fmt.Sprintf("cannot read /proc/filesystems: %v", fssErr), "mount procfs: mount -t proc proc /proc"
	case fss["overlay"]:
		c.Status, c.Detail = OK, "overlay in /proc/filesystems"
	default:
		if mod := overlayModule(h); mod != "" {
			c.Status, c.Detail, c.Fix = Warn, "overlay is a module that is not loaded ("+mod+")", "modprobe overlay"
		} else {
			c.Status, c.Detail, c.Fix = Fail, "the kernel has no overlayfs: containerd cannot unpack images", "use a kernel with CONFIG_OVERLAY_FS"
		}
	}
	return c
}

// overlayModule is the overlay module file for the running kernel, or "".
func overlayModule(h host) string {
	rel, err := os.ReadFile(h.path("/proc/sys/kernel/osrelease"))
	if err != nil {
		return ""
	}
	dir := filepath.Join("/lib/modules", strings.TrimSpace(string(rel)), "kernel/fs/overlayfs")
	matches, _ := filepath.Glob(h.path(filepath.Join(dir, "overlay.ko*")))
	if len(matches) == 0 {
		return ""
	}
	return filepath.Join(dir, filepath.Base(matches[0]))
}

func tmpfsCheck(fss map[string]bool, fssErr error) Check {
	c := Check{Name: CheckTmpfs}
	switch {
	case fssErr != nil:
		c.Status, c.Detail, c.Fix = Fail, fmt.Sprintf("cannot read /proc/filesystems: %v", fssErr), "mount procfs: mount -t proc proc /proc"
	case fss["tmpfs"]:
		c.Status, c.Detail = OK, "tmpfs in /proc/filesystems"
	default:
		c.Status, c.Detail, c.Fix = Fail, "the kernel has no tmpfs: no per-run scratch space", "use a kernel with CONFIG_TMPFS"
	}
	return c
}

// tracefsCheck returns where tracefs is mounted ("" if nowhere usable).
func tracefsCheck(mounts []hostfacts.Mount, fss map[string]bool, fssErr error) (string, Check) {
	c := Check{Name: CheckTracefs}
	if at := hostfacts.TracefsMount(mounts); at != "" {
		c.Status, c.Detail = OK, "tracefs at "+at
		return at, c
	}
	switch {
	case fssErr == nil && !fss["tracefs"]:
		c.Status, c.Detail, c.Fix = Warn, "the kernel has no tracefs: the exec tracer cannot attach to tracepoints", "use a kernel with CONFIG_FTRACE"
	default:
		c.Status, c.Detail = Warn, "tracefs is not mounted: the exec tracer cannot attach to tracepoints"
		c.Fix = "mount -t tracefs tracefs /sys/kernel/tracing"
	}
	return "", c
}

func btfCheck(h host) Check {
	const vmlinux = "/sys/kernel/btf/vmlinux"
	c := Check{Name: CheckBTF}
	fi, err := os.Stat(h.path(vmlinux))
	if err != nil || fi.Size() == 0 {
		c.Status, c.Detail = Warn, "no kernel BTF at "+vmlinux+": the CO-RE exec tracer cannot load"
		c.Fix = "use a kernel built with CONFIG_DEBUG_INFO_BTF=y"
		return c
	}
	c.Status, c.Detail = OK, fmt.Sprintf("%s (%.1f MiB)", vmlinux, float64(fi.Size())/(1<<20))
	return c
}

// Capability bits (linux/capability.h).
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// bpfCheck: may this process load and attach the tracer? Tracing programs
// need CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON (5.8+), whatever
// kernel.unprivileged_bpf_disabled says (that sysctl governs only socket
// filters and the like; it is reported for context).
func bpfCheck(h host) Check {
	c := Check{Name: CheckBPF}
	unpriv := "unknown"
	if b, err := os.ReadFile(h.path("/proc/sys/kernel/unprivileged_bpf_disabled")); err == nil {
		unpriv = strings.TrimSpace(string(b))
	}
	caps, err := effectiveCaps(h.path("/proc/self/status"))
	if err != nil {
		c.Status, c.Detail = Warn, fmt.Sprintf("cannot read capabilities: %v", err)
		c.Fix = "mount procfs: mount -t proc proc /proc"
		return c
	}
	has := func(bit uint) bool { return caps&(1<<bit) != 0 }
	sysctl := "kernel.unprivileged_bpf_disabled=" + unpriv
	switch {
	case has(capSysAdmin):
		c.Status, c.Detail = OK, fmt.Sprintf("euid %d with CAP_SYS_ADMIN (%s)", h.euid, sysctl)
	case has(capBPF) && has(capPerfmon):
		c.Status, c.Detail = OK, fmt.Sprintf("euid %d with CAP_BPF and CAP_PERFMON (%s)", h.euid, sysctl)
	case h.euid == 0:
		c.Status = Warn
		c.Detail = fmt.Sprintf("euid 0 but neither CAP_SYS_ADMIN nor CAP_BPF+CAP_PERFMON is effective (restricted container?); %s", sysctl)
		c.Fix = "grant CAP_BPF and CAP_PERFMON (or run privileged)"
	default:
		c.Status = Warn
		c.Detail = fmt.Sprintf("euid %d without CAP_BPF and CAP_PERFMON (%s): the exec tracer needs privilege", h.euid, sysctl)
		c.Fix = "run hookbox as root; rootless runs are traced through the tracer helper instead (see the tracer-helper check)"
	}
	return c
}

// bpfLSMCheck: is the BPF LSM active, so that the tracer's LSM programs
// run? What every run gets without it is said too: seccomp denies ptrace
// and process_vm_* whatever the host (docs/threat-model.md).
func bpfLSMCheck(h host) (bool, Check) {
	c := Check{Name: CheckBPFLSM}
	lsms, err := hostfacts.ReadLSMs(h.path(hostfacts.LSMFile))
	switch {
	case errors.Is(err, hostfacts.ErrNoSecurityfs):
		c.Status = Warn
		c.Detail = "cannot tell whether the BPF LSM is active: securityfs is not mounted (hookbox run mounts it as root)"
		c.Fix = "mount -t securityfs securityfs " + hostfacts.SecurityfsDir
		return false, c
	case err != nil:
		c.Status, c.Detail, c.Fix = Warn, err.Error(), "check that "+hostfacts.LSMFile+" is readable (run as root)"
		return false, c
	case slices.Contains(lsms, "bpf") && h.loadLSM == nil:
		c.Status = OK
		c.Detail = fmt.Sprintf("bpf is an active LSM (%s): traced runs get ptrace-class access between their processes refused, /proc/<pid>/mem included, and enforce refuses unplanned execs with EPERM, if the kernel also loads LSM programs (not probed without root; a run without them says degraded: ptrace-denial-unavailable)", strings.Join(lsms, ","))
		return true, c
	case slices.Contains(lsms, "bpf"):
		if err := h.loadLSM(); err != nil {
			c.Status = Warn
			c.Detail = fmt.Sprintf("bpf is an active LSM (%s), but the tracer's LSM programs did not load here (%v): seccomp still denies ptrace and process_vm_* in every run, but /proc/<pid>/mem between a run's processes is not refused, and enforce kills unplanned execs instead of refusing them (runs say degraded: ptrace-denial-unavailable)", strings.Join(lsms, ","), err)
			c.Fix = "a kernel that accepts BPF LSM (trampoline) programs from root: some VM kernels refuse every fentry/LSM program"
			return false, c
		}
		c.Status = OK
		c.Detail = fmt.Sprintf("bpf is an active LSM (%s) and the tracer's LSM programs loaded and attached: traced runs get ptrace-class access between their processes refused, /proc/<pid>/mem included, and enforce refuses unplanned execs with EPERM", strings.Join(lsms, ","))
		return true, c
	}
	c.Status = Warn
	c.Detail = fmt.Sprintf("active LSMs %s, no bpf: seccomp still denies ptrace and process_vm_* in every run, but /proc/<pid>/mem between a run's processes is not refused, and enforce kills unplanned execs instead of refusing them", strings.Join(lsms, ","))
	c.Fix = "boot with bpf in the lsm= list (e.g. lsm=" + strings.Join(append(slices.Clone(lsms), "bpf"), ",") + "), on a kernel with CONFIG_BPF_LSM=y"
	return false, c
}

// effectiveCaps reads the CapEff mask from a /proc/<pid>/status file.
func effectiveCaps(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no CapEff line in " + path)
}

// userNamespacesCheck: can this user create user namespaces?
func userNamespacesCheck(h host) (bool, Check) {
	c := Check{Name: CheckUserNamespaces}
	read := func(p string) (string, bool) {
		b, err := os.ReadFile(h.path(p))
		if err != nil {
			return "", false
		}
		return strings.TrimSpace(string(b)), true
	}
	maxNS, ok := read("/proc/sys/user/max_user_namespaces")
	if !ok {
		c.Status, c.Detail, c.Fix = Warn, "no /proc/sys/user/max_user_namespaces: the kernel has no user namespaces", "use a kernel with CONFIG_USER_NS"
		return false, c
	}
	detail := []string{"user.max_user_namespaces=" + maxNS}
	if n, err := strconv.Atoi(maxNS); err != nil || n <= 0 {
		c.Status, c.Detail, c.Fix = Warn, strings.Join(detail, ", ")+": user namespaces are disabled", "sysctl -w user.max_user_namespaces=15000"
		return false, c
	}
	clone, hasClone := read("/proc/sys/kernel/unprivileged_userns_clone")
	if hasClone {
		detail = append(detail, "kernel.unprivileged_userns_clone="+clone)
	}
	aa, hasAA := read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
	if hasAA {
		detail = append(detail, "kernel.apparmor_restrict_unprivileged_userns="+aa)
	}
	switch {
	case h.euid == 0:
		c.Status, c.Detail = OK, strings.Join(detail, ", ")+" (root)"
	case hasClone && clone == "0":
		c.Status, c.Detail, c.Fix = Warn, strings.Join(detail, ", ")+": unprivileged users cannot create them", "sysctl -w kernel.unprivileged_userns_clone=1"
		return false, c
	case hasAA && aa == "1":
		c.Status, c.Detail, c.Fix = Warn, strings.Join(detail, ", ")+": AppArmor denies them to unprivileged programs", "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile for rootlesskit"
		return false, c
	default:
		c.Status, c.Detail = OK, strings.Join(detail, ", ")
	}
	return true, c
}

func rootlesskitCheck(lookPath func(string) (string, error)) Check {
	c := Check{Name: CheckRootlesskit}
	if p, err := lookPath("rootlesskit"); err == nil {
		c.Status, c.Detail = OK, "rootlesskit at "+p
	} else {
		c.Status, c.Detail, c.Fix = Warn, "rootlesskit is not on PATH (needed only for rootless containerd)", "apt-get install rootlesskit"
	}
	return c
}

func uidmapCheck(lookPath func(string) (string, error)) Check {
	c := Check{Name: CheckUIDMap}
	var found, missing []string
	for _, name := range []string{"newuidmap", "newgidmap"} {
		if p, err := lookPath(name); err == nil {
			found = append(found, p)
		} else {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		c.Status, c.Detail, c.Fix = Warn, strings.Join(missing, " and ")+" not on PATH (needed only for rootless containerd)", "apt-get install uidmap"
	} else {
		c.Status, c.Detail = OK, strings.Join(found, ", ")
	}
	return c
}

// subIDsCheck: does the user have subordinate uid and gid ranges?
func subIDsCheck(h host) Check {
	c := Check{Name: CheckSubIDs}
	who := h.user
	if who == "" {
		who = strconv.Itoa(h.uid)
	}
	var found, missing []string
	for _, file := range []string{"/etc/subuid", "/etc/subgid"} {
		if r := subIDRange(h.path(file), h.user, h.uid); r != "" {
			found = append(found, file+" "+r)
		} else {
			missing = append(missing, file)
		}
	}
	if len(missing) > 0 {
		c.Status = Warn
		c.Detail = fmt.Sprintf("no %s entry for %s (needed only for rootless containerd)", strings.Join(missing, " or "), who)
		c.Fix = fmt.Sprintf("usermod --add-subuids 100000-165535 --add-subgids 100000-165535 %s", who)
		return c
	}
	c.Status, c.Detail = OK, strings.Join(found, ", ")
	return c
}

// subIDRange returns the first "start:count" range for the user (by name
// or uid) with a non-zero count in a subuid/subgid file, or "".
func subIDRange(path, name string, uid int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(strings.TrimSpace(line), ":")
		if len(f) != 3 || (f[0] != name && f[0] != strconv.Itoa(uid)) || f[0] == "" {
			continue
		}
		if n, err := strconv.ParseUint(f[2], 10, 32); err == nil && n > 0 {
			if _, err := strconv.ParseUint(f[1], 10, 32); err == nil {
				return f[1] + ":" + f[2]
			}
		}
	}
	return ""
}
