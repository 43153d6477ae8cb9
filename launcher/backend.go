package launcher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"

	"hookbox.dev/hookbox/ebpf"
	"hookbox.dev/hookbox/launcher/cgroup"
	"hookbox.dev/hookbox/launcher/daemon"
	"hookbox.dev/hookbox/launcher/rootless"
	"hookbox.dev/hookbox/oci"
	"hookbox.dev/hookbox/tracehelper"
)

// Backend is where runs execute: the containerd endpoint and client, where
// runc keeps its state and the task FIFOs go, how each run gets a cgroup of
// its own, and how its execs are traced. The run lifecycle asks it these
// questions and never branches on which backend it is (docs/contracts.md
// §7): a Backend does not even say which one it is.
type Backend struct {
	Client  *containerd.Client
	Address string
	// RuncRoot and FIFODir, when set, replace runc's state root and the
	// client's FIFO directory (both of which are root's by default).
	RuncRoot string
	FIFODir  string
	// State is containerd's state directory (its task bundles), when known
	// (daemon.Endpoint.State): gc looks there for bundles no shim serves.
	State   string
	Cgroups Cgroups
	// ShimGroup: runs join the shim group (ShimGroupID) when its shim
	// answers, and make it when not.
	ShimGroup bool
	// ShimFront is the runtime binary runs' containers name (FindShimFront),
	// "" for io.containerd.runc.v2.
	ShimFront string
	// Tracer returns the exec tracer of a run; it is called once per run,
	// in the background. An error makes the verdict unchecked with the
	// error (an *UnavailableError's ID) as the reason.
	Tracer func() (ExecTracer, error)
}

// Runtime is the runtime runs' containers name: the shim front, else
// containerd's runc shim.
func (b *Backend) Runtime() string {
	if b.ShimFront != "" {
		return b.ShimFront
	}
	return runcRuntime
}

// Close releases the backend's client.
func (b *Backend) Close() error {
	if b == nil || b.Client == nil {
		return nil
	}
	return b.Client.Close()
}

// Cgroups is how a backend gives a run a cgroup of its own: the unit of
// kill-all teardown, limits and trace scope.
type Cgroups interface {
	// Path is the run's cgroup path, known before anything is created
	// (recorded in the intent so gc finds it); "" when the run will have
	// none.
	Path(runID string) string
	// RuntimeCreates: the OCI spec names Path with the run's limits and
	// the runtime creates it. Otherwise the spec carries neither and
	// Place moves init into the cgroup between create and start.
	RuntimeCreates() bool
	// Place gives the created task's init (not started yet) its cgroup and
	// returns its path and the limits it could not apply, as degraded
	// reason ids. An error means the run has no cgroup of its own: it is
	// degraded (no limits, no trace), and teardown relies on the
	// container's pid namespace.
	Place(runID string, initPID int, limits cgroup.Limits) (string, []string, error)
	// Helpers is where the programs hookbox runs on the host for a run
	// (secret lookups, the notifier) get cgroups of their own; without
	// one they run in their process group only, and the result says so.
	Helpers() cgroup.Helpers
}

// runtimeCgroups: the runtime (runc as root) creates /hookbox/<run-id>
// with the limits from the spec.
type runtimeCgroups struct{}

func (runtimeCgroups) Path(runID string) string { return oci.CgroupsPath(runID) }
func (runtimeCgroups) RuntimeCreates() bool     { return true }
func (runtimeCgroups) Place(runID string, _ int, _ cgroup.Limits) (string, []string, error) {
	return oci.CgroupsPath(runID), nil, nil
}
func (runtimeCgroups) Helpers() cgroup.Helpers { return cgroup.RootHelpers() }

// delegatedCgroups: a rootless runtime cannot create cgroups, so hookbox
// makes <jobs>/<run-id> in the user's delegated cgroup2 subtree itself.
type delegatedCgroups struct{ d cgroup.Delegation }

func (c delegatedCgroups) Path(runID string) string { return path.Join(c.d.Jobs, runID) }
func (delegatedCgroups) RuntimeCreates() bool       { return false }
func (c delegatedCgroups) Place(runID string, pid int, l cgroup.Limits) (string, []string, error) {
	return c.d.Place(runID, pid, l)
}
func (c delegatedCgroups) Helpers() cgroup.Helpers { return c.d.Helpers() }

