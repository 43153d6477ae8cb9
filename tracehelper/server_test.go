package tracehelper

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/testenv"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/ebpf"
)

// fakeTracer arms fakeWatches; a cgroup can be watched once at a time.
type fakeTracer struct {
	mu      sync.Mutex
	err     error
	watches map[uint64]*fakeWatch
	armed   chan *fakeWatch
}

func newFakeTracer() *fakeTracer {
	return &fakeTracer{watches: map[uint64]*fakeWatch{}, armed: make(chan *fakeWatch, 100)}
}

func (f *fakeTracer) Watch(id uint64, p ebpf.Policy) (TracerWatch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	if w := f.watches[id]; w != nil && !w.isStopped() {
		return nil, fmt.Errorf("%w: cgroup id %d", ebpf.ErrWatched, id)
	}
	w := &fakeWatch{id: id, policy: p, events: make(chan ebpf.Event, 1024), stopped: make(chan struct{})}
	f.watches[id] = w
	f.armed <- w
	return w, nil
}

// fakeLost is what every fake watch reports lost, to see stats travel.
const fakeLost = 2

type fakeWatch struct {
	id      uint64
	policy  ebpf.Policy
	events  chan ebpf.Event
	stopped chan struct{}
	// mu orders emit and Stop for the race detector, which does not see
	// the order the socket between them imposes.
	mu   sync.Mutex
	sent uint64
}

// emit queues an event of this cgroup; call it before Stop.
func (w *fakeWatch) emit(ev ebpf.Event) {
	ev.CgroupID = w.id
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sent++
	w.events <- ev
}

func (w *fakeWatch) Events() <-chan ebpf.Event { return w.events }

func (w *fakeWatch) Stop() (ebpf.Stats, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.isStopped() {
		close(w.stopped)
		close(w.events)
	}
	return ebpf.Stats{Counters: ebpf.Counters{Matched: w.sent + fakeLost, Lost: fakeLost}, Delivered: w.sent}, nil
}

func (w *fakeWatch) isStopped() bool {
	select {
	case <-w.stopped:
		return true
	default:
		return false
	}
}

type harness struct {
	sock   string
	srv    *Server
	log    *testenv.SyncBuffer
	cancel context.CancelFunc
	served chan error
}

// shortTempDir is a temporary directory with a path short enough for a
// socket (108 bytes), which t.TempDir's need not be.
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "thb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// fakeOwner replaces the cgroup check: any directory is a cgroup, its id
// its inode, its owner owner.
func fakeOwner(owner uint32) func(int) (cgroupDir, error) {
	return func(fd int) (cgroupDir, error) {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return cgroupDir{}, err
		}
		return cgroupDir{ID: st.Ino, Owner: owner}, nil
	}
}

