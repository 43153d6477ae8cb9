package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"hookbox.dev/hookbox/internal/host"
)

// ManagedTracer is the layout of one managed exec tracer, `hookbox tracer
// serve --managed` (docs/architecture.md "Exec tracer"): a root hookbox
// starts it on its first traced run and later runs reuse it, so the BPF
// programs stay loaded between runs. Its directory is named by the
// tracer's key (tracehelper.ManagedKey): a hookbox with other BPF objects
// has another key, and so starts and uses a tracer of its own. Build it
// with TracerPaths.
type ManagedTracer struct {
	Key     string
	Dir     string // <runtime dir>/tracer/<key>, 0700
	Socket  string // the tracer's socket, 0600
	PIDFile string // written by Start
	Log     string // the tracer's stderr, appended
}

// TracersDir holds every managed tracer's directory.
func TracersDir(runtimeDir string) string { return filepath.Join(runtimeDir, "tracer") }

// TracerPaths lays out the managed tracer of key under runtimeDir (e.g.
// /run/hookbox).
func TracerPaths(runtimeDir, key string) ManagedTracer {
	dir := filepath.Join(TracersDir(runtimeDir), key)
	return ManagedTracer{Key: key, Dir: dir, Socket: filepath.Join(dir, "sock"), PIDFile: filepath.Join(dir, "pid"), Log: filepath.Join(dir, "log")}
}

func (m ManagedTracer) lockFile() string { return filepath.Join(m.Dir, "lock") }

// Command is the tracer's command line, exe being a hookbox binary.
func (m ManagedTracer) Command(exe string) []string {
	return []string{exe, "tracer", "serve", "--managed", "--dir", m.Dir}
}

// tracerProbeTimeout bounds one probe of the socket.
const tracerProbeTimeout = time.Second