// noCgroups: no delegated subtree; why says so.
type noCgroups struct{ why string }

func (noCgroups) Path(string) string   { return "" }
func (noCgroups) RuntimeCreates() bool { return false }
func (c noCgroups) Place(string, int, cgroup.Limits) (string, []string, error) {
	return "", nil, errors.New(c.why)
}
func (c noCgroups) Helpers() cgroup.Helpers { return cgroup.NoHelpers(c.why) }

// hostCgroups is how this process's runs get cgroups, as Connect decides
// it, for what needs it without a backend (gc).
func hostCgroups() Cgroups {
	if _, inner := rootless.Inner(); inner {
		return rootlessCgroups()
	}
	return runtimeCgroups{}
}

// rootlessCgroups: a delegated subtree's, or none.
func rootlessCgroups() Cgroups {
	d, err := cgroup.FindDelegation()
	if err != nil {
		return noCgroups{err.Error()}
	}
	return delegatedCgroups{d}
}

// BackendConfig is what connecting to a backend needs from the caller.
type BackendConfig struct {
	// Address is the containerd socket asked for explicitly ("" = the
	// daemon package's precedence).
	Address string
	Daemon  daemon.Options
	// Traced: runs will be traced, so reach the tracer helper now.
	Traced bool
	// TraceRingSize is the ring buffer size in bytes of a BPF tracer this
	// process loads itself (0: ebpf.DefaultRingSize, see
	// ebpf.Options.RingSize). A tracer helper has its own; a size set
	// here makes a root run load its own tracer, not the managed one's.
	TraceRingSize int
	// ManagedTracer, when set, lets a root run with no tracer helper
	// listening trace through the managed tracer (started on first use)
	// instead of loading the BPF programs itself.
	ManagedTracer *ManagedTracerConfig
	// NoShimGroup keeps every run's task in a shim of its own (rootless
	// backends always do).
	NoShimGroup bool
	// ShimFront is the shim front runs name as their runtime
	// (FindShimFront), "" for none.
	ShimFront string
	// Early, when set, is a connection DialEarly began with the same
	// address and daemon options; Connect uses it when it succeeded.
	Early *EarlyDial
}

// EarlyDial is a connection to a containerd that already answers, made
// while the caller does other work (hookbox run compiles the spec).
type EarlyDial struct {
	done     chan struct{}
	client   *containerd.Client
	endpoint daemon.Endpoint
	err      error
	taken    bool
	// notes are the progress lines of the dial, for Connect to print.
	notes []string
}

// DialEarly starts connecting as Connect would, except that it never
// starts a managed containerd (opts.AutoStart is ignored): nothing of a
// run may exist before its spec compiled, and a daemon that does not
// answer is left to Connect. Call Close when done with it.
func DialEarly(ctx context.Context, address string, opts daemon.Options) *EarlyDial {
	e := &EarlyDial{done: make(chan struct{})}
	opts.AutoStart = false
	opts.Progress = func(msg string) { e.notes = append(e.notes, msg) }
	go func() {
		defer close(e.done)
		e.client, e.endpoint, e.err = daemon.Resolve(ctx, address, opts)
	}()
	return e
}

// take returns the early connection once made, or ok false, and prints
// its progress lines with progress.
func (e *EarlyDial) take(progress func(string)) (*containerd.Client, daemon.Endpoint, bool) {
	if e == nil {
		return nil, daemon.Endpoint{}, false
	}
	<-e.done
	if e.err != nil {
		return nil, daemon.Endpoint{}, false
	}
	e.taken = true
	for _, msg := range e.notes {
		if progress != nil {
			progress(msg)
		}
	}
	return e.client, e.endpoint, true
}

// Close closes the early connection unless Connect took it.
func (e *EarlyDial) Close() {
	if e == nil {
		return
	}
	<-e.done
	if e.client != nil && !e.taken {
		e.client.Close()
	}
}