// startServer serves tr on a socket in a temporary directory; setup may
// adjust the server before it serves.
func startServer(t *testing.T, tr Tracer, setup func(*Server)) *harness {
	t.Helper()
	h := &harness{sock: filepath.Join(shortTempDir(t), "s.sock"), log: &testenv.SyncBuffer{}, served: make(chan error, 1)}
	h.srv = NewServer(tr, h.log)
	h.srv.inspect = fakeOwner(uint32(os.Getuid()))
	if setup != nil {
		setup(h.srv)
	}
	l, err := Listen(h.sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.served <- h.srv.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := recv(t, h.served, "Serve to return"); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return h
}

func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// connect dials the helper at sock the way a hookbox does before it hands
// the connection on (see FromFile).
func dial(t *testing.T, sock string) *Client {
	t.Helper()
	c, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func watch(t *testing.T, sock, dir string, p ebpf.Policy) *Watch {
	t.Helper()
	w, err := dial(t, sock).Watch(dir, p)
	if err != nil {
		t.Fatalf("Watch(%s): %v", dir, err)
	}
	return w
}

// collect reads a watch's events until Events closes.
func collect(w *Watch) <-chan []ebpf.Event {
	out := make(chan []ebpf.Event, 1)
	go func() {
		var evs []ebpf.Event
		for ev := range w.Events() {
			evs = append(evs, ev)
		}
		out <- evs
	}()
	return out
}

func refusedCode(t *testing.T, err error) Code {
	t.Helper()
	var ref *RefusedError
	if !errors.As(err, &ref) {
		t.Fatalf("got %v, want a *RefusedError", err)
	}
	if ref.Message == "" {
		t.Errorf("refusal %s without a message", ref.Code)
	}
	return ref.Code
}

func sampleEvent(i int) ebpf.Event {
	return ebpf.Event{
		Kind: ebpf.KindExec, TGID: uint32(100 + i), TID: uint32(100 + i), PPID: 1, UID: 1000,
		Time: uint64(i), Comm: "true", Filename: "/bin/true",
		Argv:    [][]byte{[]byte("/bin/true"), []byte("secret-argv-marker"), {0xff, 0x00}},
		ArgvLen: 32, Dev: 2049, Ino: uint64(i),
	}
}

func TestRoundTrip(t *testing.T) {
	tr := newFakeTracer()
	h := startServer(t, tr, nil)
	policy := ebpf.Policy{Enforce: true, Allowed: []ebpf.FileID{{Dev: 2049, Ino: 7}, {Dev: 64768, Ino: math.MaxUint64}}}
	w := watch(t, h.sock, t.TempDir(), policy)
	fw := recv(t, tr.armed, "the watch to be armed")
	if w.CgroupID() != fw.id {
		t.Errorf("CgroupID = %d, the helper armed %d", w.CgroupID(), fw.id)
	}
	if !reflect.DeepEqual(fw.policy, policy) {
		t.Errorf("policy arrived as %+v, sent %+v", fw.policy, policy)
	}
	got := collect(w)
	var want []ebpf.Event
	for i := range 3 {
		ev := sampleEvent(i)
		fw.emit(ev)
		ev.CgroupID = fw.id
		want = append(want, ev)
	}
	stats, err := w.Stop()
	if err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if stats.Delivered != 3 || stats.Lost != fakeLost || stats.Matched != 3+fakeLost {
		t.Errorf("stats = %+v, want 3 delivered, %d lost", stats, fakeLost)
	}
	if evs := recv(t, got, "Events to close"); !reflect.DeepEqual(evs, want) {
		t.Errorf("events:\n got %+v\nwant %+v", evs, want)
	}
	if !fw.isStopped() {
		t.Error("the tracer's watch was not stopped")
	}
	if again, err := w.Stop(); err != nil || again != stats {
		t.Errorf("second Stop = %+v, %v; want the same stats", again, err)
	}
	logText := waitLog(t, h.log, "watch end")
	for _, want := range []string{
		fmt.Sprintf("watch start uid=%d pid=%d cgroup=%d", os.Getuid(), os.Getpid(), fw.id),
		fmt.Sprintf("cgroup=%d end=stop events=3 lost=%d incomplete=lost", fw.id, fakeLost),
	} {
		if !strings.Contains(logText, want) {
			t.Errorf("log lacks %q:\n%s", want, logText)
		}
	}
	if strings.Contains(logText, "secret-argv-marker") {
		t.Errorf("the log shows argv:\n%s", logText)
	}
}

// waitLog waits for the log to contain s (the server logs after replying).
func waitLog(t *testing.T, log *testenv.SyncBuffer, s string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(log.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("log lacks %q:\n%s", s, log)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return log.String()
}

// rawRequest sends line with fds on a new connection and returns the
// helper's first reply.
func rawRequest(t *testing.T, sock string, line string, fds ...int) reply {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := sendWithFDs(c, []byte(line), fds...); err != nil {
		t.Fatal(err)
	}
	var rep reply
	if err := readReply(bufio.NewReader(c), &rep); err != nil {
		t.Fatalf("reading the reply: %v", err)
	}
	return rep
}

func openFD(t *testing.T, path string, flags int) int {
	t.Helper()
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func TestRefusals(t *testing.T) {
	const watchLine = `{"v":2,"op":"watch","policy":{"Enforce":false}}` + "\n"
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dirFD := openFD(t, dir, unix.O_RDONLY|unix.O_DIRECTORY)
	var many []int
	for range maxFDs + 1 {
		many = append(many, dirFD)
	}
	realCheck := func(s *Server) { s.inspect = inspectCgroup }

	raw := []struct {
		name  string
		setup func(*Server)
		line  string
		fds   []int
		want  Code
	}{
		{"no fd", nil, watchLine, nil, CodeBadRequest},
		{"two fds", nil, watchLine, []int{dirFD, dirFD}, CodeBadRequest},
		{"fds beyond the kernel's room", nil, watchLine, many, CodeBadRequest},
		{"not JSON", nil, "watch please\n", []int{dirFD}, CodeBadRequest},
		{"stop first", nil, `{"v":2,"op":"stop"}` + "\n", []int{dirFD}, CodeBadRequest},
		{"other version", nil, `{"v":99,"op":"watch"}` + "\n", []int{dirFD}, CodeBadVersion},
		{"no version", nil, `{"op":"watch"}` + "\n", []int{dirFD}, CodeBadVersion},
		{"regular file", realCheck, watchLine, []int{openFD(t, file, unix.O_RDONLY)}, CodeNotCgroup2},
		{"directory not on cgroup2", realCheck, watchLine, []int{dirFD}, CodeNotCgroup2},
		{"another uid's cgroup", func(s *Server) { s.inspect = fakeOwner(uint32(os.Getuid()) + 1) }, watchLine, []int{dirFD}, CodeNotOwner},
	}
	for _, tc := range raw {
		t.Run(tc.name, func(t *testing.T) {
			h := startServer(t, newFakeTracer(), tc.setup)
			rep := rawRequest(t, h.sock, tc.line, tc.fds...)
			if rep.Type != typeError || rep.Code != tc.want || rep.V != Version {
				t.Errorf("reply %+v, want an error %s", rep, tc.want)
			}
			waitLog(t, h.log, "watch refused uid=")
		})
	}

	t.Run("not-owner through the client", func(t *testing.T) {
		h := startServer(t, newFakeTracer(), func(s *Server) { s.inspect = fakeOwner(uint32(os.Getuid()) + 1) })
		_, err := dial(t, h.sock).Watch(dir, ebpf.Policy{})
		if code := refusedCode(t, err); code != CodeNotOwner {
			t.Errorf("code %s, want %s", code, CodeNotOwner)
		}
	})
	t.Run("not-cgroup2 through the client", func(t *testing.T) {
		h := startServer(t, newFakeTracer(), realCheck)
		_, err := dial(t, h.sock).Watch(dir, ebpf.Policy{})
		if code := refusedCode(t, err); code != CodeNotCgroup2 {
			t.Errorf("code %s, want %s", code, CodeNotCgroup2)
		}
	})
	t.Run("busy", func(t *testing.T) {
		h := startServer(t, newFakeTracer(), nil)
		watch(t, h.sock, dir, ebpf.Policy{})
		_, err := dial(t, h.sock).Watch(dir, ebpf.Policy{})
		if code := refusedCode(t, err); code != CodeBusy {
			t.Errorf("code %s, want %s", code, CodeBusy)
		}
	})
	t.Run("tracer unavailable", func(t *testing.T) {
		loads := 0
		bt := &BPFTracer{load: func() (*ebpf.Tracer, error) {
			loads++
			return nil, fmt.Errorf("%w: no kernel BTF", ebpf.ErrNotSupported)
		}}
		h := startServer(t, bt, nil)
		for range 2 {
			_, err := dial(t, h.sock).Watch(dir, ebpf.Policy{})
			if code := refusedCode(t, err); code != CodeTracerUnavailable {
				t.Errorf("code %s, want %s", code, CodeTracerUnavailable)
			}
			if !strings.Contains(err.Error(), "no kernel BTF") {
				t.Errorf("the refusal does not say why: %v", err)
			}
		}
		if loads != 1 {
			t.Errorf("%d loads, want 1", loads)
		}
	})
	t.Run("too many allowed files, refused by the client", func(t *testing.T) {
		tr := newFakeTracer()
		h := startServer(t, tr, nil)
		_, err := dial(t, h.sock).Watch(dir, ebpf.Policy{Enforce: true, Allowed: make([]ebpf.FileID, MaxAllowed+1)})
		if err == nil || len(tr.armed) > 0 {
			t.Errorf("Watch = %v, armed %d; want an error and nothing armed", err, len(tr.armed))
		}
	})
}

func TestOversizedRequest(t *testing.T) {
	tr := newFakeTracer()
	h := startServer(t, tr, nil)
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: h.sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fd := openFD(t, t.TempDir(), unix.O_RDONLY|unix.O_DIRECTORY)
	line := `{"v":2,"op":"watch","policy":{"Allowed":[` + strings.Repeat(`{"Dev":1,"Ino":1},`, MaxRequestSize/18) + `{}]}}` + "\n"
	// The helper stops reading at the bound: the rest may not be taken.
	go sendWithFDs(c, []byte(line), fd)
	var rep reply
	if err := readReply(bufio.NewReader(c), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Type != typeError || rep.Code != CodeBadRequest || !strings.Contains(rep.Message, "longer than") {
		t.Errorf("reply %+v, want bad-request: too long", rep)
	}
	if len(tr.armed) > 0 {
		t.Error("an oversized request armed a watch")
	}
}

// TestRequestBounds: a request with MaxAllowed files of the longest
// encoding fits in MaxRequestSize.
func TestRequestBounds(t *testing.T) {
	allowed := make([]ebpf.FileID, MaxAllowed)
	for i := range allowed {
		allowed[i] = ebpf.FileID{Dev: math.MaxUint64, Ino: math.MaxUint64}
	}
	line, err := json.Marshal(request{V: Version, Op: opWatch, Policy: &ebpf.Policy{Enforce: true, Allowed: allowed}})
	if err != nil {
		t.Fatal(err)
	}
	if len(line)+1 > MaxRequestSize {
		t.Errorf("the largest request is %d bytes, over MaxRequestSize %d", len(line)+1, MaxRequestSize)
	}
}

func TestRequestTimeout(t *testing.T) {
	h := startServer(t, newFakeTracer(), func(s *Server) { s.requestTimeout = 50 * time.Millisecond })
	c, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var rep reply
	if err := readReply(bufio.NewReader(c), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Code != CodeBadRequest || !strings.Contains(rep.Message, "no request within") {
		t.Errorf("reply %+v, want bad-request: no request", rep)
	}
}

func TestDisconnectStopsWatch(t *testing.T) {
	tr := newFakeTracer()
	h := startServer(t, tr, nil)
	c := dial(t, h.sock)
	w, err := c.Watch(t.TempDir(), ebpf.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	fw := recv(t, tr.armed, "the watch to be armed")
	fw.emit(sampleEvent(1))
	c.Close()
	recv(t, fw.stopped, "the helper to stop the watch")
	waitLog(t, h.log, fmt.Sprintf("cgroup=%d end=disconnect", fw.id))
	if _, err := w.Stop(); !errors.Is(err, ErrBroken) {
		t.Errorf("Stop after the connection closed = %v, want ErrBroken", err)
	}
}

func TestWatchLimits(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}

	t.Run("per uid", func(t *testing.T) {
		h := startServer(t, newFakeTracer(), func(s *Server) { s.maxPerUID = 2 })
		w0 := watch(t, h.sock, dirs[0], ebpf.Policy{})
		watch(t, h.sock, dirs[1], ebpf.Policy{})
		_, err := dial(t, h.sock).Watch(dirs[2], ebpf.Policy{})
		if code := refusedCode(t, err); code != CodeTooManyWatches {
			t.Fatalf("third watch: code %s, want %s", code, CodeTooManyWatches)
		}
		if _, err := w0.Stop(); err != nil {
			t.Fatal(err)
		}
		// A stopped watch frees its place before Stop returns.
		watch(t, h.sock, dirs[2], ebpf.Policy{})
	})
	t.Run("helper-wide", func(t *testing.T) {
		h := startServer(t, newFakeTracer(), func(s *Server) { s.maxTotal = 1 })
		watch(t, h.sock, dirs[0], ebpf.Policy{})
		_, err := dial(t, h.sock).Watch(dirs[1], ebpf.Policy{})
		if code := refusedCode(t, err); code != CodeTooManyWatches {
			t.Fatalf("second watch: code %s, want %s", code, CodeTooManyWatches)
		}
	})
}

func TestEventsStayOnTheirConnection(t *testing.T) {
	tr := newFakeTracer()
	h := startServer(t, tr, nil)
	const n = 200
	var (
		ws  []*Watch
		fws = map[uint64]*fakeWatch{}
		got []<-chan []ebpf.Event
	)
	for range 3 {
		w := watch(t, h.sock, t.TempDir(), ebpf.Policy{})
		fw := recv(t, tr.armed, "the watch to be armed")
		ws, fws[fw.id] = append(ws, w), fw
		got = append(got, collect(w))
	}
	for i := range n {
		for _, fw := range fws {
			fw.emit(sampleEvent(i))
		}
	}
	for i, w := range ws {
		if _, err := w.Stop(); err != nil {
			t.Fatal(err)
		}
		evs := recv(t, got[i], "Events to close")
		if len(evs) != n {
			t.Errorf("watch of cgroup %d got %d events, want %d", w.CgroupID(), len(evs), n)
		}
		for j, ev := range evs {
			if ev.CgroupID != w.CgroupID() || ev.Time != uint64(j) {
				t.Fatalf("watch of cgroup %d: event %d is of cgroup %d, time %d", w.CgroupID(), j, ev.CgroupID, ev.Time)
			}
		}
	}
}

func TestShutdown(t *testing.T) {
	tr := newFakeTracer()
	h := startServer(t, tr, nil)
	w := watch(t, h.sock, t.TempDir(), ebpf.Policy{})
	fw := recv(t, tr.armed, "the watch to be armed")
	events := collect(w)
	fw.emit(sampleEvent(0))
	h.cancel()
	if err := recv(t, h.served, "Serve to return"); err != nil {
		t.Errorf("Serve: %v", err)
	}
	h.served <- nil // for the cleanup
	if !fw.isStopped() {
		t.Error("Serve returned with a watch armed")
	}
	stats, err := w.Stop()
	if err == nil || !strings.Contains(err.Error(), "shut down") || errors.Is(err, ErrBroken) {
		t.Errorf("Stop after shutdown = %v, want the helper's shutdown error", err)
	}
	if stats.Delivered != 1 {
		t.Errorf("stats %+v, want the watch's", stats)
	}
	if evs := recv(t, events, "Events to close"); len(evs) != 1 {
		t.Errorf("%d events, want 1", len(evs))
	}
	if _, err := os.Lstat(h.sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket outlives Serve: %v", err)
	}
}

// TestReceivedFDsClosed: the helper keeps no fd it was sent, whether it
// refuses or serves.
func TestReceivedFDsClosed(t *testing.T) {
	h := startServer(t, newFakeTracer(), nil)
	dir := t.TempDir()
	fd := openFD(t, dir, unix.O_RDONLY|unix.O_DIRECTORY)
	before := openFDs(t)
	for range 3 {
		rawRequest(t, h.sock, `{"v":2,"op":"watch"}`+"\n", fd, fd)
		rawRequest(t, h.sock, `{"v":99,"op":"watch"}`+"\n", fd)
	}
	w := watch(t, h.sock, dir, ebpf.Policy{})
	if _, err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		after := openFDs(t)
		if after <= before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d fds open, %d before the requests", after, before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestFromFile(t *testing.T) {
	tr := newFakeTracer()
	h := startServer(t, tr, nil)
	c := dial(t, h.sock)
	f, err := c.File()
	if err != nil {
		t.Fatal(err)
	}
	c.Close() // the inherited copy keeps the connection
	inherited, err := FromFile(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	w, err := inherited.Watch(t.TempDir(), ebpf.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	fw := recv(t, tr.armed, "the watch to be armed")
	fw.emit(sampleEvent(0))
	events := collect(w)
	if stats, err := w.Stop(); err != nil || stats.Delivered != 1 {
		t.Errorf("Stop = %+v, %v", stats, err)
	}
	if evs := recv(t, events, "Events to close"); len(evs) != 1 {
		t.Errorf("%d events, want 1", len(evs))
	}
	if _, err := FromFile(os.Stdin); err == nil {
		t.Error("FromFile accepted a file that is not a unix socket")
	}
}

func TestListen(t *testing.T) {
	base := shortTempDir(t)
	path := filepath.Join(base, "run", "s.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o666 {
		t.Errorf("socket mode %v (%v), want 0666", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("socket directory mode %v (%v), want 0755", fi.Mode(), err)
	}
	if _, err := Listen(path); err == nil || !strings.Contains(err.Error(), "another tracer helper") {
		t.Errorf("Listen over a live helper = %v", err)
	}

	// A helper that died leaves its socket behind.
	l.SetUnlinkOnClose(false)
	l.Close()
	l, err = Listen(path)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	l.Close()

	notSocket := filepath.Join(base, "file")
	if err := os.WriteFile(notSocket, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(notSocket); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen over a regular file = %v", err)
	}
	if data, _ := os.ReadFile(notSocket); string(data) != "keep" {
		t.Error("Listen removed a regular file")
	}
}

func TestSocketPath(t *testing.T) {
	t.Setenv(SocketEnv, "")
	if p := SocketPath(); p != DefaultSocket {
		t.Errorf("SocketPath() = %q, want %q", p, DefaultSocket)
	}
	t.Setenv(SocketEnv, "/tmp/x.sock")
	if p := SocketPath(); p != "/tmp/x.sock" {
		t.Errorf("SocketPath() = %q with %s set", p, SocketEnv)
	}
}
