//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// The Go decoder's offsets must be the C struct's (bpf2go's type mirrors
// the object's BTF).
func TestEventLayout(t *testing.T) {
	var e execEvent
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"cookie", unsafe.Offsetof(e.Cookie), offCookie},
		{"cgroup_id", unsafe.Offsetof(e.CgroupId), offCgroupID},
		{"ktime_ns", unsafe.Offsetof(e.KtimeNs), offKtime},
		{"ino", unsafe.Offsetof(e.Ino), offIno},
		{"dev", unsafe.Offsetof(e.Dev), offDev},
		{"tgid", unsafe.Offsetof(e.Tgid), offTGID},
		{"tid", unsafe.Offsetof(e.Tid), offTID},
		{"ppid", unsafe.Offsetof(e.Ppid), offPPID},
		{"uid", unsafe.Offsetof(e.Uid), offUID},
		{"err", unsafe.Offsetof(e.Err), offErr},
		{"argv_len", unsafe.Offsetof(e.ArgvLen), offArgvLen},
		{"argv_size", unsafe.Offsetof(e.ArgvSize), offArgvSize},
		{"filename_size", unsafe.Offsetof(e.FilenameSize), offFilenameSize},
		{"target", unsafe.Offsetof(e.Target), offTarget},
		{"mode", unsafe.Offsetof(e.Mode), offMode},
		{"kind", unsafe.Offsetof(e.Kind), offKind},
		{"flags", unsafe.Offsetof(e.Flags), offFlags},
		{"comm", unsafe.Offsetof(e.Comm), offComm},
		{"filename", unsafe.Offsetof(e.Filename), offFilename},
		{"argv", unsafe.Offsetof(e.Argv), eventHeaderSize},
		{"comm len", unsafe.Sizeof(e.Comm), commLen},
		{"filename len", unsafe.Sizeof(e.Filename), filenameCap},
	} {
		if c.got != c.want {
			t.Errorf("struct event %s: C has %d, decoder uses %d", c.name, c.got, c.want)
		}
	}
	// Go pads a struct ending in a zero-length array; ask the BTF.
	spec, err := loadExec()
	if err != nil {
		t.Fatal(err)
	}
	var st *btf.Struct
	if err := spec.Types.TypeByName("event", &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != eventHeaderSize {
		t.Errorf("sizeof(struct event) is %d, decoder uses %d", st.Size, eventHeaderSize)
	}
}

// The syscall records are read through hand-written structs: check them
// against the kernel's format files.
func TestTracepointFormats(t *testing.T) {
	if os.Geteuid() != 0 {
		missing(t, "reading tracefs formats needs root")
	}
	if err := EnsureTracefs(); err != nil {
		missing(t, err.Error())
	}
	root := TracefsPath()
	for _, c := range []struct {
		event, field string
		offset       int
	}{
		{"syscalls/sys_enter_execve", "const char * filename", 16},
		{"syscalls/sys_enter_execveat", "const char * filename", 24},
		{"syscalls/sys_exit_execve", "long ret", 16},
		{"syscalls/sys_exit_execveat", "long ret", 16},
	} {
		b, err := os.ReadFile(filepath.Join(root, "events", c.event, "format"))
		if err != nil {
			missing(t, "tracepoint format: "+err.Error())
		}
		want := "field:" + c.field + ";\toffset:" + strconv.Itoa(c.offset) + ";"
		if !strings.Contains(string(b), want) {
			t.Errorf("%s: no %q in\n%s", c.event, want, b)
		}
	}
}

func TestLoadOptions(t *testing.T) {
	for _, o := range []Options{
		{ArgvCap: 10},
		{ArgvCap: MaxArgvCap + 1},
		{RingSize: 3 << 20},
		{RingSize: 1024},
		{RingSize: 8192}, // smaller than one event
		{ArgvCap: MaxArgvCap, RingSize: 32 << 10},
		{PollInterval: -1},
	} {
		if _, err := Load(o); !errors.Is(err, ErrInvalid) {
			t.Errorf("Load(%+v) = %v, want ErrInvalid", o, err)
		}
	}
}

