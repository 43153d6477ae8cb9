package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"hookbox.dev/hookbox/internal/host"
)

// DefaultStartTimeout bounds how long Start waits for a new daemon to answer.
const DefaultStartTimeout = 20 * time.Second

// maxSocketPath is the longest unix socket path the kernel accepts
// (sun_path is 108 bytes with the terminating NUL).
const maxSocketPath = 107

// logRotateSize: at start, a log larger than this is moved to <log>.1.
const logRotateSize = 8 << 20

// logTailLines is how much of the log a start failure quotes.
const logTailLines = 15

// Managed is hookbox's private containerd: where its files live and which
// binary runs it. Build it with ManagedPaths; the zero value is not usable.
type Managed struct {
	Dir    string // <state dir>/containerd: config, root, log (persistent)
	RunDir string // <runtime dir>/containerd: state, sockets, pid file, lock

	Config       string // generated config.toml, rewritten at every start
	Root         string // containerd root: content, snapshots, metadata
	State        string // containerd state: task bundles
	Address      string // gRPC socket
	TTRPCAddress string // ttrpc socket
	PIDFile      string // pid of the running daemon, written by Start
	Log          string // daemon stdout and stderr, appended
	RuncRoot     string // runc state root for this daemon's tasks (see Endpoint.RuncRoot)

	// Rootless runs the daemon in a user namespace under RootlessKit
	// (docs/architecture.md, "Backends"); RootlessKitDir is its
	// --state-dir, whose child_pid names the process whose namespaces a
	// rootless hookbox enters. FIFODir is where tasks' stdio FIFOs go.
	Rootless       bool
	RootlessKitDir string
	FIFODir        string

	// Binary is the containerd to start ("" = containerd on PATH).
	Binary string
	// StartTimeout bounds waiting for an answer (0 = DefaultStartTimeout).
	StartTimeout time.Duration
}

// ManagedPaths lays out the managed daemon under hookbox's state directory
// (persistent: config, root, log) and runtime directory (gone at reboot:
// state, sockets, pid file), e.g. /var/lib/hookbox and /run/hookbox.
func ManagedPaths(stateDir, runtimeDir string) Managed {
	dir := filepath.Join(stateDir, "containerd")
	run := filepath.Join(runtimeDir, "containerd")
	return Managed{
		Dir:          dir,
		RunDir:       run,
		Config:       filepath.Join(dir, "config.toml"),
		Root:         filepath.Join(dir, "root"),
		Log:          filepath.Join(dir, "containerd.log"),
		State:        filepath.Join(run, "state"),
		Address:      filepath.Join(run, "containerd.sock"),
		TTRPCAddress: filepath.Join(run, "containerd.sock.ttrpc"),
		PIDFile:      filepath.Join(run, "containerd.pid"),
		RuncRoot:     filepath.Join(run, "runc"),
	}
}

// RootlessPaths lays out a non-root user's managed daemon like ManagedPaths
// (e.g. ~/.local/share/hookbox and $XDG_RUNTIME_DIR/hookbox), run under
// RootlessKit.
func RootlessPaths(stateDir, runtimeDir string) Managed {
	m := ManagedPaths(stateDir, runtimeDir)
	m.Rootless = true
	m.RootlessKitDir = filepath.Join(m.RunDir, "rootlesskit")
	m.FIFODir = filepath.Join(m.RunDir, "fifo")
	return m
}

// ChildPID is the pid of RootlessKit's child: its user and mount
// namespaces are where the daemon, its shims and runc live.
func (m Managed) ChildPID() (int, error) {
	return readChildPID(m.RootlessKitDir)
}

// readChildPID reads <RootlessKit state dir>/child_pid.
func readChildPID(stateDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, "child_pid"))
	if err != nil {
		return 0, fmt.Errorf("rootless containerd: RootlessKit's child pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("rootless containerd: %s holds %q, not a pid", filepath.Join(stateDir, "child_pid"), b)
	}
	return pid, nil
}

