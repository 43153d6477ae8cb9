package tracehelper

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/ebpf"
)

// Defaults of a Server.
const (
	// DefaultMaxWatchesPerUID bounds one uid's concurrent watches.
	DefaultMaxWatchesPerUID = 64
	// requestTimeout bounds the wait for the request after connecting.
	requestTimeout = 10 * time.Second
	// shutdownWriteGrace is how long a client that does not read may hold
	// up shutdown.
	shutdownWriteGrace = time.Second
)

// Server is the helper: it serves watches over unix connections, one
// watch per connection. Its methods are safe for concurrent use.
type Server struct {
	tracer Tracer
	log    *log.Logger
	// maxPerUID bounds one uid's concurrent watches, maxTotal all of them
	// (the tracer's own limit, so that reaching it is CodeTooManyWatches
	// rather than a tracer error). Unit tests lower them.
	maxPerUID      int
	maxTotal       int
	requestTimeout time.Duration
	// inspect checks a received fd (fstatfs + fstat); unit tests replace
	// it to play owners they cannot chown to.
	inspect func(fd int) (cgroupDir, error)

	// Set by NewManagedServer: the key requests must name, peers other
	// than root refused, and the idle time that ends Serve.
	key      string
	rootOnly bool
	idle     time.Duration

	mu     sync.Mutex
	perUID map[uint32]int
	total  int
	// openConns counts the connections being served; idleTimer (with idle)
	// ends Serve through endServe once none has been open for idle.
	openConns int
	idleTimer *time.Timer
	endServe  context.CancelFunc
}

// NewServer returns a server of tracer's watches that logs one line per
// watch start, refusal and end to logw. It never logs event contents.
func NewServer(tracer Tracer, logw io.Writer) *Server {
	s := &Server{
		tracer:         tracer,
		log:            log.New(logw, "", 0),
		maxPerUID:      DefaultMaxWatchesPerUID,
		maxTotal:       ebpf.MaxWatches,
		requestTimeout: requestTimeout,
		inspect:        inspectCgroup,
		perUID:         map[uint32]int{},
	}
	return s
}

// Listen listens on a unix socket at path for Serve. It creates the
// parent directory (0755) if missing and replaces a socket left by a dead
// helper, but not one a live helper answers on, nor a non-socket. The
// socket is 0666: anyone may ask; SO_PEERCRED and the cgroup's owner
// decide what they get.
func Listen(path string) (*net.UnixListener, error) {
	return listen(path, 0o755, 0o666)
}

// ListenPrivate is Listen for a managed tracer: the socket is 0600 in a
// directory made 0700, both root's, so only root may connect.
func ListenPrivate(path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("tracer socket directory: %w", err)
	}
	if err := os.Chmod(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("tracer socket directory: %w", err)
	}
	return listen(path, 0o700, 0o600)
}

func listen(path string, dirMode, mode os.FileMode) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), dirMode); err != nil {
		return nil, fmt.Errorf("tracer helper socket directory: %w", err)
	}
	addr := &net.UnixAddr{Name: path, Net: "unix"}
	l, err := net.ListenUnix("unix", addr)
	if errors.Is(err, unix.EADDRINUSE) {
		if err := removeStaleSocket(path); err != nil {
			return nil, err
		}
		l, err = net.ListenUnix("unix", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, fmt.Errorf("tracer helper socket: %w", err)
	}
	return l, nil
}

func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("listen on %s: it exists and is not a socket; remove it or choose another --socket", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("listen on %s: another tracer helper is serving there", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	return nil
}

// Serve handles connections on l concurrently until ctx is done (or a
// managed server is idle, see StopIfIdle), then closes l (removing its
// socket file), stops every watch (its client gets the final stats with
// an error: the trace ended early) and returns nil once every connection
// is closed. It returns an error only if l fails for good. It does not
// close the tracer.
func (s *Server) Serve(ctx context.Context, l *net.UnixListener) error {
	ctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	s.endServe = cancel
	if s.idle > 0 {
		s.idleTimer = time.AfterFunc(s.idle, func() {
			if s.StopIfIdle() {
				s.log.Printf("idle for %s: exiting", s.idle)
			}
		})
	}
	s.mu.Unlock()
	var conns sync.WaitGroup
	defer func() {
		cancel()
		l.Close()
		conns.Wait()
	}()
	context.AfterFunc(ctx, func() { l.Close() })
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of fds and the like: back off rather than spin.
			s.log.Printf("accept: %v", err)
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
			continue
		}
		s.opened()
		conns.Go(func() {
			defer s.closed()
			s.handle(ctx, c)
		})
	}
}

