// Package doctor answers what this host can do for hookbox: a list of
// checks, each ok, warn or fail with a one-line fix, and the Capabilities
// that code paths read instead of branching on a backend's name
// (docs/contracts.md §7). It backs `hookbox doctor [--json]`.
//
// Doctor only looks: it reads /proc, /sys and /etc, asks containerd for its
// version, and runs `runc --version`. It never starts a daemon, mounts,
// loads a BPF program or changes a setting. Its answers are inferences from
// those readings, so a capability reported true can still fail at run time
// (the tracer then reports "unchecked", never "confirmed"); one reported
// false is not attempted.
//
// fail means `hookbox run` cannot work here; warn means a feature is
// unavailable or degraded (tracing, enforcement, rootless), which a spawn
// may not need. The checks and their order are fixed, so two reports from
// the same host compare equal.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"hookbox.dev/hookbox/ebpf"
	hostfacts "hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/launcher/daemon"
)

// Status is a check's outcome.
type Status string

const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "fail"
)

// Check is one finding about the host.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Report is the whole answer: checks in a fixed order, and capabilities.
type Report struct {
	Checks       []Check      `json:"checks"`
	Capabilities Capabilities `json:"capabilities"`
}

// Worst is the most severe status among the checks (OK for none).
func (r Report) Worst() Status {
	worst := OK
	for _, c := range r.Checks {
		if c.Status == Fail {
			return Fail
		}
		if c.Status == Warn {
			worst = Warn
		}
	}
	return worst
}

// Capabilities is what this host can do for hookbox run by the current
// user. Callers read these; they never branch on a backend's name.
type Capabilities struct {
	// CanTrace: the exec tracer can load and attach (BPF privilege, BTF,
	// tracefs mounted, a cgroup2 hierarchy to scope events by).
	CanTrace bool `json:"can_trace"`
	// CanEnforce: CanTrace, and the kernel has bpf_send_signal (5.3+) to
	// kill a disallowed exec in the kernel.
	CanEnforce bool `json:"can_enforce"`
	// CanDeny: CanTrace, and the BPF LSM is active, so the tracer can
	// attach its LSM programs: ptrace-class access between a traced run's
	// processes (/proc/<pid>/mem included) is refused, and enforce refuses
	// an unplanned exec with EPERM instead of killing it. Whether the
	// kernel also loads them is known only at run time (the trace's stats
	// line says "denies", result.json ptrace-denial-unavailable).
	CanDeny bool `json:"can_deny"`
	// NetworkIsolation: containers get their own network namespace.
	NetworkIsolation bool `json:"network_isolation"`
	// UserNamespaces: this user can create user namespaces.
	UserNamespaces bool `json:"user_namespaces"`
	// Tmpfs: the per-run tmpfs can be mounted (kernel support, and root or
	// a rootless namespace to mount it in).
	Tmpfs bool `json:"tmpfs"`
	// CgroupLimits: memory, pids and cpu limits are enforced for containers
	// (controllers present, and root or a delegated cgroup2 subtree).
	CgroupLimits bool `json:"cgroup_limits"`
	// Rootless: every prerequisite of rootless containerd is present.
	Rootless bool `json:"rootless"`
	// Egress: runs can get an egress allowlist (hookbox can open its
	// proxy's listener inside their network namespaces).
	Egress bool `json:"egress"`
	// CgroupLayout: "v1", "hybrid", "v2", or "" when no cgroup fs is mounted.
	CgroupLayout string `json:"cgroup_layout"`
	// Cgroup2Mount is where the cgroup2 hierarchy is mounted ("" if none):
	// /sys/fs/cgroup on v2, e.g. /sys/fs/cgroup/unified on hybrid.
	Cgroup2Mount string `json:"cgroup2_mount,omitempty"`
	// TracefsMount is where tracefs is mounted ("" if not).
	TracefsMount string `json:"tracefs_mount,omitempty"`
}

// Options tune Run. The zero value checks this host as the current user.
type Options struct {
	// Address is the --address flag; $HOOKBOX_CONTAINERD_ADDRESS and the
	// system default follow, as for daemon.Resolve.
	Address string
	// StateDir and RuntimeDir locate the managed daemon ("" = defaults).
	StateDir, RuntimeDir string
	// PingTimeout bounds the containerd probe (0 = daemon.DefaultPingTimeout).
	PingTimeout time.Duration
	// TracerSocket is the tracer helper's socket, probed for a non-root
	// user.
	TracerSocket string
}