// Answers: something accepts connections on the socket. (Whether it is
// the tracer of this key, the client's watch request checks.)
func (m ManagedTracer) Answers() bool {
	c, err := net.DialTimeout("unix", m.Socket, tracerProbeTimeout)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Start makes the managed tracer run and answer, starting exe as it
// (Command) when none does: detached in its own session, with env added
// to daemonEnv, stderr appended to Log. Concurrent Starts of one key are
// serialized by a lock file in Dir; the loser finds the winner's tracer
// answering and returns. A tracer that does not answer before ctx ends
// is killed.
func (m ManagedTracer) Start(ctx context.Context, exe string, env []string) error {
	if m.Answers() {
		return nil
	}
	if len(m.Socket) > maxSocketPath {
		return fmt.Errorf("managed tracer: socket path %s is %d bytes, over the kernel's %d: use a shorter runtime directory", m.Socket, len(m.Socket), maxSocketPath)
	}
	if !host.RealRoot() {
		return fmt.Errorf("managed tracer: %w", ErrNeedsRoot)
	}
	if err := os.MkdirAll(filepath.Dir(m.Dir), 0o700); err != nil {
		return fmt.Errorf("managed tracer: %w", err)
	}
	if err := os.Mkdir(m.Dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("managed tracer: %w", err)
	}
	unlock, err := lockPath(ctx, m.lockFile())
	if err != nil {
		return fmt.Errorf("managed tracer: waiting for the lock %s: %w", m.lockFile(), err)
	}
	defer unlock()
	if p := m.find(); p != nil {
		// Alive: it answers, or will once it has started.
		defer p.close()
		return m.waitAnswer(ctx, p)
	}
	_ = os.Remove(m.Socket) // left by a tracer that was killed

	logf, offset, err := openLog(m.Log)
	if err != nil {
		return fmt.Errorf("managed tracer: opening log: %w", err)
	}
	defer logf.Close()
	argv := m.Command(exe)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(daemonEnv(), env...)
	d, err := startDetached(cmd, logf)
	if err != nil {
		return fmt.Errorf("managed tracer: starting %s: %w", exe, err)
	}
	defer d.p.close()
	p := d.p
	fail := func(err error) error {
		return fmt.Errorf("%w (tracer: %s)%s", err, d.kill(), logTail(m.Log, offset))
	}
	if err := host.WriteFileAtomic(m.PIDFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
		return fail(fmt.Errorf("managed tracer: writing pid file: %w", err))
	}
	if err := m.waitAnswer(ctx, p); err != nil {
		return fail(err)
	}
	return nil
}

// waitAnswer waits until the tracer p answers, exits, or ctx ends.
func (m ManagedTracer) waitAnswer(ctx context.Context, p *process) error {
	for {
		if m.Answers() {
			return nil
		}
		if gone, _ := p.exited(0); gone {
			return fmt.Errorf("managed tracer (pid %d) exited before answering: see %s", p.pid, m.Log)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("managed tracer (pid %d) did not answer at %s: %w", p.pid, m.Socket, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// find returns the live tracer of this layout, or nil. The pid file is
// only a hint: the process must be a hookbox whose command line is
// Command with this Dir.
func (m ManagedTracer) find() *process {
	b, err := os.ReadFile(m.PIDFile)
	if err != nil {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return nil
	}
	p, err := openProcess(pid)
	if err != nil {
		return nil
	}
	args, err := host.Cmdline(pid)
	if gone, _ := p.exited(0); err != nil || gone || len(args) == 0 || !slices.Equal(args[1:], m.Command("")[1:]) {
		p.close()
		return nil
	}
	return p
}

// PID is the live tracer's pid, or 0.
func (m ManagedTracer) PID() int {
	p := m.find()
	if p == nil {
		return 0
	}
	defer p.close()
	return p.pid
}

// ManagedTracers lists the managed tracers' layouts under runtimeDir, of
// every key.
func ManagedTracers(runtimeDir string) ([]ManagedTracer, error) {
	entries, err := os.ReadDir(TracersDir(runtimeDir))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("managed tracers: %w", err)
	}
	var out []ManagedTracer
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, TracerPaths(runtimeDir, e.Name()))
		}
	}
	return out, nil
}

// tracerIdleWait is how long StopIfIdle waits for an idle tracer to exit.
const tracerIdleWait = 2 * time.Second

// Stop ends the tracer, if one runs (SIGTERM, up to grace, then
// SIGKILL), and removes its directory. A run tracing through it loses its
// watch: its verdict is unchecked.
func (m ManagedTracer) Stop(ctx context.Context, grace time.Duration) error {
	return m.stop(ctx, syscall.SIGTERM, grace, true)
}

// StopIfIdle ends the tracer only if it serves no connection (it exits on
// SIGUSR1 then) and removes its directory once it is gone. It reports
// whether the tracer is gone; a busy one is left running (it exits by
// itself once idle).
func (m ManagedTracer) StopIfIdle(ctx context.Context) (bool, error) {
	err := m.stop(ctx, syscall.SIGUSR1, tracerIdleWait, false)
	if errors.Is(err, errTracerBusy) {
		return false, nil
	}
	return err == nil, err
}

var errTracerBusy = errors.New("managed tracer busy")

func (m ManagedTracer) stop(ctx context.Context, sig syscall.Signal, grace time.Duration, kill bool) error {
	if _, err := os.Stat(m.Dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultStartTimeout)
	defer cancel()
	unlock, err := lockPath(lctx, m.lockFile())
	if err != nil {
		return fmt.Errorf("managed tracer: waiting for the lock %s: %w", m.lockFile(), err)
	}
	defer unlock()
	if p := m.find(); p != nil {
		defer p.close()
		if err := p.signal(sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("managed tracer: signal to pid %d: %w", p.pid, err)
		}
		gone, err := p.exitedOrDone(ctx, grace)
		if err != nil {
			return fmt.Errorf("managed tracer: waiting for pid %d: %w", p.pid, err)
		}
		if !gone && !kill {
			return errTracerBusy
		}
		if !gone {
			if err := p.signal(syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("managed tracer: SIGKILL to pid %d: %w", p.pid, err)
			}
			if gone, _ := p.exited(10 * time.Second); !gone {
				return fmt.Errorf("managed tracer: pid %d survived SIGKILL for 10s: check ps -o stat,wchan -p %d", p.pid, p.pid)
			}
		}
	}
	if err := os.RemoveAll(m.Dir); err != nil {
		return fmt.Errorf("managed tracer: %w", err)
	}
	return nil
}