// rootlessCopyUp are the directories RootlessKit replaces with writable
// copies in its mount namespace: containerd 1.6 keeps shim sockets under
// /run/containerd whatever its config says, so the child removes the
// copies' links to the host's /run/containerd and /run/runc before starting
// containerd (as nerdctl's containerd-rootless.sh does).
var rootlessCopyUp = []string{"/etc", "/run"}

// command is the daemon's command line.
func (m Managed) command(bin string) (*exec.Cmd, error) {
	if !m.Rootless {
		return exec.Command(bin, "--config", m.Config), nil
	}
	kit, err := exec.LookPath("rootlesskit")
	if err != nil {
		return nil, fmt.Errorf("rootless containerd needs rootlesskit: apt-get install rootlesskit uidmap")
	}
	if _, err := exec.LookPath("newuidmap"); err != nil {
		return nil, fmt.Errorf("rootless containerd needs newuidmap: apt-get install uidmap")
	}
	// --net=host: slirp4netns needs /dev/net/tun, root-only on many hosts
	// (Debian 12 among them); every container still gets its own
	// loopback-only network namespace from its spec.
	args := []string{"--net=host", "--state-dir=" + m.RootlessKitDir}
	for _, d := range rootlessCopyUp {
		args = append(args, "--copy-up="+d)
	}
	args = append(args, "/bin/sh", "-c", `rm -f /run/containerd /run/runc && exec "$@"`, "hookbox-rootless-child", bin, "--config", m.Config)
	return exec.Command(kit, args...), nil
}

func (m Managed) lockFile() string { return filepath.Join(m.RunDir, "lock") }

func (m Managed) startTimeout() time.Duration {
	if m.StartTimeout > 0 {
		return m.StartTimeout
	}
	return DefaultStartTimeout
}

// validate refuses layouts containerd cannot use.
func (m Managed) validate() error {
	for _, p := range []string{m.Dir, m.RunDir, m.Config, m.Root, m.State, m.Address, m.TTRPCAddress, m.PIDFile, m.Log} {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("managed containerd: path %q is not absolute: pass absolute state and runtime directories", p)
		}
	}
	for _, s := range []string{m.Address, m.TTRPCAddress} {
		if len(s) > maxSocketPath {
			return fmt.Errorf("managed containerd: socket path %s is %d bytes, over the kernel's %d: use a shorter runtime directory", s, len(s), maxSocketPath)
		}
	}
	return nil
}

// Start makes the managed daemon run and answer. It is idempotent: a daemon
// already running from this layout is reused (and waited for, if it is
// still starting); a stale pid file or socket is removed. A new daemon is
// started detached in its own session with a fresh config and must answer
// within StartTimeout; otherwise it is killed and the error quotes the end
// of its log. Concurrent Starts and Stops of one layout are serialized by a
// lock file. Start needs root (ErrNeedsRoot).
func (m Managed) Start(ctx context.Context) error {
	if err := m.validate(); err != nil {
		return err
	}
	if !m.Rootless && !host.RealRoot() {
		return fmt.Errorf("%w (euid %d): run hookbox as root, or use the rootless backend (hookbox run --rootless)", ErrNeedsRoot, os.Geteuid())
	}
	bin, err := containerdBinary(m.Binary)
	if err != nil {
		return fmt.Errorf("managed containerd: %w: apt-get install containerd runc", err)
	}
	// hookbox's own directories stay traversable; the daemon's are private.
	for _, d := range []string{m.Dir, m.RunDir} {
		if err := os.MkdirAll(filepath.Dir(d), 0o755); err != nil {
			return fmt.Errorf("managed containerd: %w", err)
		}
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("managed containerd: %w", err)
		}
	}
	unlock, err := lockPath(ctx, m.lockFile())
	if err != nil {
		return fmt.Errorf("managed containerd: waiting for the lock %s: %w", m.lockFile(), err)
	}
	defer unlock()

	if p, err := m.find(); err != nil {
		return err
	} else if p != nil {
		defer p.close()
		// Running already: reuse it once it answers (it may be starting).
		if err := m.waitAnswer(ctx, p); err != nil {
			return fmt.Errorf("%w%s", err, logTail(m.Log, 0))
		}
		return nil
	}

	m.removeRuntimeFiles()
	cfg, err := renderConfig(m)
	if err != nil {
		return err
	}
	if err := host.WriteFileAtomic(m.Config, cfg, 0o600); err != nil {
		return fmt.Errorf("managed containerd: writing config: %w", err)
	}
	logf, offset, err := openLog(m.Log)
	if err != nil {
		return fmt.Errorf("managed containerd: opening log: %w", err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "--- hookbox: starting %s --config %s at %s\n", bin, m.Config, time.Now().UTC().Format(time.RFC3339))

	if m.Rootless {
		// A stale state dir (a killed RootlessKit) would make it refuse.
		_ = os.RemoveAll(m.RootlessKitDir)
	}
	cmd, err := m.command(bin)
	if err != nil {
		return err
	}
	cmd.Env = daemonEnv()
	d, err := startDetached(cmd, logf)
	if err != nil {
		return fmt.Errorf("managed containerd: starting %s: %w", bin, err)
	}
	defer d.p.close()
	p := d.p
	fail := func(err error) error {
		exit := d.kill()
		m.removeRuntimeFiles()
		return fmt.Errorf("%w (daemon: %s)%s", err, exit, logTail(m.Log, offset))
	}
	if err := host.WriteFileAtomic(m.PIDFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return fail(fmt.Errorf("managed containerd: writing pid file: %w", err))
	}
	if err := m.waitAnswer(ctx, p); err != nil {
		return fail(err)
	}
	if m.Rootless {
		if _, err := m.ChildPID(); err != nil {
			return fail(err)
		}
	}
	return nil
}