// StopIfIdle ends Serve if no connection is open, and says whether it
// did. A connection still in the listen backlog is then refused: its
// client sees the helper gone, as after any shutdown.
func (s *Server) StopIfIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.openConns > 0 || s.endServe == nil {
		return false
	}
	s.endServe()
	return true
}

func (s *Server) opened() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.openConns++; s.idleTimer != nil {
		s.idleTimer.Stop()
	}
}

func (s *Server) closed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.openConns--; s.openConns == 0 && s.idleTimer != nil {
		s.idleTimer.Reset(s.idle)
	}
}

// errHungUp: the client closed the connection without sending a byte.
var errHungUp = errors.New("hung up before a request")

// handle serves one connection: request, then the stream.
func (s *Server) handle(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	peer, err := peerCred(c)
	if err != nil {
		s.log.Printf("watch refused: peer credentials: %v", err)
		return
	}
	rr := newRightsReader(c)
	br := bufio.NewReader(rr)
	w, cgroupID, err := s.open(ctx, c, peer, rr, br)
	if errors.Is(err, errHungUp) {
		return // a liveness probe (hookbox doctor): nothing to log
	}
	if err != nil {
		var ref *RefusedError
		if !errors.As(err, &ref) {
			ref = refusal(CodeWatchFailed, "%v", err)
		}
		s.log.Printf("watch refused uid=%d pid=%d cgroup=%d code=%s: %s", peer.Uid, peer.Pid, cgroupID, ref.Code, ref.Message)
		_ = writeReply(c, reply{V: Version, Type: typeError, Code: ref.Code, Message: ref.Message})
		return
	}
	// Released as soon as the watch is stopped, before the client hears
	// the stats and perhaps asks for the next one.
	release := sync.OnceFunc(func() { s.release(peer.Uid) })
	defer release()
	// A client gone already is noticed by stream, which stops the watch.
	_ = writeReply(c, reply{V: Version, Type: typeOK, CgroupID: cgroupID, Key: s.key})
	s.log.Printf("watch start uid=%d pid=%d cgroup=%d", peer.Uid, peer.Pid, cgroupID)
	end := s.stream(ctx, c, br, w, release)
	line := fmt.Sprintf("watch end uid=%d pid=%d cgroup=%d end=%s events=%d lost=%d", peer.Uid, peer.Pid, cgroupID, end.why, end.events, end.stats.Lost)
	if inc := end.stats.Incomplete(); len(inc) > 0 {
		line += " incomplete=" + strings.Join(inc, ",")
	}
	if end.err != nil {
		line += ": " + end.err.Error()
	}
	s.log.Print(line)
}

