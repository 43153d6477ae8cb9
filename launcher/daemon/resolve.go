package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"

	"hookbox.dev/hookbox/internal/config"
	"hookbox.dev/hookbox/internal/host"
)

// SystemAddress is the system containerd's socket, the last address Resolve
// tries before the managed daemon.
const SystemAddress = "/run/containerd/containerd.sock"

// EnvAddress names the environment variable that overrides the system
// address (and is overridden by the --address flag).
const EnvAddress = "HOOKBOX_CONTAINERD_ADDRESS"

// DefaultPingTimeout bounds one "does it answer" probe (connect + Version).
const DefaultPingTimeout = 2 * time.Second

// Sentinel errors; match with errors.Is.
var (
	// ErrNoAnswer: nothing answers as containerd at an address.
	ErrNoAnswer = errors.New("containerd does not answer")
	// ErrNoBinary: a managed daemon is needed but no containerd binary exists.
	ErrNoBinary = errors.New("no containerd binary")
	// ErrNeedsRoot: the managed daemon runs only as root (rootless containerd
	// needs rootlesskit, which hookbox does not start).
	ErrNeedsRoot = errors.New("managed containerd needs root")
)

// Source says where an endpoint's address came from.
type Source int

// The sources, in precedence order. (Prefixed: Managed is the daemon's type.)
const (
	SourceFlag    Source = iota // the --address flag
	SourceEnv                   // $HOOKBOX_CONTAINERD_ADDRESS
	SourceSystem                // the system default, /run/containerd/containerd.sock
	SourceManaged               // hookbox's managed private containerd
)

func (s Source) String() string {
	switch s {
	case SourceFlag:
		return "flag"
	case SourceEnv:
		return "env"
	case SourceSystem:
		return "system"
	case SourceManaged:
		return "managed"
	}
	return fmt.Sprintf("Source(%d)", int(s))
}

// Endpoint is the containerd Resolve connected to.
type Endpoint struct {
	Address string // socket path
	Source  Source
	Managed bool // hookbox's managed daemon (Source == SourceManaged)
	Version string
	// RuncRoot is where runc state should live for tasks on this endpoint
	// ("" = the runtime's default). Set for the managed daemon, whose tasks
	// would otherwise keep runc state in the system's /run/containerd/runc.
	RuncRoot string
	// State is the daemon's state directory, where its task bundles are,
	// when hookbox knows it: the managed daemon's, or containerd's default
	// for the default system socket; "" otherwise.
	State string
	// Rootless: the daemon runs in RootlessKit's user namespace; a rootless
	// hookbox enters the user and mount namespaces of ChildPID to use it.
	// FIFODir, when set, is where task stdio FIFOs go.
	Rootless bool
	ChildPID int
	FIFODir  string
}

// Options tune Resolve. The zero value resolves without auto-start.
type Options struct {
	// AutoStart allows starting (or reusing) the managed daemon when the
	// system address does not answer.
	AutoStart bool
	// StateDir is the managed daemon's home ("" = config.DataDir()).
	StateDir string
	// RuntimeDir is hookbox's runtime directory ("" = DefaultRuntimeDir()).
	RuntimeDir string
	// Progress, if set, receives one-line human progress messages.
	Progress func(string)
	// ContainerdBinary is the daemon to start ("" = exec.LookPath("containerd")).
	ContainerdBinary string
	// SystemAddress replaces the system default address ("" = SystemAddress).
	// For tests and unusual hosts.
	SystemAddress string
	// PingTimeout bounds each probe ("" = DefaultPingTimeout).
	PingTimeout time.Duration
}

// Dirs returns the state and runtime directories, defaulted where unset
// ("" when no default applies).
func (o Options) Dirs() (stateDir, runtimeDir string) {
	stateDir, runtimeDir = o.StateDir, o.RuntimeDir
	if stateDir == "" {
		stateDir = config.DataDir()
	}
	if runtimeDir == "" {
		runtimeDir = DefaultRuntimeDir()
	}
	return stateDir, runtimeDir
}

// DefaultRuntimeDir is hookbox's runtime directory, for sockets and other
// state that must not survive a reboot: /run/hookbox for root, else
// $XDG_RUNTIME_DIR/hookbox. It is "" when neither applies.
func DefaultRuntimeDir() string {
	if host.RealRoot() {
		return "/run/hookbox"
	}
	if x := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) {
		return filepath.Join(x, "hookbox")
	}
	return ""
}

