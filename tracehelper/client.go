package tracehelper

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/ebpf"
)

// ErrBroken: the connection to the helper ended before the final stats.
// The trace may lack events: count it as incomplete.
var ErrBroken = errors.New("tracer helper connection broken")

// Client timeouts: a wedged helper must not hang a run.
const (
	replyTimeout = 30 * time.Second // for the reply to the watch request
	statsTimeout = 30 * time.Second // from stop to the final stats
)

// Client is one connection to the helper; it serves one Watch. It is not
// safe for concurrent use (its Watch is).
type Client struct {
	conn *net.UnixConn
	used bool
	key  string // a managed tracer's key, which its ok reply must name
}

// Dial connects to the helper listening at path (see SocketPath). A root
// hookbox uses the connection itself; a rootless one turns it into a file
// (File) that its re-executed self inherits.
func Dial(path string) (*Client, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("tracer helper at %s: %w (is hookbox-tracer.service running? %s overrides the path)", path, err, SocketEnv)
	}
	return &Client{conn: c}, nil
}

// DialManaged connects to the managed tracer of key at path: its peer
// must be root (SO_PEERCRED), and its ok reply must name key, so a tracer
// of other BPF objects is never used.
func DialManaged(path, key string) (*Client, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("managed tracer at %s: %w", path, err)
	}
	peer, err := peerCred(c)
	if err == nil && peer.Uid != 0 {
		err = fmt.Errorf("its peer is uid %d, not root", peer.Uid)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("managed tracer at %s: %w", path, err)
	}
	return &Client{conn: c, key: key}, nil
}

// FromFile makes a Client of a connection inherited as a file (the
// rootless hookbox dials outside its user namespace and hands the
// connection to its child, see File). f stays the caller's to close. The
// helper knows the connection by who dialled it, not by who uses it.
func FromFile(f *os.File) (*Client, error) {
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("tracer helper connection %s: %w", f.Name(), err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("tracer helper connection %s: not a unix socket", f.Name())
	}
	return &Client{conn: uc}, nil
}

// File returns a duplicate of the connection as a file, to pass to a
// child process (exec.Cmd.ExtraFiles) that calls FromFile.
func (c *Client) File() (*os.File, error) { return c.conn.File() }

// Close closes the connection; a Watch on it breaks (the helper stops it).
func (c *Client) Close() error { return c.conn.Close() }

// Watch asks the helper to watch the cgroup2 directory cgroupDir (a path
// in the caller's mount namespace, owned by the caller's uid as the
// helper sees it) with policy. It returns once the watch is armed: execs
// in the cgroup from then on are recorded. A refusal is a *RefusedError.
// A Client serves one Watch call: after an error its connection is
// closed.
func (c *Client) Watch(cgroupDir string, policy ebpf.Policy) (*Watch, error) {
	if c.used {
		return nil, errors.New("tracer helper: one watch per connection; dial again")
	}
	c.used = true
	w, err := c.watch(cgroupDir, policy)
	if err != nil {
		c.conn.Close()
		return nil, err
	}
	return w, nil
}

func (c *Client) watch(cgroupDir string, policy ebpf.Policy) (*Watch, error) {
	if len(policy.Allowed) > MaxAllowed {
		return nil, fmt.Errorf("tracer helper: %d allowed files, at most %d per watch", len(policy.Allowed), MaxAllowed)
	}
	fd, err := unix.Open(cgroupDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open cgroup %s: %w", cgroupDir, err)
	}
	defer unix.Close(fd)
	line, err := json.Marshal(request{V: Version, Op: opWatch, Key: c.key, Policy: &policy})
	if err != nil {
		return nil, err
	}
	line = append(line, '\n')
	if err := sendWithFDs(c.conn, line, fd); err != nil {
		return nil, fmt.Errorf("tracer helper: sending the watch request: %w", err)
	}

	br := bufio.NewReader(c.conn)
	c.conn.SetReadDeadline(time.Now().Add(replyTimeout))
	var rep reply
	err = readReply(br, &rep)
	c.conn.SetReadDeadline(time.Time{})
	switch {
	case err != nil:
		return nil, fmt.Errorf("tracer helper: reply to the watch request: %w", err)
	case rep.Type == typeError:
		return nil, &RefusedError{Code: rep.Code, Message: rep.Message}
	case rep.Type != typeOK || rep.V != Version || rep.CgroupID == 0:
		return nil, fmt.Errorf("tracer helper: unexpected reply %q (protocol version %d, want %d)", rep.Type, rep.V, Version)
	case rep.Key != c.key:
		return nil, fmt.Errorf("tracer helper: it has key %q, not %q: not the expected managed tracer", rep.Key, c.key)
	}
	w := &Watch{conn: c.conn, cgroupID: rep.CgroupID, events: make(chan ebpf.Event), done: make(chan struct{})}
	go w.receive(br)
	return w, nil
}

