//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/internal/host"
)

// Tracer is the loaded and attached BPF exec tracer. One Tracer serves any
// number of concurrent watches (up to MaxWatches); its methods are safe
// for concurrent use.
type Tracer struct {
	objs    execObjects
	lsm     lsmPrograms // loaded only when lsmErr is nil
	lsmErr  error       // why the BPF LSM programs are not attached
	links   []link.Link
	reader  *ringbuf.Reader
	wait    *ringWait // nil: the reader waits itself (the fd is not pollable)
	opts    Options
	ncpu    int
	started time.Time

	// life is held shared by Watch and Stop while they use kernel
	// objects, and exclusively by Close before freeing them.
	life     sync.RWMutex
	mu       sync.RWMutex // guards the fields below
	closed   bool
	byCookie map[uint64]*Watch
	byCgroup map[uint64]*Watch
	slotUsed [MaxWatches + 1]bool
	lastSlot uint32
	cookie   uint64

	// Drain requests: a request with sequence number n is complete once
	// the consumer has seen the ring empty in a read that began after n
	// was issued.
	drainMu   sync.Mutex
	drainCond *sync.Cond
	drainReq  uint64 // last issued
	drainDone uint64 // all requests ≤ drainDone are complete

	orphans      atomic.Uint64 // records for no current watch (stopped, or undecodable cookie)
	decodeErrors atomic.Uint64
	consumerErr  atomic.Pointer[error]
	consumerDone chan struct{}
}

// tracepoints the tracer attaches, by program.
func (t *Tracer) tracepoints() []struct {
	group, name string
	prog        *cebpf.Program
} {
	return []struct {
		group, name string
		prog        *cebpf.Program
	}{
		{"sched", "sched_process_exec", t.objs.HandleExec},
		{"syscalls", "sys_enter_execve", t.objs.EnterExecve},
		{"syscalls", "sys_enter_execveat", t.objs.EnterExecveat},
		{"syscalls", "sys_exit_execve", t.objs.ExitExecve},
		{"syscalls", "sys_exit_execveat", t.objs.ExitExecveat},
	}
}

// Load loads the BPF objects, attaches them and starts the ring buffer
// consumer. Nothing is recorded until Watch arms a cgroup. Host problems
// (no BTF, no tracefs, no privilege, kernel too old) are returned wrapping
// ErrNotSupported. Load takes ~30 ms: overlap it with container creation.
func Load(opts Options) (*Tracer, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkHost(); err != nil {
		return nil, err
	}
	if err := removeMemlock(); err != nil {
		return nil, unsupported("raise RLIMIT_MEMLOCK", err)
	}
	ncpu, err := cebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("possible CPUs: %w", err)
	}
	spec, err := loadExec()
	if err != nil {
		return nil, err
	}
	spec.Maps[execMapEvents].MaxEntries = uint32(opts.RingSize)
	if err := spec.Variables[execVarArgvCap].Set(uint32(opts.ArgvCap)); err != nil {
		return nil, fmt.Errorf("set argv_cap: %w", err)
	}

	t := &Tracer{
		opts:         opts,
		ncpu:         ncpu,
		byCookie:     map[uint64]*Watch{},
		byCgroup:     map[uint64]*Watch{},
		consumerDone: make(chan struct{}),
	}
	t.drainCond = sync.NewCond(&t.drainMu)
	if err := spec.LoadAndAssign(&t.objs, nil); err != nil {
		var ve *cebpf.VerifierError
		if errors.As(err, &ve) {
			if strings.Contains(fmt.Sprint(ve), "unknown func") {
				return nil, fmt.Errorf("%w: the kernel lacks a BPF helper the tracer uses: %v", ErrNotSupported, ve)
			}
			// Otherwise a bug, or a kernel too different from the one
			// the object was built for: keep the whole log.
			return nil, fmt.Errorf("load exec tracer: %+v", ve)
		}
		return nil, unsupported("load exec tracer", err)
	}
	for _, tp := range t.tracepoints() {
		l, err := link.Tracepoint(tp.group, tp.name, tp.prog, nil)
		if err != nil {
			t.closeObjects()
			return nil, unsupported("attach tracepoint "+tp.group+"/"+tp.name, err)
		}
		t.links = append(t.links, l)
	}
	t.lsmErr = t.attachLSM(opts)
	t.reader, err = ringbuf.NewReader(t.objs.Events)
	if err != nil {
		t.closeObjects()
		return nil, fmt.Errorf("ring buffer reader: %w", err)
	}
	// Without the netpoller the reader's blocking wait still works, at a
	// higher CPU cost.
	t.wait, _ = newRingWait(t.objs.Events.FD())
	t.started = time.Now()
	go t.consume()
	return t, nil
}