// The brief's scenario: a shell running two commands in the cgroup, with
// an empty argument and an env-prefixed exec, recorded in order with
// exact argv and file identities; a process outside produces nothing.
func TestExecInCgroup(t *testing.T) {
	tr := requireTracer(t, Options{})
	cg := newTestCgroup(t)
	before, err := tr.Counters()
	if err != nil {
		t.Fatal(err)
	}
	w, err := tr.Watch(cg.ID, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	col := collect(w)

	outside := exec.Command("/bin/true", "outside-the-cgroup")
	if err := outside.Run(); err != nil {
		t.Fatal(err)
	}
	script := `/bin/true a "" b; /usr/bin/env X=1 /bin/echo hi`
	cmd := cg.command("/bin/sh", "-c", script)
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "hi\n" {
		t.Fatalf("sh: %v, output %q", err, out)
	}
	events, st := col.stop(t, w)

	sh := mustIdentity(t, "/bin/sh")
	checkEvents(t, events,
		expect{kind: KindExec, filename: "/bin/sh", argv: []string{"/bin/sh", "-c", script}, file: &sh, tgid: cmd.Process.Pid, killed: ptr(false)},
		expect{kind: KindExec, filename: "/bin/true", argv: []string{"/bin/true", "a", "", "b"}, file: ptr(mustIdentity(t, "/bin/true"))},
		expect{kind: KindExec, filename: "/usr/bin/env", argv: []string{"/usr/bin/env", "X=1", "/bin/echo", "hi"}, file: ptr(mustIdentity(t, "/usr/bin/env"))},
		expect{kind: KindExec, filename: "/bin/echo", argv: []string{"/bin/echo", "hi"}, file: ptr(mustIdentity(t, "/bin/echo"))},
	)
	for _, ev := range events {
		if ev.CgroupID != cg.ID {
			t.Errorf("event %q has cgroup %d, want %d", ev.Filename, ev.CgroupID, cg.ID)
		}
		if int(ev.TGID) == outside.Process.Pid {
			t.Errorf("the process outside the cgroup was recorded: %+v", ev)
		}
		if ev.Truncated || ev.Flags != 0 {
			t.Errorf("event %q has flags %v", ev.Filename, ev.Flags)
		}
		if want := uint32(argvBytes(ev.ArgvStrings())); ev.ArgvLen != want {
			t.Errorf("event %q: argv_len %d, want %d", ev.Filename, ev.ArgvLen, want)
		}
		if ev.UID != 0 || ev.Time == 0 {
			t.Errorf("event %q: uid %d time %d", ev.Filename, ev.UID, ev.Time)
		}
	}
	if len(events) == 4 {
		if events[1].PPID != uint32(cmd.Process.Pid) {
			t.Errorf("/bin/true's ppid is %d, want the shell %d", events[1].PPID, cmd.Process.Pid)
		}
		if events[0].PPID != uint32(os.Getpid()) {
			t.Errorf("the shell's ppid is %d, want the test %d", events[0].PPID, os.Getpid())
		}
		if events[1].Comm != "true" || events[0].Comm != "sh" {
			t.Errorf("comms %q %q", events[0].Comm, events[1].Comm)
		}
	}
	requireComplete(t, st)
	if st.Matched != 4 {
		t.Errorf("matched %d, want 4", st.Matched)
	}
	after, err := tr.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if after.Seen-before.Seen < 5 {
		t.Errorf("tracer saw %d execs, want at least 5 (4 inside, 1 outside)", after.Seen-before.Seen)
	}
}

func argvBytes(argv []string) int {
	n := 0
	for _, a := range argv {
		n += len(a) + 1
	}
	return n
}

func TestFailedExec(t *testing.T) {
	tr := requireTracer(t, Options{})
	cg := newTestCgroup(t)
	w, err := tr.Watch(cg.ID, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	col := collect(w)
	cmd := cg.command("/bin/sh", "-c", "/nonexistent/prog")
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 127 {
		t.Fatalf("sh -c /nonexistent/prog: %v, want exit status 127", err)
	}
	events, st := col.stop(t, w)
	checkEvents(t, events,
		expect{kind: KindExec, filename: "/bin/sh"},
		expect{kind: KindFailed, filename: "/nonexistent/prog", errno: syscall.ENOENT},
	)
	if len(events) == 2 {
		f := events[1]
		if f.Dev != 0 || f.Ino != 0 || len(f.Argv) != 0 || f.Flags != 0 {
			t.Errorf("failed event carries %+v", f)
		}
	}
	requireComplete(t, st)
}

// A failed execveat, through a Go helper: the filename argument is the
// second syscall argument.
func TestFailedExecveat(t *testing.T) {
	tr := requireTracer(t, Options{})
	cg := newTestCgroup(t)
	w, err := tr.Watch(cg.ID, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	col := collect(w)
	// The test binary re-executed as a helper that calls execveat.
	cmd := cg.command(os.Args[0])
	cmd.Env = append(os.Environ(), "HOOKBOX_EBPF_HELPER=execveat")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	events, st := col.stop(t, w)
	if len(events) < 2 {
		t.Fatalf("got %d events, want the helper's exec and a failed execveat", len(events))
	}
	checkEvents(t, events[1:], expect{kind: KindFailed, filename: "missing-relative-prog", errno: syscall.ENOENT})
	requireComplete(t, st)
}

// helperExecveat is the test binary re-executed by TestFailedExecveat
// (see TestMain): an execveat of a relative name that does not exist.
func helperExecveat() int {
	dir, err := syscall.Open("/", syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	name, _ := syscall.BytePtrFromString("missing-relative-prog")
	argv := []*byte{name, nil}
	envv := []*byte{nil}
	_, _, e := syscall.Syscall6(unix.SYS_EXECVEAT, uintptr(dir), uintptr(unsafe.Pointer(name)),
		uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])), 0, 0)
	if e != syscall.ENOENT {
		fmt.Fprintf(os.Stderr, "execveat: %v, want ENOENT\n", e)
		return 1
	}
	return 0
}

func TestArgvTruncation(t *testing.T) {
	tr := requireTracer(t, Options{})
	cg := newTestCgroup(t)
	w, err := tr.Watch(cg.ID, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	col := collect(w)
	args := []string{"/bin/true"}
	for i := 0; argvBytes(args) < 9000; i++ {
		args = append(args, strings.Repeat(string(rune('a'+i%26)), 99))
	}
	args = append(args, "", "last")
	if err := cg.command(args[0], args[1:]...).Run(); err != nil {
		t.Fatal(err)
	}
	events, st := col.stop(t, w)
	if len(events) != 1 {
		t.Fatalf("got %d events, want 1", len(events))
	}
	ev := events[0]
	full := []byte(strings.Join(args, "\x00") + "\x00")
	if !ev.Truncated || ev.Flags&FlagTruncated == 0 {
		t.Errorf("not flagged truncated: %v", ev.Flags)
	}
	if int(ev.ArgvLen) != len(full) {
		t.Errorf("argv_len %d, want %d", ev.ArgvLen, len(full))
	}
	got := bytes.Join(ev.Argv, []byte{0})
	if len(got) != DefaultArgvCap || !bytes.Equal(got, full[:DefaultArgvCap]) {
		t.Errorf("captured %d bytes, want the first %d of the argv", len(got), DefaultArgvCap)
	}
	if st.Truncated != 1 {
		t.Errorf("truncated counter %d, want 1", st.Truncated)
	}
	if st.Delivered != st.Matched || st.Lost != 0 {
		t.Errorf("stats %+v", st)
	}
}

// A larger ArgvCap keeps the whole 9 KB argv.
func TestArgvCapOption(t *testing.T) {
	tr := requireTracer(t, Options{ArgvCap: 16 << 10})
	cg := newTestCgroup(t)
	w, err := tr.Watch(cg.ID, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	col := collect(w)
	args := []string{"/bin/true"}
	for argvBytes(args) < 9000 {
		args = append(args, strings.Repeat("x", 100))
	}
	if err := cg.command(args[0], args[1:]...).Run(); err != nil {
		t.Fatal(err)
	}
	events, st := col.stop(t, w)
	checkEvents(t, events, expect{kind: KindExec, argv: args})
	if len(events) == 1 && events[0].Truncated {
		t.Error("truncated with a 16 KiB cap")
	}
	requireComplete(t, st)
}

// Enforce: only /bin/sh and unshare may run. The shell runs; its /bin/true
// child is killed before running; a directly started disallowed program
// never runs a user instruction (touch would have created its file); nor
// does a disallowed pid-namespace init.
func TestEnforce(t *testing.T) {
	tr := requireTracer(t, Options{})
	cg := newTestCgroup(t)
	sh, unshareID := mustIdentity(t, "/bin/sh"), mustIdentity(t, "/usr/bin/unshare")
	w, err := tr.Watch(cg.ID, Policy{Enforce: true, Allowed: []FileID{sh, unshareID}})
	if err != nil {
		t.Fatal(err)
	}
	col := collect(w)

	out, err := cg.command("/bin/sh", "-c", `/bin/true; echo "status=$?"`).Output()
	if err != nil || string(out) != "status=137\n" {
		t.Errorf("sh: %v, output %q; want the child killed by SIGKILL (137)", err, out)
	}

	marker := filepath.Join(t.TempDir(), "ran")
	touch := cg.command("/usr/bin/touch", marker)
	err = touch.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("touch: %v, want killed", err)
	}
	if ws := ee.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("touch ended with %v, want SIGKILL", ws)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed touch ran: %s exists (%v)", marker, err)
	}

	// A disallowed exec by the init of a new pid namespace (a container's
	// first process): kernel-sent SIGKILL is not ignored there.
	marker2 := filepath.Join(t.TempDir(), "ran")
	unshare := cg.command("/usr/bin/unshare", "--pid", "--fork", "/usr/bin/touch", marker2)
	err = unshare.Run()
	if !errors.As(err, &ee) {
		t.Errorf("unshare: %v, want its child killed", err)
	}
	if _, err := os.Stat(marker2); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed pid-namespace init ran: %s exists (%v)", marker2, err)
	}

	events, st := col.stop(t, w)
	checkEvents(t, events,
		expect{kind: KindExec, filename: "/bin/sh", file: &sh, killed: ptr(false)},
		expect{kind: KindExec, filename: "/bin/true", killed: ptr(true)},
		expect{kind: KindExec, filename: "/usr/bin/touch", killed: ptr(true), tgid: touch.Process.Pid},
		expect{kind: KindExec, filename: "/usr/bin/unshare", file: &unshareID, killed: ptr(false), tgid: unshare.Process.Pid},
		expect{kind: KindExec, filename: "/usr/bin/touch", killed: ptr(true)},
	)
	if len(events) == 5 && events[4].PPID != uint32(unshare.Process.Pid) {
		t.Errorf("the pid-namespace init's parent is %d, want unshare %d", events[4].PPID, unshare.Process.Pid)
	}
	for _, ev := range events {
		if ev.Flags&FlagEnforced == 0 {
			t.Errorf("event %q not marked enforced", ev.Filename)
		}
	}
	if st.Killed != 3 || st.KillFailed != 0 {
		t.Errorf("killed %d, kill failed %d; want 3, 0", st.Killed, st.KillFailed)
	}
	requireComplete(t, st)

	// After Stop the cgroup is neither traced nor enforced.
	if err := cg.command("/bin/true").Run(); err != nil {
		t.Errorf("/bin/true after Stop: %v", err)
	}
}