// Resolve applies the address precedence and returns a client connected to
// the first containerd that answers, with its endpoint. An address from the
// flag or the environment must answer. When the system default does not,
// Resolve uses the managed daemon if it is running, else starts it when
// opts.AutoStart is set.
// The client has no namespace: callers set it. Close the client when done.
func Resolve(ctx context.Context, flagAddr string, opts Options) (*client.Client, Endpoint, error) {
	timeout := opts.PingTimeout
	if timeout <= 0 {
		timeout = DefaultPingTimeout
	}
	addr, src, err := chooseAddress(flagAddr, os.Getenv(EnvAddress), opts.SystemAddress)
	if err != nil {
		return nil, Endpoint{}, err
	}
	c, v, pingErr := dialAndPing(ctx, addr, timeout)
	if pingErr == nil {
		return c, Endpoint{Address: addr, Source: src, Version: v.Version, State: defaultState(addr)}, nil
	}
	switch src {
	case SourceFlag:
		return nil, Endpoint{}, fmt.Errorf("%w (from --address): check the address or start that containerd", pingErr)
	case SourceEnv:
		return nil, Endpoint{}, fmt.Errorf("%w (from $%s): check the variable or unset it", pingErr, EnvAddress)
	}
	if errors.Is(pingErr, syscall.EACCES) || errors.Is(pingErr, syscall.EPERM) {
		// A daemon is there; starting another beside it would be wrong.
		return nil, Endpoint{}, fmt.Errorf("%w: run hookbox as root, or pass --address (for rootless containerd: $XDG_RUNTIME_DIR/containerd/containerd.sock)", pingErr)
	}
	stateDir, runtimeDir := opts.Dirs()
	var m Managed
	if stateDir != "" && runtimeDir != "" {
		m = ManagedPaths(stateDir, runtimeDir)
		// A managed daemon already running is used even without AutoStart:
		// what earlier runs left there is only reachable through it.
		if c, v, err := dialAndPing(ctx, m.Address, timeout); err == nil {
			progress(opts.Progress, fmt.Sprintf("no containerd answers at %s; using the running managed containerd at %s", addr, m.Address))
			return c, Endpoint{Address: m.Address, Source: SourceManaged, Managed: true, Version: v.Version, RuncRoot: m.RuncRoot, State: m.State}, nil
		}
	}
	if !opts.AutoStart {
		return nil, Endpoint{}, fmt.Errorf("%w (and no managed containerd runs): start containerd (systemctl start containerd) or pass --address", pingErr)
	}
	bin, err := containerdBinary(opts.ContainerdBinary)
	if err != nil {
		return nil, Endpoint{}, fmt.Errorf("containerd does not answer at %s and %w: apt-get install containerd runc, or pass --address", addr, err)
	}
	if m.Address == "" {
		return nil, Endpoint{}, fmt.Errorf("containerd does not answer at %s and hookbox has no state or runtime directory for a managed containerd (set XDG_DATA_HOME and XDG_RUNTIME_DIR), or pass --address", addr)
	}
	m.Binary = bin
	progress(opts.Progress, fmt.Sprintf("no containerd answers at %s; using the managed containerd at %s", addr, m.Address))
	began := time.Now()
	if err := m.Start(ctx); err != nil {
		return nil, Endpoint{}, err
	}
	c, v, err = dialAndPing(ctx, m.Address, timeout)
	if err != nil {
		return nil, Endpoint{}, fmt.Errorf("managed containerd started but %w: see %s, or run hookbox daemon stop", err, m.Log)
	}
	progress(opts.Progress, fmt.Sprintf("managed containerd %s ready at %s (%s)", v.Version, m.Address, time.Since(began).Round(time.Millisecond)))
	return c, Endpoint{Address: m.Address, Source: SourceManaged, Managed: true, Version: v.Version, RuncRoot: m.RuncRoot, State: m.State}, nil
}

// defaultState is the state directory of the daemon at addr when that is
// the system default socket, whose daemon (unless configured otherwise)
// keeps its state in containerd's default place.
func defaultState(addr string) string {
	if addr == SystemAddress {
		return DefaultSystemState
	}
	return ""
}

// SelectAddress applies the precedence (flag, $HOOKBOX_CONTAINERD_ADDRESS,
// SystemAddress) without connecting: the address Resolve tries first.
func SelectAddress(flagAddr string) (string, Source, error) {
	return chooseAddress(flagAddr, os.Getenv(EnvAddress), "")
}