// Check names, in report order.
const (
	CheckContainerd        = "containerd"
	CheckRunc              = "runc"
	CheckCgroupLayout      = "cgroup-layout"
	CheckCgroupControllers = "cgroup-controllers"
	CheckOverlayfs         = "overlayfs"
	CheckTmpfs             = "tmpfs"
	CheckTracefs           = "tracefs"
	CheckBTF               = "btf"
	CheckBPF               = "bpf"
	CheckBPFLSM            = "bpf-lsm"
	CheckUserNamespaces    = "user-namespaces"
	CheckRootlesskit       = "rootlesskit"
	CheckUIDMap            = "newuidmap"
	CheckSubIDs            = "subuid"
)

// CheckEgress (egress.go) follows the checks above in reports.

// Run checks this host.
func Run(ctx context.Context, opts Options) Report {
	h := host{root: "/", euid: os.Geteuid(), uid: os.Getuid(), lookPath: exec.LookPath}
	if h.euid == 0 {
		h.loadLSM = loadTracerLSM
	}
	if u, err := user.Current(); err == nil {
		h.user = u.Username
	}
	cf := gatherContainerd(ctx, opts, h)
	rc := gatherRunc(ctx, h.lookPath)
	r := h.report(cf, rc)
	if h.euid != 0 {
		r = h.rootlessReport(r, gatherRootlessDaemon(ctx, opts), gatherHelper(opts.TracerSocket))
	}
	return r
}

// rootlessReport adds what a non-root user's rootless runs get: the
// rootless containerd, their own cgroup (and limits) and the tracer helper.
func (h host) rootlessReport(r Report, df rootlessDaemonFacts, hf helperFacts) Report {
	delegation := gatherDelegation(h, r.Capabilities.Cgroup2Mount)
	delegated, limits, dc := cgroupDelegationCheck(h, delegation)
	if delegated {
		delegated, dc = daemonOutsideCheck(dc, delegation, df.Cgroup)
		limits = limits && delegated
	}
	traced, tc := tracerHelperCheck(h, hf)
	for i, c := range r.Checks {
		if c.Name == CheckContainerd {
			r.Checks[i] = rootlessContainerdCheck(df, r.Capabilities.Rootless)
		}
	}
	r.Checks = append(r.Checks, dc, tc)
	r.Capabilities.CgroupLimits = r.Capabilities.Rootless && limits
	r.Capabilities.CanTrace = r.Capabilities.Rootless && traced && delegated
	r.Capabilities.CanEnforce = r.Capabilities.CanTrace && kernelAtLeast(h, 5, 3)
	r.Capabilities.CanDeny = r.Capabilities.CanDeny && r.Capabilities.CanTrace
	return r
}

// gatherRootlessDaemon finds the rootless containerd as
// daemon.ResolveRootless would, without starting one.
func gatherRootlessDaemon(ctx context.Context, opts Options) rootlessDaemonFacts {
	timeout := opts.PingTimeout
	if timeout <= 0 {
		timeout = daemon.DefaultPingTimeout
	}
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		addr := filepath.Join(x, "containerd", "containerd.sock")
		if v, err := daemon.Ping(ctx, addr, timeout); err == nil {
			return rootlessDaemonFacts{Address: addr, Kind: "containerd-rootless", Version: v.Version}
		}
	}
	stateDir, runtimeDir := daemon.Options{StateDir: opts.StateDir, RuntimeDir: opts.RuntimeDir}.Dirs()
	if stateDir == "" || runtimeDir == "" {
		return rootlessDaemonFacts{Address: "(no XDG_RUNTIME_DIR)", Kind: "managed"}
	}
	m := daemon.RootlessPaths(stateDir, runtimeDir)
	f := rootlessDaemonFacts{Address: m.Address, Kind: "managed by hookbox"}
	if st, err := m.Status(ctx); err == nil && st.Answering {
		f.Version = st.Version
		if daemonCgroup, err := hostfacts.ReadProcCgroup(st.PID); err == nil {
			f.Cgroup = daemonCgroup.Unified
		}
	}
	return f
}

// host is what the filesystem probes read: a root directory laid out like
// / (fixtures in tests), the identity to judge for, and how to find
// programs.
type host struct {
	root     string
	euid     int
	uid      int
	user     string
	lookPath func(string) (string, error)
	// loadLSM, when set, loads the tracer with its BPF LSM programs and
	// says whether they loaded and attached (nil) or why not: an active
	// BPF LSM does not mean the kernel accepts LSM programs.
	loadLSM func() error
}