// attachLSM loads the BPF LSM programs (bpf/lsm.c) on the tracer's maps and
// attaches them, where the BPF LSM is active. Its error says why they are
// not attached; the tracer then works without them (enforce kills).
func (t *Tracer) attachLSM(opts Options) error {
	active, err := host.BPFLSMActive()
	switch {
	case err != nil:
		return fmt.Errorf("%w: cannot tell whether the BPF LSM is active: %v", ErrNotSupported, err)
	case !active:
		return fmt.Errorf("%w: the BPF LSM is not active (no bpf in %s)", ErrNotSupported, host.LSMFile)
	}
	spec, err := loadLsm()
	if err != nil {
		return err
	}
	spec.Maps[execMapEvents].MaxEntries = uint32(opts.RingSize)
	replace := map[string]*cebpf.Map{
		execMapTracedCgroups: t.objs.TracedCgroups,
		execMapAllowedFiles:  t.objs.AllowedFiles,
		execMapCounters:      t.objs.Counters,
		execMapEvents:        t.objs.Events,
		execMapPending:       t.objs.Pending,
	}
	if err := spec.LoadAndAssign(&t.lsm, &cebpf.CollectionOptions{MapReplacements: replace}); err != nil {
		var ve *cebpf.VerifierError
		switch {
		case errors.As(err, &ve):
			return fmt.Errorf("load the BPF LSM programs: %+v", ve)
		case errors.Is(err, unix.EPERM):
			// The tracepoint programs loaded with the same privilege:
			// this kernel refuses LSM programs (some refuse every
			// trampoline program, fentry included, even to root).
			return fmt.Errorf("%w: the kernel refused to load the BPF LSM programs: %w", ErrNotSupported, err)
		}
		return unsupported("load the BPF LSM programs", err)
	}
	var links []link.Link
	for _, prog := range t.lsmPrograms() {
		l, err := link.AttachLSM(link.LSMOptions{Program: prog})
		if err != nil {
			for _, l := range links {
				_ = l.Close()
			}
			t.lsm.Close()
			t.lsm = lsmPrograms{}
			return unsupported("attach BPF LSM program "+prog.String(), err)
		}
		links = append(links, l)
	}
	t.links = append(t.links, links...)
	return nil
}