// chooseAddress applies the precedence flag > env > system.
func chooseAddress(flagAddr, envAddr, systemAddr string) (string, Source, error) {
	addr, src := systemAddr, SourceSystem
	if addr == "" {
		addr = SystemAddress
	}
	switch {
	case flagAddr != "":
		addr, src = flagAddr, SourceFlag
	case envAddr != "":
		addr, src = envAddr, SourceEnv
	}
	path, err := socketPath(addr)
	if err != nil {
		return "", src, err
	}
	return path, src, nil
}

// socketPath accepts "/path" or "unix:///path" and returns the path: the
// containerd client itself takes a bare path.
func socketPath(addr string) (string, error) {
	p := strings.TrimPrefix(addr, "unix://")
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("containerd address %q: want an absolute unix socket path (e.g. %s)", addr, SystemAddress)
	}
	return filepath.Clean(p), nil
}

// containerdBinary returns the binary to start: the one given (which must
// exist), else containerd on PATH.
func containerdBinary(given string) (string, error) {
	if given != "" {
		if _, err := exec.LookPath(given); err != nil {
			return "", fmt.Errorf("%w at %s", ErrNoBinary, given)
		}
		return given, nil
	}
	p, err := exec.LookPath("containerd")
	if err != nil {
		return "", fmt.Errorf("%w is on PATH", ErrNoBinary)
	}
	return p, nil
}

// Ping reports whether containerd answers at address (a socket path, or
// unix:// URL) within timeout, and its version. The error wraps ErrNoAnswer
// and, where the socket itself is the problem, the errno (ENOENT, EACCES,
// ECONNREFUSED), and says which in words.
func Ping(ctx context.Context, address string, timeout time.Duration) (client.Version, error) {
	path, err := socketPath(address)
	if err != nil {
		return client.Version{}, err
	}
	c, v, err := dialAndPing(ctx, path, timeout)
	if err != nil {
		return client.Version{}, err
	}
	c.Close()
	return v, nil
}