func readReply(br *bufio.Reader, rep *reply) error {
	line, err := readLine(br, maxReplySize)
	if err != nil {
		return err
	}
	return parseReply(line, rep)
}

// Watch is a cgroup the helper watches for this client.
type Watch struct {
	conn     *net.UnixConn
	cgroupID uint64
	events   chan ebpf.Event
	done     chan struct{} // closed when stats and err are final
	stats    ebpf.Stats
	err      error
	stopOnce sync.Once
}

// CgroupID is the watched cgroup's id, as the helper read it.
func (w *Watch) CgroupID() uint64 { return w.cgroupID }

// Events delivers the cgroup's events in the tracer's order. It is closed
// once the final stats have arrived or the connection broke, after every
// received event. Events are buffered without bound (so the helper never
// waits on this client); read the channel until it closes.
func (w *Watch) Events() <-chan ebpf.Event { return w.events }

// Stop asks the helper to stop the watch (call it once the cgroup's
// processes are gone) and returns the final stats, as ebpf's Watch.Stop.
// The error is the helper's stop error, a helper shutdown, or ErrBroken
// when the connection ended without stats: then the trace is incomplete.
// Stop is idempotent and closes the connection.
func (w *Watch) Stop() (ebpf.Stats, error) {
	w.stopOnce.Do(func() {
		// A write error means the stream has ended: receive says why.
		_, _ = w.conn.Write([]byte(`{"op":"` + opStop + `"}` + "\n"))
		w.conn.SetReadDeadline(time.Now().Add(statsTimeout))
		<-w.done
		w.conn.Close()
	})
	return w.stats, w.err
}

// receive reads the stream until the stats or a failure.
func (w *Watch) receive(br *bufio.Reader) {
	in := make(chan ebpf.Event)
	go w.deliver(in)
	defer close(w.done)
	defer close(in)
	for {
		var rep reply
		if err := readReply(br, &rep); err != nil {
			w.err = fmt.Errorf("%w: %w", ErrBroken, err)
			return
		}
		switch {
		case rep.Type == typeEvent && rep.Event != nil:
			in <- *rep.Event
		case rep.Type == typeStats && rep.Stats != nil:
			w.stats = *rep.Stats
			if rep.Error != "" {
				w.err = fmt.Errorf("tracer helper: %s", rep.Error)
			}
			return
		default:
			w.err = fmt.Errorf("%w: unexpected message %q", ErrBroken, rep.Type)
			return
		}
	}
}

// deliver passes events from in to Events through an unbounded queue.
func (w *Watch) deliver(in <-chan ebpf.Event) {
	defer close(w.events)
	var queue []ebpf.Event
	for in != nil || len(queue) > 0 {
		var out chan<- ebpf.Event
		var next ebpf.Event
		if len(queue) > 0 {
			out, next = w.events, queue[0]
		}
		select {
		case ev, ok := <-in:
			if !ok {
				in = nil
				break
			}
			queue = append(queue, ev)
		case out <- next:
			queue[0] = ebpf.Event{}
			queue = queue[1:]
		}
	}
}