// open reads the request, checks it and arms the watch. Its errors are
// *RefusedError; the cgroup id is returned once known, for the log.
func (s *Server) open(ctx context.Context, c *net.UnixConn, peer *unix.Ucred, rr *rightsReader, br *bufio.Reader) (TracerWatch, uint64, error) {
	if s.rootOnly && peer.Uid != 0 {
		return nil, 0, refusal(CodeForbidden, "this managed tracer serves root's hookbox only (uid %d): a rootless hookbox uses `hookbox tracer serve`", peer.Uid)
	}
	c.SetReadDeadline(time.Now().Add(s.requestTimeout))
	unwake := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Now()) })
	line, err := readLine(br, MaxRequestSize)
	unwake()
	c.SetReadDeadline(time.Time{})
	received, truncated := rr.take()
	defer closeFDs(received)

	switch {
	case ctx.Err() != nil:
		return nil, 0, refusal(CodeTracerUnavailable, "the tracer helper is shutting down; retry once it is back")
	case errors.Is(err, errLineTooLong):
		return nil, 0, refusal(CodeBadRequest, "request longer than %d bytes (at most %d allowed files per watch)", MaxRequestSize, MaxAllowed)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, 0, refusal(CodeBadRequest, "no request within %s of connecting", s.requestTimeout)
	case errors.Is(err, io.EOF) && len(received) == 0:
		return nil, 0, errHungUp
	case err != nil:
		return nil, 0, refusal(CodeBadRequest, "reading the request: %v", err)
	}
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		return nil, 0, refusal(CodeBadRequest, "the request is not JSON: %v", err)
	}
	if req.V != Version {
		return nil, 0, refusal(CodeBadVersion, "the client speaks protocol version %d, this helper %d: run the same hookbox version on both sides", req.V, Version)
	}
	if s.key != "" && req.Key != s.key {
		return nil, 0, refusal(CodeBadKey, "this managed tracer has key %s, the client asked for %q: a hookbox with other BPF objects starts its own", s.key, req.Key)
	}
	if req.Op != opWatch {
		return nil, 0, refusal(CodeBadRequest, "the first message must be op %q, not %q", opWatch, req.Op)
	}
	if truncated || len(received) != 1 {
		n := fmt.Sprint(len(received))
		if truncated {
			n = "more than " + n
		}
		return nil, 0, refusal(CodeBadRequest, "the request must carry exactly one fd, the open cgroup2 directory (SCM_RIGHTS); it carried %s", n)
	}
	var policy ebpf.Policy
	if req.Policy != nil {
		policy = *req.Policy
	}
	if len(policy.Allowed) > MaxAllowed {
		return nil, 0, refusal(CodeBadRequest, "%d allowed files, at most %d per watch", len(policy.Allowed), MaxAllowed)
	}
	dir, err := s.inspect(received[0])
	if err != nil {
		return nil, 0, err
	}
	if dir.Owner != peer.Uid {
		return nil, dir.ID, refusal(CodeNotOwner, "the cgroup directory is owned by uid %d, not by your uid %d: watch a cgroup delegated to your uid", dir.Owner, peer.Uid)
	}
	if err := s.reserve(peer.Uid); err != nil {
		return nil, dir.ID, err
	}
	w, err := s.tracer.Watch(dir.ID, policy)
	if err != nil {
		s.release(peer.Uid)
		return nil, dir.ID, watchRefusal(dir.ID, err)
	}
	return w, dir.ID, nil
}

// reserve counts a watch of uid against the limits.
func (s *Server) reserve(uid uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perUID[uid] >= s.maxPerUID {
		return refusal(CodeTooManyWatches, "uid %d has %d watches, at most %d per uid: stop the watches of finished runs", uid, s.perUID[uid], s.maxPerUID)
	}
	if s.total >= s.maxTotal {
		return refusal(CodeTooManyWatches, "the helper has %d watches, at most %d: retry when other runs have finished", s.total, s.maxTotal)
	}
	s.perUID[uid]++
	s.total++
	return nil
}

func (s *Server) release(uid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perUID[uid]--; s.perUID[uid] == 0 {
		delete(s.perUID, uid)
	}
	s.total--
}

// watchRefusal translates the tracer's Watch error, once, for the client.
func watchRefusal(cgroupID uint64, err error) *RefusedError {
	switch {
	case errors.Is(err, ErrTracerUnavailable), errors.Is(err, ebpf.ErrNotSupported), errors.Is(err, ebpf.ErrClosed):
		return refusal(CodeTracerUnavailable, "the helper has no exec tracer: %v (fix the host, see hookbox doctor, and restart the helper)", err)
	case errors.Is(err, ebpf.ErrWatched):
		return refusal(CodeBusy, "cgroup %d is already watched: one watch per cgroup; stop the other one first", cgroupID)
	case errors.Is(err, ebpf.ErrInvalid):
		return refusal(CodeBadRequest, "%v", err)
	}
	return refusal(CodeWatchFailed, "arming the watch of cgroup %d: %v", cgroupID, err)
}

// streamEnd is how a watch's stream ended, for the log.
type streamEnd struct {
	why    string // stop, disconnect, shutdown or tracer-closed
	events uint64 // events the tracer delivered (forwarded unless the client left)
	stats  ebpf.Stats
	err    error // the stop error, or why the client did not get everything
}