// dialAndPing connects to the socket at path and asks for containerd's
// version. On success it returns the open client.
func dialAndPing(ctx context.Context, path string, timeout time.Duration) (*client.Client, client.Version, error) {
	if timeout <= 0 {
		timeout = DefaultPingTimeout
	}
	// A raw dial first: it tells "no socket", "permission denied" and
	// "stale socket" apart, which gRPC reports only as "unavailable".
	if err := dialSocket(path, timeout); err != nil {
		return nil, client.Version{}, err
	}
	c, err := client.New(path, client.WithTimeout(timeout))
	if err != nil {
		return nil, client.Version{}, fmt.Errorf("%w at %s: %v", ErrNoAnswer, path, err)
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := c.Version(pctx)
	if err != nil {
		c.Close()
		if ctx.Err() != nil {
			return nil, client.Version{}, fmt.Errorf("asking containerd at %s for its version: %w", path, ctx.Err())
		}
		return nil, client.Version{}, fmt.Errorf("%w at %s: something listens there but did not answer as containerd within %s: %v", ErrNoAnswer, path, timeout, err)
	}
	return c, v, nil
}

// dialSocket connects to the unix socket at path and hangs up.
func dialSocket(path string, timeout time.Duration) error {
	conn, err := net.DialTimeout("unix", path, timeout)
	if err == nil {
		conn.Close()
		return nil
	}
	why := "cannot connect"
	switch {
	case errors.Is(err, syscall.ENOENT):
		why = "no socket there"
	case errors.Is(err, syscall.ECONNREFUSED):
		why = "nothing listens on the socket (stale socket?)"
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		why = "permission denied"
	}
	return &noAnswerError{path: path, why: why, err: err}
}

// noAnswerError is ErrNoAnswer with the socket-level cause kept for
// errors.Is (ENOENT, EACCES…).
type noAnswerError struct {
	path, why string
	err       error
}

func (e *noAnswerError) Error() string {
	return fmt.Sprintf("%v at %s: %s", ErrNoAnswer, e.path, e.why)
}

func (e *noAnswerError) Unwrap() []error { return []error{ErrNoAnswer, e.err} }

func progress(f func(string), msg string) {
	if f != nil {
		f(msg)
	}
}

// EnvRootlessKitStateDir names the RootlessKit state directory of a
// rootless containerd given by address (--address or $HOOKBOX_CONTAINERD_ADDRESS);
// RootlessKit itself exports it to its child under this name.
const EnvRootlessKitStateDir = "ROOTLESSKIT_STATE_DIR"

// ResolveRootless finds the rootless containerd a non-root hookbox uses and
// the RootlessKit child whose namespaces it must enter, in this order:
//  1. an address from the flag or $HOOKBOX_CONTAINERD_ADDRESS, with
//     $ROOTLESSKIT_STATE_DIR (it must answer);
//  2. a per-user rootless containerd as nerdctl's containerd-rootless.sh
//     runs it: $XDG_RUNTIME_DIR/containerd/containerd.sock, with
//     $XDG_RUNTIME_DIR/containerd-rootless/child_pid;
//  3. hookbox's managed rootless containerd (RootlessPaths), started under
//     rootlesskit when opts.AutoStart is set.
//
// It checks that the daemon answers and returns no client: the caller
// connects from inside the namespaces.
func ResolveRootless(ctx context.Context, flagAddr string, opts Options) (Endpoint, error) {
	timeout := opts.PingTimeout
	if timeout <= 0 {
		timeout = DefaultPingTimeout
	}
	ping := func(addr string) (string, error) {
		c, v, err := dialAndPing(ctx, addr, timeout)
		if err != nil {
			return "", err
		}
		c.Close()
		return v.Version, nil
	}
	if flagAddr != "" || os.Getenv(EnvAddress) != "" {
		addr, src, err := chooseAddress(flagAddr, os.Getenv(EnvAddress), "")
		if err != nil {
			return Endpoint{}, err
		}
		kitDir := os.Getenv(EnvRootlessKitStateDir)
		if kitDir == "" {
			return Endpoint{}, fmt.Errorf("rootless containerd at %s (from %s): set $%s to its RootlessKit state directory, so hookbox can enter its namespaces", addr, src, EnvRootlessKitStateDir)
		}
		v, err := ping(addr)
		if err != nil {
			return Endpoint{}, fmt.Errorf("%w (from %s)", err, src)
		}
		pid, err := readChildPID(kitDir)
		if err != nil {
			return Endpoint{}, err
		}
		return Endpoint{Address: addr, Source: src, Version: v, Rootless: true, ChildPID: pid}, nil
	}
	if x := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) {
		addr := filepath.Join(x, "containerd", "containerd.sock")
		if v, err := ping(addr); err == nil {
			if pid, err := readChildPID(filepath.Join(x, "containerd-rootless")); err == nil {
				return Endpoint{Address: addr, Source: SourceSystem, Version: v, Rootless: true, ChildPID: pid}, nil
			}
		}
	}
	stateDir, runtimeDir := opts.Dirs()
	if stateDir == "" || runtimeDir == "" {
		return Endpoint{}, errors.New("rootless containerd: no state or runtime directory (set HOME and XDG_RUNTIME_DIR, e.g. XDG_RUNTIME_DIR=/run/user/$(id -u))")
	}
	m := RootlessPaths(stateDir, runtimeDir)
	endpoint := func(v string) (Endpoint, error) {
		pid, err := m.ChildPID()
		if err != nil {
			return Endpoint{}, err
		}
		return Endpoint{Address: m.Address, Source: SourceManaged, Managed: true, Version: v, RuncRoot: m.RuncRoot,
			State: m.State, Rootless: true, ChildPID: pid, FIFODir: m.FIFODir}, nil
	}
	if v, err := ping(m.Address); err == nil {
		return endpoint(v)
	}
	if !opts.AutoStart {
		return Endpoint{}, fmt.Errorf("%w at %s (hookbox's rootless containerd is not running): hookbox run starts it", ErrNoAnswer, m.Address)
	}
	bin, err := containerdBinary(opts.ContainerdBinary)
	if err != nil {
		return Endpoint{}, fmt.Errorf("rootless containerd: %w: apt-get install containerd runc rootlesskit uidmap", err)
	}
	m.Binary = bin
	progress(opts.Progress, fmt.Sprintf("starting the rootless containerd at %s (rootlesskit)", m.Address))
	began := time.Now()
	if err := m.Start(ctx); err != nil {
		return Endpoint{}, err
	}
	v, err := ping(m.Address)
	if err != nil {
		return Endpoint{}, fmt.Errorf("rootless containerd started but %w: see %s", err, m.Log)
	}
	progress(opts.Progress, fmt.Sprintf("rootless containerd %s ready (%s)", v, time.Since(began).Round(time.Millisecond)))
	return endpoint(v)
}