// detached is a daemon startDetached started: pinned by a pidfd, reaped
// in the background while this process lives.
type detached struct {
	cmd     *exec.Cmd
	p       *process
	reaped  chan struct{}
	waitErr error
}

// startDetached starts cmd as a daemon: in / (unless cmd.Dir says
// otherwise), leader of a new session, stdin /dev/null, stdout and stderr
// appended to logf. The caller closes d.p.
func startDetached(cmd *exec.Cmd, logf *os.File) (*detached, error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	cmd.SysProcAttr = detachAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// Open the pidfd before anything can reap the child: until Wait, even a
	// child that already exited keeps its pid.
	p, err := openProcess(cmd.Process.Pid)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	d := &detached{cmd: cmd, p: p, reaped: make(chan struct{})}
	go func() { d.waitErr = cmd.Wait(); close(d.reaped) }()
	return d, nil
}

// kill ends the daemon and says how it exited.
func (d *detached) kill() string {
	_ = d.cmd.Process.Kill()
	<-d.reaped
	return exitText(d.waitErr)
}

// waitAnswer waits until the daemon p answers on m.Address, p exits, ctx
// ends or StartTimeout passes.
func (m Managed) waitAnswer(ctx context.Context, p *process) error {
	deadline := time.Now().Add(m.startTimeout())
	var last error
	for {
		if gone, _ := p.exited(0); gone {
			return fmt.Errorf("managed containerd (pid %d) exited before answering: see %s", p.pid, m.Log)
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return fmt.Errorf("managed containerd (pid %d) did not answer at %s within %s (last: %v): see %s, or run hookbox daemon stop and retry", p.pid, m.Address, m.startTimeout(), last, m.Log)
		}
		c, _, err := dialAndPing(ctx, m.Address, min(remaining, DefaultPingTimeout))
		if err == nil {
			c.Close()
			return nil
		}
		last = err
		if ctx.Err() != nil {
			return fmt.Errorf("managed containerd: waiting for it to answer: %w", ctx.Err())
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Status is the managed daemon's state as Status found it.
type Status struct {
	Running   bool          `json:"running"`   // a process of this layout is alive
	Answering bool          `json:"answering"` // and answers on Address
	PID       int           `json:"pid,omitempty"`
	Address   string        `json:"address"`
	Version   string        `json:"version,omitempty"`
	StartedAt time.Time     `json:"started_at,omitzero"`
	Uptime    time.Duration `json:"uptime_ns,omitempty"`
	Config    string        `json:"config"`
	Log       string        `json:"log"`
	// StalePIDFile: a pid file exists but names no live daemon of this
	// layout (the next Start or Stop removes it).
	StalePIDFile bool `json:"stale_pid_file,omitempty"`
}

// Status reports whether the managed daemon runs and answers. It changes
// nothing. An error means the state could not be read (e.g. permissions),
// not that the daemon is down.
func (m Managed) Status(ctx context.Context) (Status, error) {
	st := Status{Address: m.Address, Config: m.Config, Log: m.Log}
	if err := m.validate(); err != nil {
		return st, err
	}
	p, err := m.find()
	if err != nil {
		return st, err
	}
	if p == nil {
		if _, err := os.Stat(m.PIDFile); err == nil {
			st.StalePIDFile = true
		}
		return st, nil
	}
	defer p.close()
	st.Running, st.PID = true, p.pid
	if t, err := host.StartedAt(p.pid); err == nil {
		st.StartedAt = t
		st.Uptime = time.Since(t).Round(time.Second)
	}
	if c, v, err := dialAndPing(ctx, m.Address, DefaultPingTimeout); err == nil {
		c.Close()
		st.Answering, st.Version = true, v.Version
	}
	return st, nil
}

// Stop ends the managed daemon: SIGTERM, up to grace for it to exit, then
// SIGKILL. Once begun it runs to completion: a cancelled ctx skips the rest
// of the grace period, never the kill. It is retry-safe: no daemon running
// is success. The pid file and sockets are removed. Then, as root, the
// daemon's tasks are ended with it: every shim it started (and the task it
// serves) and every task bundle left in its state directory (EndShims), so
// nothing it ran outlives it. A rootless daemon's tasks live in
// RootlessKit's namespaces, where this process is not: they are left to
// the next start of the daemon, as before.
func (m Managed) Stop(ctx context.Context, grace time.Duration) error {
	if err := m.stopDaemon(ctx, grace); err != nil {
		return err
	}
	if m.Rootless || !host.RealRoot() {
		return nil
	}
	return m.EndShims(context.WithoutCancel(ctx))
}

// EndShims ends the shims of this daemon's tasks (Shim.End) and the tasks
// of the task bundles left in its state directory (a shim group's other
// tasks), and removes those bundles. The daemon must not run:
// it would see its tasks die. It returns every failure, after trying all.
func (m Managed) EndShims(ctx context.Context) error {
	shims, err := Shims()
	if err != nil {
		return fmt.Errorf("managed containerd: finding its shims: %w", err)
	}
	var errs []error
	binary := "containerd-shim-runc-v2"
	for _, s := range shims {
		if SameAddress(s.Address, m.Address) {
			errs = append(errs, s.End(ctx))
			binary = s.Binary
		}
	}
	namespaces, err := os.ReadDir(filepath.Join(m.State, TaskStateDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("managed containerd: task bundles: %w", err))
	}
	for _, ns := range namespaces {
		ids, err := TaskBundles(m.State, ns.Name())
		errs = append(errs, err)
		for _, id := range ids {
			// A task a group's shim served besides the one it was
			// started for: its processes end with the bundle.
			bundle := TaskBundle(m.State, ns.Name(), id)
			if BundleGroup(bundle) != "" {
				errs = append(errs, deleteBundleTask(ctx, binary, ns.Name(), m.Address, id, bundle))
			}
			errs = append(errs, RemoveBundle(bundle))
		}
	}
	return errors.Join(errs...)
}

func (m Managed) stopDaemon(ctx context.Context, grace time.Duration) error {
	if err := m.validate(); err != nil {
		return err
	}
	if _, err := os.Stat(m.RunDir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	// The lock is taken even when ctx is done (Stop runs to completion),
	// but not forever: a Start holds it for StartTimeout at most.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*m.startTimeout())
	defer cancel()
	unlock, err := lockPath(lctx, m.lockFile())
	if err != nil {
		return fmt.Errorf("managed containerd: waiting for the lock %s: %w", m.lockFile(), err)
	}
	defer unlock()
	p, err := m.find()
	if err != nil {
		return err
	}
	if p == nil {
		m.removeRuntimeFiles()
		return nil
	}
	defer p.close()
	if err := p.signal(syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("managed containerd: SIGTERM to pid %d: %w", p.pid, err)
	}
	gone, err := p.exitedOrDone(ctx, grace)
	if err != nil {
		return fmt.Errorf("managed containerd: waiting for pid %d: %w", p.pid, err)
	}
	if !gone {
		if err := p.signal(syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("managed containerd: SIGKILL to pid %d: %w", p.pid, err)
		}
		if gone, err = p.exited(10 * time.Second); err != nil {
			return fmt.Errorf("managed containerd: waiting for pid %d: %w", p.pid, err)
		} else if !gone {
			return fmt.Errorf("managed containerd: pid %d survived SIGKILL for 10s (stuck in the kernel?): check ps -o stat,wchan -p %d", p.pid, p.pid)
		}
	}
	m.removeRuntimeFiles()
	return nil
}

// find returns the live daemon of this layout, or nil. The pid file is
// only a hint: the process must be a containerd whose command line names
// m.Config. With no usable pid file, the process listening on m.Address is
// asked instead (SO_PEERCRED), so a daemon whose pid file was lost is
// still found.
func (m Managed) find() (*process, error) {
	var candidates []int
	if b, err := os.ReadFile(m.PIDFile); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			candidates = append(candidates, pid)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("managed containerd: reading pid file: %w", err)
	}
	if pid, err := socketPeerPID(m.Address); err == nil && pid > 0 {
		candidates = append(candidates, pid)
	}
	for _, pid := range candidates {
		p, err := openProcess(pid)
		if err != nil {
			continue // gone
		}
		if m.isOurs(pid) {
			if gone, _ := p.exited(0); !gone {
				return p, nil
			}
		}
		p.close()
	}
	return nil, nil
}

// isOurs: pid runs containerd with this layout's config.
func (m Managed) isOurs(pid int) bool {
	args, err := host.Cmdline(pid)
	if err != nil || len(args) == 0 {
		return false
	}
	// A rootless daemon's pid file names RootlessKit, whose command line
	// ends with containerd's.
	if base := filepath.Base(args[0]); !strings.Contains(base, "containerd") && base != "rootlesskit" {
		return false
	}
	for i, a := range args {
		if a == "--config="+m.Config || a == "-c="+m.Config ||
			((a == "--config" || a == "-c") && i+1 < len(args) && args[i+1] == m.Config) {
			return true
		}
	}
	return false
}

// removeRuntimeFiles removes the pid file and sockets; missing is fine.
func (m Managed) removeRuntimeFiles() {
	for _, p := range []string{m.PIDFile, m.Address, m.TTRPCAddress} {
		_ = os.Remove(p)
	}
}

// daemonEnv is the daemon's whole environment: PATH only (it finds the
// shim and runc through it). hookbox's own environment may hold resolved
// secrets; a long-lived daemon must not inherit them.
func daemonEnv() []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	return []string{"PATH=" + path}
}

// openLog opens the log for appending (rotating a large one first) and
// returns its size before this start.
func openLog(path string) (*os.File, int64, error) {
	if fi, err := os.Stat(path); err == nil && fi.Size() > logRotateSize {
		_ = os.Rename(path, path+".1")
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

// logTail returns the last lines of the log written after offset, formatted
// to follow an error message ("" when there are none).
func logTail(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const maxRead = 64 << 10
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	if fi.Size()-offset > maxRead {
		offset = fi.Size() - maxRead
	}
	if _, err := f.Seek(max(offset, 0), io.SeekStart); err != nil {
		return ""
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	text := strings.TrimSpace(strings.Join(lines, "\n"))
	if text == "" {
		return ""
	}
	return fmt.Sprintf("\nlast lines of %s:\n%s", path, text)
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