// lsmPrograms are the loaded BPF LSM programs (none when not attached).
func (t *Tracer) lsmPrograms() []*cebpf.Program {
	var out []*cebpf.Program
	for _, p := range []*cebpf.Program{t.lsm.DenyExec, t.lsm.DenyPtrace, t.lsm.DenyTraceme} {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// LSM reports whether the BPF LSM programs are attached: nil when they
// are (ptrace-class access from every watched cgroup is refused, and
// enforce refuses execs rather than killing them), else why not (wrapping
// ErrNotSupported when the host cannot).
func (t *Tracer) LSM() error { return t.lsmErr }

// Options returns the options the tracer runs with, defaults filled in.
func (t *Tracer) Options() Options { return t.opts }

func (t *Tracer) closeObjects() {
	t.detach()
	t.lsm.Close()
	t.objs.Close()
}

// detach closes the links. Each close waits for an RCU grace period in
// the kernel (~55 ms each here); closing them together overlaps the waits.
func (t *Tracer) detach() {
	var wg sync.WaitGroup
	for _, l := range t.links {
		wg.Go(func() { _ = l.Close() })
	}
	wg.Wait()
	t.links = nil
}

// Close detaches the programs and frees every kernel object. Watches not
// stopped yet end: their Events channels close, and their Stop returns
// ErrClosed. Close waits for the consumer to finish.
func (t *Tracer) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	var live []*Watch
	for _, w := range t.byCookie {
		live = append(live, w)
	}
	t.mu.Unlock()
	t.life.Lock()
	defer t.life.Unlock()

	// Detach first so nothing new is produced, then deliver what is in
	// the ring before the reader goes.
	t.detach()
	t.drain()
	var err error
	if t.wait != nil {
		// The consumer looks at the ring's memory outside the reader's
		// lock (AvailableBytes), so the reader, which unmaps it, is
		// closed only once the consumer has returned.
		t.wait.close()
		<-t.consumerDone
		err = t.reader.Close()
	} else {
		// Closing the reader is what ends its blocking wait.
		err = t.reader.Close()
		<-t.consumerDone
	}
	for _, w := range live {
		w.finish()
	}
	t.lsm.Close()
	t.objs.Close()
	return err
}

// consume reads the ring buffer until Close. The BPF side
// submits without wakeups until the ring is a quarter full, so while a
// watch is armed each read waits at most PollInterval; with none, a read
// waits for a flush (a drain, a new watch, Close). Each poll wakes the
// consumer, then each watch's pump and its reader: on a 2-vCPU VM, polling
// every 10 ms rather than every 50 ms made a slow exec storm's overhead
// +8.2% rather than +3.0% (12 storms of each, in blocks).
func (t *Tracer) consume() {
	defer close(t.consumerDone)
	defer t.completeDrains(^uint64(0)) // release waiters on exit
	if t.wait != nil {
		defer t.wait.done()
	}
	var rec ringbuf.Record
	// Watches with queued events not yet signalled: their pumps are woken
	// once per pass over the ring (or every batchSize events), not per
	// event, which would cost two goroutine wakeups per exec.
	const batchSize = 256
	touched := map[*Watch]bool{}
	pending := 0
	wake := func() {
		for w := range touched {
			w.cond.Signal()
		}
		clear(touched)
		pending = 0
	}
	hasData := func() bool { return t.reader.AvailableBytes() > 0 }
	for {
		if t.wait != nil {
			if t.wait.closed() {
				wake()
				return
			}
			t.wait.reset() // before the drains are read: a later kick is not lost
		}
		t.drainMu.Lock()
		upTo, waiting := t.drainReq, t.drainReq > t.drainDone
		t.drainMu.Unlock()
		// A drain asked for while the last read was already under way
		// had its flush taken by that read, which can only complete the
		// drains asked for before it began: this pass must not wait for
		// the poll deadline (up to PollInterval added to every Stop),
		// and reads the ring empty without blocking.
		deadline := time.Now().Add(t.opts.PollInterval)
		switch {
		case waiting:
			deadline = time.Now()
		case t.unwatched():
			// Nothing can arrive: wait for a drain, a new watch's
			// flush or Close, not for the clock.
			deadline = time.Time{}
		}
		if t.wait != nil {
			// Wait in the netpoller, then read what the ring has without
			// blocking: the reader returns os.ErrDeadlineExceeded only
			// once it has read the ring empty, as with a deadline of its
			// own.
			if !waiting && !hasData() {
				t.wait.wait(deadline, hasData)
			}
			deadline = time.Now()
		}
		t.reader.SetDeadline(deadline)
		err := t.reader.ReadInto(&rec)
		switch {
		case err == nil:
			if w := t.dispatch(rec.RawSample); w != nil {
				touched[w] = true
				if pending++; pending >= batchSize {
					wake()
				}
			}
		case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, ringbuf.ErrFlushed):
			// The reader returns these only after reading the ring
			// empty during this call: every record submitted before
			// the call began has been dispatched.
			wake()
			t.completeDrains(upTo)
		case errors.Is(err, ringbuf.ErrClosed):
			wake()
			return
		default:
			wake()
			// A corrupt ring is not recoverable by reading on.
			e := fmt.Errorf("ring buffer: %w", err)
			t.consumerErr.Store(&e)
			return
		}
	}
}