// ManagedTracerConfig is how a root hookbox starts its managed tracer
// (daemon.ManagedTracer).
type ManagedTracerConfig struct {
	// Executable is the hookbox binary to start as `tracer serve --managed`.
	Executable string
	// RuntimeDir is hookbox's runtime directory ("" =
	// daemon.DefaultRuntimeDir()).
	RuntimeDir string
}

// Connect returns the backend this process runs on: rootful, or (inside
// RootlessKit's namespaces, see rootless.Inner) rootless. A rootless user
// outside them must call EnterRootless first.
func Connect(ctx context.Context, cfg BackendConfig) (*Backend, error) {
	if rc, inner := rootless.Inner(); inner {
		return connectRootless(ctx, rc, cfg)
	}
	client, endpoint, early := cfg.Early.take(cfg.Daemon.Progress)
	if !early {
		var err error
		if client, endpoint, err = daemon.Resolve(ctx, cfg.Address, cfg.Daemon); err != nil {
			return nil, err
		}
	}
	b := &Backend{Client: client, Address: endpoint.Address, RuncRoot: endpoint.RuncRoot, State: endpoint.State,
		Cgroups: runtimeCgroups{}, ShimGroup: !cfg.NoShimGroup, ShimFront: cfg.ShimFront, Tracer: func() (ExecTracer, error) {
			return loadLocalTracer(ebpf.Options{RingSize: cfg.TraceRingSize})
		}}
	if cfg.Traced {
		// One BPF load per host: a root hookbox also traces through the
		// helper when one answers, and loads the tracer itself otherwise.
		if c, err := tracehelper.Dial(tracehelper.SocketPath()); err == nil {
			b.Tracer = throughHelper(c)
		} else if cfg.ManagedTracer != nil && cfg.TraceRingSize == 0 {
			b.Tracer = throughManaged(*cfg.ManagedTracer)
		}
	}
	return b, nil
}

// managedStartTimeout bounds starting the managed tracer: the exec of a
// hookbox and its listen, not the BPF load (the first watch waits for it).
const managedStartTimeout = 5 * time.Second

// throughManaged traces through the managed tracer of this build's key,
// starting it if none runs. Whatever fails on the way (it cannot start,
// cannot be reached, refuses the watch) falls back to a tracer loaded in
// this process, never to an unarmed run.
func throughManaged(cfg ManagedTracerConfig) func() (ExecTracer, error) {
	return func() (ExecTracer, error) {
		runtimeDir := cfg.RuntimeDir
		if runtimeDir == "" {
			runtimeDir = daemon.DefaultRuntimeDir()
		}
		if runtimeDir == "" || cfg.Executable == "" {
			return loadLocalTracer(ebpf.Options{})
		}
		m := daemon.TracerPaths(runtimeDir, tracehelper.ManagedKey())
		var env []string
		if k := os.Getenv(tracehelper.KeyEnv); k != "" {
			env = append(env, tracehelper.KeyEnv+"="+k)
		}
		t := managedTracer{m: m, exe: cfg.Executable, env: env}
		if err := t.start(); err != nil {
			return loadLocalTracer(ebpf.Options{})
		}
		return t, nil
	}
}

// managedTracer watches through the managed tracer, one connection per
// watch, dialled when the run arms it.
type managedTracer struct {
	m   daemon.ManagedTracer
	exe string
	env []string
}

func (t managedTracer) start() error {
	ctx, cancel := context.WithTimeout(context.Background(), managedStartTimeout)
	defer cancel()
	return t.m.Start(ctx, t.exe, t.env)
}

func (t managedTracer) Watch(dir string, id uint64, policy ebpf.Policy) (ExecWatch, error) {
	c, err := tracehelper.DialManaged(t.m.Socket, t.m.Key)
	if err != nil && t.start() == nil {
		// It exited (idle, or stopped by gc) since it answered: once more.
		c, err = tracehelper.DialManaged(t.m.Socket, t.m.Key)
	}
	if err == nil {
		if w, err := c.Watch(dir, policy); err == nil {
			return w, nil
		}
	}
	// What the run says, if this fails too, is this process's tracer's
	// reason, as without a managed tracer.
	local, err := loadLocalTracer(ebpf.Options{})
	if err != nil {
		return nil, err
	}
	return local.Watch(dir, id, policy)
}