// Two watches at once each see only their own cgroup.
func TestConcurrentWatches(t *testing.T) {
	tr := requireTracer(t, Options{})
	a, b := newTestCgroup(t), newTestCgroup(t)
	wa, err := tr.Watch(a.ID, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	wb, err := tr.Watch(b.ID, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Watch(a.ID, Policy{}); !errors.Is(err, ErrWatched) {
		t.Errorf("second Watch of a cgroup: %v, want ErrWatched", err)
	}
	if _, err := tr.Watch(0, Policy{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Watch(0): %v, want ErrInvalid", err)
	}
	ca, cb := collect(wa), collect(wb)
	errs := make(chan error, 2)
	for _, c := range []struct {
		cg  *testCgroup
		arg string
	}{{a, "in-a"}, {b, "in-b"}} {
		go func() { errs <- c.cg.command("/bin/sh", "-c", "for i in 1 2 3; do /bin/echo "+c.arg+"; done").Run() }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Drain queues everything submitted so far, before any Stop.
	tr.Drain()
	for _, w := range []*Watch{wa, wb} {
		c, err := tr.slotCounters(w.slot)
		if err != nil {
			t.Fatal(err)
		}
		if s := w.snapshot(c); s.Delivered != c.Matched || c.Matched != 4 {
			t.Errorf("after Drain: delivered %d of %d matched, want 4", s.Delivered, c.Matched)
		}
	}
	ea, sa := ca.stop(t, wa)
	eb, sb := cb.stop(t, wb)
	for _, c := range []struct {
		events []Event
		st     Stats
		arg    string
		id     uint64
	}{{ea, sa, "in-a", a.ID}, {eb, sb, "in-b", b.ID}} {
		if len(c.events) != 4 {
			t.Errorf("%s: %d events, want 4", c.arg, len(c.events))
		}
		for _, ev := range c.events[1:] {
			if ev.CgroupID != c.id || len(ev.Argv) != 2 || string(ev.Argv[1]) != c.arg {
				t.Errorf("%s: foreign event %q %q", c.arg, ev.Filename, ev.ArgvStrings())
			}
		}
		requireComplete(t, c.st)
	}
	// Stop is idempotent.
	if st, err := wa.Stop(); err != nil || st != sa {
		t.Errorf("second Stop: %+v %v", st, err)
	}
}

// With a ring that holds one event and a consumer that cannot read (held
// here on the tracer's lock, which each dispatch takes), a burst loses
// events, and every loss is counted: received + lost == matched.
func TestOverflowAccounting(t *testing.T) {
	tr := requireTracer(t, Options{RingSize: 16 << 10})
	cg := newTestCgroup(t)
	w, err := tr.Watch(cg.ID, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	col := collect(w)
	const n = 500
	tr.mu.Lock()
	burst := cg.command("/bin/sh", "-c", "i=0; while [ $i -lt "+strconv.Itoa(n)+" ]; do /bin/true; i=$((i+1)); done").Run()
	tr.mu.Unlock()
	if burst != nil {
		t.Fatal(burst)
	}
	events, st := col.stop(t, w)
	t.Logf("burst of %d execs in a 16 KiB ring, consumer held: matched %d, received %d, lost %d", n+1, st.Matched, len(events), st.Lost)
	if st.Matched != n+1 {
		t.Errorf("matched %d, want %d", st.Matched, n+1)
	}
	if uint64(len(events)) != st.Delivered || st.Delivered+st.Lost != st.Matched || st.Unaccounted != 0 {
		t.Errorf("received %d + lost %d != matched %d (%+v)", len(events), st.Lost, st.Matched, st)
	}
	if st.Lost == 0 {
		t.Errorf("no loss with a one-event ring and a held consumer; the test proves nothing")
	}
	if inc := st.Incomplete(); len(inc) == 0 || inc[0] != "lost" {
		t.Errorf("Incomplete() = %v, want lost first", inc)
	}
}

// A burst several times the ring's size is read in full although the
// consumer's poll would not come for an hour: once a quarter of the ring
// is queued, the BPF side wakes the consumer. (The ring holds 124 events
// and the wakeup comes at 31, so a consumer that is slow to be scheduled,
// on a loaded CI host, still has some 90 execs of margin.)
func TestBurstWakesTheConsumer(t *testing.T) {
	tr := requireTracer(t, Options{RingSize: 1 << 20, PollInterval: time.Hour})
	cg := newTestCgroup(t)
	w, err := tr.Watch(cg.ID, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	col := collect(w)
	const n = 1000 // ~8 MiB of events through a 1 MiB ring
	if err := cg.command("/bin/sh", "-c", "i=0; while [ $i -lt "+strconv.Itoa(n)+" ]; do /bin/true; i=$((i+1)); done").Run(); err != nil {
		t.Fatal(err)
	}
	events, st := col.stop(t, w)
	t.Logf("burst of %d execs in a 1 MiB ring, one-hour poll: matched %d, received %d, lost %d", n+1, st.Matched, len(events), st.Lost)
	if st.Matched != n+1 || st.Lost != 0 || uint64(len(events)) != st.Matched {
		t.Errorf("matched %d, received %d, lost %d: want all %d received", st.Matched, len(events), st.Lost, n+1)
	}
}

// 20,000 execs in the cgroup at the default ring size: all delivered.
func TestExecStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("exec storm skipped in -short mode")
	}
	tr := requireTracer(t, Options{})
	cg := newTestCgroup(t)
	w, err := tr.Watch(cg.ID, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	col := collect(w)
	if err := stormCommand(cg, stormSize).Run(); err != nil {
		t.Fatal(err)
	}
	events, st := col.stop(t, w)
	t.Logf("storm: %d execs, received %d, lost %d, matched %d", stormSize+1, len(events), st.Lost, st.Matched)
	if len(events) != stormSize+1 || st.Matched != stormSize+1 {
		t.Errorf("received %d, matched %d; want %d", len(events), st.Matched, stormSize+1)
	}
	requireComplete(t, st)
	for i, ev := range events[1:] {
		if ev.Filename != "/bin/true" {
			t.Fatalf("event %d: %q", i+1, ev.Filename)
		}
	}
}

const stormSize = 20000

func stormCommand(cg *testCgroup, n int) *exec.Cmd {
	script := "i=0; while [ $i -lt " + strconv.Itoa(n) + " ]; do /bin/true; i=$((i+1)); done"
	if cg == nil {
		return exec.Command("/bin/sh", "-c", script)
	}
	return cg.command("/bin/sh", "-c", script)
}

// TestStopDoesNotWaitForThePoll: a Stop asked for while the consumer waits
// on the ring returns once the ring is read, not at the consumer's next
// poll deadline. It used to: the flush that woke the waiting read could
// complete only the drains asked for before that read began, so every
// Stop (and Close) waited up to PollInterval, 10 ms per traced run at the
// default. With an hour's poll, that wait is a hang the watchdog reports.
func TestStopDoesNotWaitForThePoll(t *testing.T) {
	tr := requireTracer(t, Options{PollInterval: time.Hour})
	// The kick a drain sends is the netpoller's (ringWait), not the
	// reader's fallback flush: this test is what shows it is not lost.
	if tr.wait == nil {
		t.Fatal("the ring buffer's fd is not in Go's netpoller: the consumer would wait in a blocking epoll_wait")
	}
	cg := newTestCgroup(t)
	w, err := tr.Watch(cg.ID, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	col := collect(w)
	if out, err := cg.command("/bin/true", "once").CombinedOutput(); err != nil {
		t.Fatalf("true: %v %s", err, out)
	}
	stopped := make(chan error, 1)
	go func() {
		_, err := w.Stop()
		stopped <- err
	}()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Stop still waits for the consumer's poll deadline (an hour) after 30 s")
	}
	events, st := col.stop(t, w) // Stop is idempotent: the stats again
	checkEvents(t, events, expect{kind: KindExec, filename: "/bin/true", argv: []string{"/bin/true", "once"}})
	requireComplete(t, st)
}

// A tracer with no watch waits on the ring without a deadline; arming a
// watch wakes it, so the watch's events arrive live, at the poll, without
// a Stop or a Drain to fetch them.
func TestIdleTracerPollsOnceWatched(t *testing.T) {
	tr := requireTracer(t, Options{PollInterval: 20 * time.Millisecond})
	time.Sleep(100 * time.Millisecond) // the consumer is waiting, unwatched
	cg := newTestCgroup(t)
	w, err := tr.Watch(cg.ID, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := cg.command("/bin/true").Run(); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.Events():
		if ev.Filename != "/bin/true" {
			t.Errorf("first event %q, want /bin/true", ev.Filename)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no live event 10 s after the exec: the consumer did not poll once watched")
	}
}

// TestCloseWhileTheConsumerPolls: Close while the consumer polls the ring
// as fast as it can (a watch armed, a poll interval of 1 ns). The consumer
// looks at the ring's memory outside the reader's lock; closing the reader
// (which unmaps it) while the consumer could still look crashed the test
// binary ("fatal error: fault" or a nil dereference), once in CI.
func TestCloseWhileTheConsumerPolls(t *testing.T) {
	for i := range 16 {
		tr := requireTracer(t, Options{PollInterval: time.Nanosecond})
		cg := newTestCgroup(t)
		if _, err := tr.Watch(cg.ID, Policy{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(i%5) * time.Millisecond)
		if err := tr.Close(); err != nil {
			t.Fatalf("Close %d: %v", i, err)
		}
	}
}