// report runs the filesystem probes and assembles the report, given the
// facts about containerd and runc gathered elsewhere.
func (h host) report(cf containerdFacts, rc runcFacts) Report {
	mounts, mountsErr := hostfacts.ReadMounts(h.path("/proc/self/mountinfo"))
	fss, fssErr := readFilesystems(h.path("/proc/filesystems"))

	cg, cgErr := hostfacts.CgroupsOf(mounts)
	if mountsErr == nil {
		mountsErr = cgErr
	}
	cgCheck := cgroupLayoutCheck(cg, mountsErr)
	ctrl, ctrlCheck := cgroupControllersCheck(h, cg)
	overlay := overlayCheck(h, fss, fssErr)
	tmpfs := tmpfsCheck(fss, fssErr)
	tracefsAt, tracefs := tracefsCheck(mounts, fss, fssErr)
	btf := btfCheck(h)
	bpf := bpfCheck(h)
	lsm, lsmCheck := bpfLSMCheck(h)
	userns, usernsCheck := userNamespacesCheck(h)
	rlk := rootlesskitCheck(h.lookPath)
	uidmap := uidmapCheck(h.lookPath)
	subids := subIDsCheck(h)

	rootless := rlk.Status == OK && uidmap.Status == OK && subids.Status == OK && userns
	egress, egressC := egressCheck(h, rootless)
	canTrace := bpf.Status == OK && btf.Status == OK && tracefsAt != "" && cg.Unified != ""
	caps := Capabilities{
		CanTrace:         canTrace,
		CanEnforce:       canTrace && kernelAtLeast(h, 5, 3),
		CanDeny:          canTrace && lsm,
		NetworkIsolation: exists(h.path("/proc/self/ns/net")) && (h.euid == 0 || rootless),
		UserNamespaces:   userns,
		Tmpfs:            tmpfs.Status == OK && (h.euid == 0 || rootless),
		CgroupLimits:     ctrl,
		Rootless:         rootless,
		Egress:           egress,
		CgroupLayout:     layoutName(cg.Mode),
		Cgroup2Mount:     cg.Unified,
		TracefsMount:     tracefsAt,
	}
	return Report{
		Checks: []Check{
			containerdCheck(cf),
			runcCheck(rc),
			cgCheck,
			ctrlCheck,
			overlay,
			tmpfs,
			tracefs,
			btf,
			bpf,
			lsmCheck,
			usernsCheck,
			rlk,
			uidmap,
			subids,
			egressC,
		},
		Capabilities: caps,
	}
}

// containerdFacts is what the containerd check judges.
type containerdFacts struct {
	Address string
	Source  daemon.Source
	Version string // "" when it did not answer
	PingErr error  // why it did not answer
	// The managed daemon (looked at only when Address does not answer).
	ManagedAddress string
	ManagedVersion string // "" when not running or not answering
	ManagedPID     int
	// The containerd binary a managed daemon would run.
	Binary string // "" when none
	EUID   int
}

func gatherContainerd(ctx context.Context, opts Options, h host) containerdFacts {
	timeout := opts.PingTimeout
	if timeout <= 0 {
		timeout = daemon.DefaultPingTimeout
	}
	f := containerdFacts{EUID: h.euid}
	if p, err := h.lookPath("containerd"); err == nil {
		f.Binary = p
	}
	addr, src, err := daemon.SelectAddress(opts.Address)
	f.Address, f.Source = addr, src
	if err != nil {
		f.Address, f.PingErr = opts.Address, err
		return f
	}
	v, err := daemon.Ping(ctx, addr, timeout)
	if err == nil {
		f.Version = v.Version
		return f
	}
	f.PingErr = err
	if src != daemon.SourceSystem {
		return f
	}
	stateDir, runtimeDir := daemon.Options{StateDir: opts.StateDir, RuntimeDir: opts.RuntimeDir}.Dirs()
	if stateDir != "" && runtimeDir != "" {
		m := daemon.ManagedPaths(stateDir, runtimeDir)
		f.ManagedAddress = m.Address
		if st, err := m.Status(ctx); err == nil && st.Answering {
			f.ManagedVersion, f.ManagedPID = st.Version, st.PID
		}
	}
	return f
}