// Errors sent with the final stats when the watch ended without a stop.
var (
	errShutdown     = errors.New("the tracer helper shut down before the run ended: execs after this are not recorded")
	errTracerClosed = errors.New("the exec tracer closed before the run ended")
)

// stream forwards w's events to the client until it asks to stop, goes
// away, or ctx ends; then it stops w, forwards the last events and sends
// the stats if the client is still there. It always stops w, and calls
// stopped once it has.
func (s *Server) stream(ctx context.Context, c *net.UnixConn, br *bufio.Reader, w TracerWatch, stopped func()) streamEnd {
	// A client that does not read must not hold up shutdown.
	unbound := context.AfterFunc(ctx, func() { c.SetWriteDeadline(time.Now().Add(shutdownWriteGrace)) })
	defer unbound()

	stopAsked := make(chan bool, 1) // false: the client went away or spoke out of turn
	go func() {
		line, err := readLine(br, maxControlSize)
		var req request
		stopAsked <- err == nil && json.Unmarshal(line, &req) == nil && req.Op == opStop
	}()

	var (
		end       streamEnd
		isStopped bool
		sendErr   error // the client cannot be written to: discard the rest
		out       = bufio.NewWriter(c)
		enc       = json.NewEncoder(out)
		line      []byte
		events    = w.Events()
		done      = ctx.Done()
	)
	stop := func(why string, reason error) {
		if !isStopped {
			isStopped, end.why = true, why
			end.stats, end.err = w.Stop()
			end.err = errors.Join(reason, end.err)
			stopped()
		}
	}
	for events != nil {
		select {
		case ev, ok := <-events:
			if !ok {
				events = nil
				break
			}
			end.events++
			if sendErr != nil {
				break
			}
			line = appendEventLine(line[:0], ev)
			if _, sendErr = out.Write(line); sendErr == nil && len(events) == 0 {
				sendErr = out.Flush()
			}
			if sendErr != nil {
				stop("disconnect", nil)
			}
		case ok := <-stopAsked:
			stopAsked = nil
			if !ok {
				sendErr = errors.New("the client went away without stop")
				stop("disconnect", nil)
				break
			}
			stop("stop", nil)
		case <-done:
			done = nil
			stop("shutdown", errShutdown)
		}
	}
	stop("tracer-closed", errTracerClosed)
	if sendErr != nil {
		end.err = errors.Join(end.err, sendErr)
		return end
	}
	final := reply{Type: typeStats, Stats: &end.stats}
	if end.err != nil {
		final.Error = end.err.Error()
	}
	err := enc.Encode(final)
	if err == nil {
		err = out.Flush()
	}
	if err != nil {
		end.err = errors.Join(end.err, fmt.Errorf("sending the stats: %w", err))
	}
	return end
}

func writeReply(c *net.UnixConn, r reply) error {
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = c.Write(append(line, '\n'))
	return err
}

// peerCred is the connecting process's credentials, in the helper's
// namespaces.
func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, credErr
}

// cgroupDir is what the helper learns of a received fd.
type cgroupDir struct {
	ID    uint64 // inode number: the cgroup id
	Owner uint32 // owner uid
}

// inspectCgroup checks that fd is a directory on cgroup2 and reads its id
// and owner. Its errors are *RefusedError.
func inspectCgroup(fd int) (cgroupDir, error) {
	const fix = "pass an open cgroup2 directory (under the cgroup2 mount, e.g. /sys/fs/cgroup/…)"
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return cgroupDir{}, refusal(CodeNotCgroup2, "fstatfs of the passed fd: %v", err)
	}
	if sfs.Type != unix.CGROUP2_SUPER_MAGIC {
		return cgroupDir{}, refusal(CodeNotCgroup2, "the passed fd is not on cgroup2 (filesystem magic %#x): %s", sfs.Type, fix)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return cgroupDir{}, refusal(CodeNotCgroup2, "fstat of the passed fd: %v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return cgroupDir{}, refusal(CodeNotCgroup2, "the passed fd is a cgroup2 file, not a directory: %s", fix)
	}
	return cgroupDir{ID: st.Ino, Owner: st.Uid}, nil
}