func connectRootless(ctx context.Context, rc *rootless.Context, cfg BackendConfig) (*Backend, error) {
	client, _, err := daemon.Resolve(ctx, rc.Address, cfg.Daemon)
	if err != nil {
		return nil, err
	}
	b := &Backend{Client: client, Address: rc.Address, RuncRoot: rc.RuncRoot, FIFODir: rc.FIFODir, ShimFront: cfg.ShimFront}
	b.Cgroups = rootlessCgroups()
	if rc.TracerFD <= 0 {
		why := rc.TracerUnavailable
		b.Tracer = func() (ExecTracer, error) {
			return nil, &UnavailableError{ID: ReasonRootlessTracer, Detail: why}
		}
		return b, nil
	}
	// Inherited across the re-exec on purpose; not to be inherited further
	// (by a notifier, say).
	syscall.CloseOnExec(rc.TracerFD)
	c, err := tracehelper.FromFile(os.NewFile(uintptr(rc.TracerFD), "tracer-helper"))
	if err != nil {
		b.Tracer = func() (ExecTracer, error) {
			return nil, &UnavailableError{ID: ReasonRootlessTracer, Detail: "tracer helper connection: " + err.Error()}
		}
		return b, nil
	}
	b.Tracer = throughHelper(c)
	return b, nil
}

// ReasonRootlessTracer is the reason id of an unchecked verdict of a
// rootless run with no tracer helper to ask: tracer-unavailable:rootless.
const ReasonRootlessTracer = "rootless"

// EnterRootless provisions the rootless backend for a non-root user
// (finding or starting a rootless containerd under RootlessKit), connects
// to the tracer helper when traced and one listens, and re-executes this
// hookbox command (args) inside RootlessKit's namespaces, where Connect
// returns the rootless backend. It returns only on failure.
func EnterRootless(ctx context.Context, cfg BackendConfig, stateDir, cacheDir string, args []string) error {
	endpoint, err := daemon.ResolveRootless(ctx, cfg.Address, cfg.Daemon)
	if err != nil {
		return err
	}
	rc := rootless.Context{Address: endpoint.Address, RuncRoot: endpoint.RuncRoot, FIFODir: endpoint.FIFODir,
		StateDir: stateDir, CacheDir: cacheDir}
	if !cfg.Traced {
		return rootless.Enter(endpoint, rc, args)
	}
	// Dialled here, outside the namespaces: the helper authenticates this
	// connection by its peer credentials, which are the user's, and its
	// socket need not be visible inside RootlessKit's mount namespace.
	f, why := dialHelperFile()
	if f == nil {
		rc.TracerUnavailable = why
		return rootless.Enter(endpoint, rc, args)
	}
	rc.TracerFD = int(f.Fd())
	return rootless.Enter(endpoint, rc, args, f)
}

// dialHelperFile connects to `hookbox tracer serve` and returns the
// connection as a file to inherit, or says why there is none.
func dialHelperFile() (*os.File, string) {
	path := tracehelper.SocketPath()
	c, err := tracehelper.Dial(path)
	if err != nil {
		cause := err
		var op *net.OpError
		if errors.As(err, &op) {
			cause = op.Err
		}
		return nil, fmt.Sprintf("no tracer helper answers at %s (%v): run `sudo hookbox tracer serve` (or install contrib/systemd/hookbox-tracer.service) for a checked verdict", path, cause)
	}
	defer c.Close()
	f, err := c.File()
	if err != nil {
		return nil, fmt.Sprintf("tracer helper connection: %v", err)
	}
	return f, ""
}

// throughHelper traces runs through a connection to the helper.
func throughHelper(c *tracehelper.Client) func() (ExecTracer, error) {
	return func() (ExecTracer, error) { return helperTracer{c}, nil }
}

// helperTracer watches through the privileged helper: it is handed the
// cgroup directory itself, and proves ownership by it.
type helperTracer struct{ c *tracehelper.Client }

func (h helperTracer) Watch(dir string, _ uint64, policy ebpf.Policy) (ExecWatch, error) {
	w, err := h.c.Watch(dir, policy)
	if err != nil {
		return nil, err
	}
	return w, nil
}