func containerdCheck(f containerdFacts) Check {
	c := Check{Name: CheckContainerd}
	binary := "no containerd binary on PATH"
	if f.Binary != "" {
		binary = "binary " + f.Binary
	}
	switch {
	case f.Version != "":
		c.Status = OK
		c.Detail = fmt.Sprintf("containerd %s answers at %s (%s); %s", f.Version, f.Address, f.Source, binary)
	case f.Source == daemon.SourceFlag:
		c.Status, c.Detail = Fail, fmt.Sprintf("%v (from --address)", f.PingErr)
		c.Fix = "check the --address value, or start the containerd it names"
	case f.Source == daemon.SourceEnv:
		c.Status, c.Detail = Fail, fmt.Sprintf("%v (from $%s)", f.PingErr, daemon.EnvAddress)
		c.Fix = "fix or unset " + daemon.EnvAddress
	case f.ManagedVersion != "":
		c.Status = OK
		c.Detail = fmt.Sprintf("managed containerd %s answers at %s (pid %d); the system address does not: %v", f.ManagedVersion, f.ManagedAddress, f.ManagedPID, f.PingErr)
	case errors.Is(f.PingErr, syscall.EACCES) || errors.Is(f.PingErr, syscall.EPERM):
		c.Status, c.Detail = Fail, fmt.Sprint(f.PingErr)
		c.Fix = "run hookbox as root, or pass --address to a rootless containerd ($XDG_RUNTIME_DIR/containerd/containerd.sock)"
	case f.Binary == "":
		c.Status, c.Detail = Fail, fmt.Sprintf("%v, and %s", f.PingErr, binary)
		c.Fix = "apt-get install containerd runc, or pass --address"
	case f.EUID != 0:
		c.Status, c.Detail = Fail, fmt.Sprintf("%v; a managed containerd (%s) needs root", f.PingErr, binary)
		c.Fix = "run hookbox as root, or start rootless containerd and pass --address"
	default:
		c.Status = OK
		c.Detail = fmt.Sprintf("none answers yet (%v); hookbox run will start a managed containerd (%s)", f.PingErr, binary)
	}
	return c
}

// runcFacts: where runc is and what `runc --version` said.
type runcFacts struct {
	Path    string
	LookErr error
	Output  string
	RunErr  error
}

func gatherRunc(ctx context.Context, lookPath func(string) (string, error)) runcFacts {
	var f runcFacts
	f.Path, f.LookErr = lookPath("runc")
	if f.LookErr != nil {
		return f
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, f.Path, "--version").Output()
	f.Output, f.RunErr = string(out), err
	return f
}

func runcCheck(f runcFacts) Check {
	c := Check{Name: CheckRunc}
	switch {
	case f.LookErr != nil:
		c.Status, c.Detail, c.Fix = Fail, "runc is not on PATH", "apt-get install runc"
	case f.RunErr != nil:
		c.Status, c.Detail, c.Fix = Fail, fmt.Sprintf("%s --version failed: %v", f.Path, f.RunErr), "reinstall runc: apt-get install --reinstall runc"
	default:
		v := runcVersion(f.Output)
		if v == "" {
			c.Status, c.Detail, c.Fix = Warn, fmt.Sprintf("%s --version printed no version", f.Path), "check that "+f.Path+" is runc"
			break
		}
		c.Status, c.Detail = OK, fmt.Sprintf("runc %s at %s", v, f.Path)
	}
	return c
}

// runcVersion picks X from the line "runc version X".
func runcVersion(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "runc version "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// kernelAtLeast compares /proc/sys/kernel/osrelease with major.minor
// (false when it cannot be read).
func kernelAtLeast(h host, major, minor int) bool {
	b, err := os.ReadFile(h.path("/proc/sys/kernel/osrelease"))
	if err != nil {
		return false
	}
	parts := strings.SplitN(strings.TrimSpace(string(b)), ".", 3)
	if len(parts) < 2 {
		return false
	}
	maj, err1 := strconv.Atoi(leadingDigits(parts[0]))
	mnr, err2 := strconv.Atoi(leadingDigits(parts[1]))
	if err1 != nil || err2 != nil {
		return false
	}
	return maj > major || (maj == major && mnr >= minor)
}

// leadingDigits is the decimal prefix of s ("3" of "3-rc1").
func leadingDigits(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}

// loadTracerLSM loads the exec tracer the way a run does and reports
// whether its BPF LSM programs attached.
func loadTracerLSM() error {
	t, err := ebpf.Load(ebpf.Options{})
	if err != nil {
		return fmt.Errorf("the exec tracer did not load: %w", err)
	}
	defer t.Close()
	return t.LSM()
}