// unwatched reports whether the tracer has no watch.
func (t *Tracer) unwatched() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.byCookie) == 0
}

func (t *Tracer) completeDrains(upTo uint64) {
	t.drainMu.Lock()
	if upTo > t.drainDone {
		t.drainDone = upTo
		t.drainCond.Broadcast()
	}
	t.drainMu.Unlock()
}

// Drain returns once every event the kernel submitted before the call is
// queued on its watch's Events (or the tracer is closed). Stop drains by
// itself; Drain is for a consistent view while watches run. It does not
// wait for BPF programs still running on other CPUs.
func (t *Tracer) Drain() { t.drain() }

// wake ends the consumer's wait for the ring.
func (t *Tracer) wake() {
	if t.wait != nil {
		t.wait.kick()
		return
	}
	_ = t.reader.Flush()
}

// drain returns once every record submitted to the ring before the call
// has been dispatched to its watch (or the consumer has stopped).
func (t *Tracer) drain() {
	t.drainMu.Lock()
	t.drainReq++
	n := t.drainReq
	t.drainMu.Unlock()
	// Wake the consumer now rather than at its next deadline.
	t.wake()
	t.drainMu.Lock()
	for t.drainDone < n {
		t.drainCond.Wait()
	}
	t.drainMu.Unlock()
}

// dispatch queues one record's event on its watch (without waking the
// watch's pump) and returns the watch, or nil.
func (t *Tracer) dispatch(raw []byte) *Watch {
	cookie, ok := recordCookie(raw)
	t.mu.RLock()
	w := t.byCookie[cookie]
	t.mu.RUnlock()
	if !ok || w == nil {
		t.orphans.Add(1)
		return nil
	}
	ev, err := decodeEvent(raw)
	if err != nil {
		t.decodeErrors.Add(1)
		w.decodeErrors.Add(1)
		return nil
	}
	w.push(ev)
	return w
}

// Counters returns the tracer-wide kernel counters, summed over CPUs.
func (t *Tracer) Counters() (Counters, error) {
	c, err := t.slotCounters(0)
	if err != nil {
		return Counters{}, err
	}
	c.Missed, err = t.missed()
	return c, err
}

// Orphans is how many records arrived for no current watch (events of a
// watch after its Stop returned). They are not delivered.
func (t *Tracer) Orphans() uint64 { return t.orphans.Load() }

// Err reports a consumer failure (a corrupt ring buffer); nil while the
// consumer runs or after a normal Close.
func (t *Tracer) Err() error {
	if p := t.consumerErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (t *Tracer) slotCounters(slot uint32) (Counters, error) {
	per := make([]execCounterSet, t.ncpu)
	if err := t.objs.Counters.Lookup(slot, &per); err != nil {
		return Counters{}, fmt.Errorf("read counters: %w", err)
	}
	var c Counters
	for _, p := range per {
		c.Seen += p.Seen
		c.Matched += p.Matched
		c.Lost += p.Lost
		c.Truncated += p.Truncated
		c.Killed += p.Killed
		c.KillFailed += p.KillFailed
		c.ReadErrors += p.ReadErrors
		c.PendingDropped += p.PendingDropped
		c.Denied += p.Denied
		c.PtraceDenied += p.PtraceDenied
	}
	return c, nil
}

func (t *Tracer) resetSlot(slot uint32) error {
	if err := t.objs.Counters.Update(slot, make([]execCounterSet, t.ncpu), cebpf.UpdateExist); err != nil {
		return fmt.Errorf("reset counters: %w", err)
	}
	return nil
}

// missed sums the kernel's recursion misses over the tracer's programs.
func (t *Tracer) missed() (uint64, error) {
	progs := t.lsmPrograms()
	for _, tp := range t.tracepoints() {
		progs = append(progs, tp.prog)
	}
	var n uint64
	for _, p := range progs {
		s, err := p.Stats()
		if err != nil {
			return 0, fmt.Errorf("program stats: %w", err)
		}
		n += s.RecursionMisses
	}
	return n, nil
}
