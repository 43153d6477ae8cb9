//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	cebpf "github.com/cilium/ebpf"
)

// stopTimeout bounds how long Stop waits for events the kernel counted
// but the consumer has not seen yet.
const stopTimeout = time.Second

// Watch is one armed cgroup. Its events arrive on Events until Stop.
type Watch struct {
	t        *Tracer
	cgroupID uint64
	cookie   uint64
	slot     uint32
	enforce  bool
	denies   Denies
	allowed  []execFileKey
	missed0  uint64

	mu           sync.Mutex
	cond         *sync.Cond
	queue        []Event
	ended        bool
	delivered    uint64
	decodeErrors atomic.Uint64
	out          chan Event

	stopOnce sync.Once
	stats    Stats
	stopErr  error
}

// Watch arms the in-kernel filter for a cgroup: from its return, every
// exec and failed exec of a task in that cgroup is recorded (and, with
// policy.Enforce, every exec of a file outside policy.Allowed is refused,
// or killed where the BPF LSM programs are not attached). With the BPF LSM
// programs, ptrace-class access from the cgroup is refused too.
// cgroupID is the inode number of the cgroup's cgroup2 directory. Arm it
// before the first process that matters starts in the cgroup (for a
// container: between task create and start).
func (t *Tracer) Watch(cgroupID uint64, policy Policy) (*Watch, error) {
	if cgroupID == 0 {
		return nil, fmt.Errorf("%w: cgroup id 0", ErrInvalid)
	}
	w := &Watch{t: t, cgroupID: cgroupID, enforce: policy.Enforce, out: make(chan Event, 256)}
	w.cond = sync.NewCond(&w.mu)
	if t.lsmErr == nil {
		w.denies = Denies{Ptrace: true, Exec: policy.Enforce}
	}
	if policy.Enforce {
		if len(policy.Allowed) > maxAllowedFiles {
			return nil, fmt.Errorf("%w: %d allowed files, at most %d", ErrInvalid, len(policy.Allowed), maxAllowedFiles)
		}
		for _, f := range policy.Allowed {
			dev, ok := f.kernelDev()
			if !ok {
				return nil, fmt.Errorf("%w: allowed file %s: device not encodable as a kernel dev_t", ErrInvalid, f)
			}
			w.allowed = append(w.allowed, execFileKey{CgroupId: cgroupID, Ino: f.Ino, Dev: dev})
		}
	}

	t.life.RLock()
	defer t.life.RUnlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	if t.byCgroup[cgroupID] != nil {
		return nil, fmt.Errorf("%w: cgroup id %d", ErrWatched, cgroupID)
	}
	// Round-robin slots: a slot is reused only after every other one, so a
	// BPF program still finishing for an old watch cannot count into a
	// new one.
	for i := uint32(1); i <= MaxWatches; i++ {
		s := (t.lastSlot+i-1)%MaxWatches + 1
		if !t.slotUsed[s] {
			w.slot = s
			break
		}
	}
	if w.slot == 0 {
		return nil, fmt.Errorf("%w: %d watches active, at most %d", ErrInvalid, len(t.byCookie), MaxWatches)
	}
	if err := t.resetSlot(w.slot); err != nil {
		return nil, err
	}
	var err error
	if w.missed0, err = t.missed(); err != nil {
		return nil, err
	}
	t.cookie++
	w.cookie = t.cookie

	for i, k := range w.allowed {
		if err := t.objs.AllowedFiles.Update(k, uint8(1), cebpf.UpdateAny); err != nil {
			for _, k := range w.allowed[:i] {
				_ = t.objs.AllowedFiles.Delete(k)
			}
			return nil, fmt.Errorf("allow file (%d of %d): %w", i+1, len(w.allowed), err)
		}
	}
	var flags uint32
	if w.enforce {
		flags |= watchEnforce
	}
	// Register before arming: the first event may arrive right away.
	t.byCookie[w.cookie] = w
	t.byCgroup[cgroupID] = w
	err = t.objs.TracedCgroups.Update(cgroupID, execWatch{Cookie: w.cookie, Slot: w.slot, Flags: flags}, cebpf.UpdateNoExist)
	if err != nil {
		delete(t.byCookie, w.cookie)
		delete(t.byCgroup, cgroupID)
		for _, k := range w.allowed {
			_ = t.objs.AllowedFiles.Delete(k)
		}
		if errors.Is(err, cebpf.ErrKeyExist) {
			return nil, fmt.Errorf("%w: cgroup id %d (armed by another tracer?)", ErrWatched, cgroupID)
		}
		return nil, fmt.Errorf("arm cgroup %d: %w", cgroupID, err)
	}
	t.slotUsed[w.slot] = true
	t.lastSlot = w.slot
	go w.pump()
	// A consumer with no watch waits without a deadline: wake it to poll.
	t.wake()
	return w, nil
}

// enum watch_flag in bpf/exec.c.
const watchEnforce = 1 << 0

// CgroupID is the watched cgroup's id.
func (w *Watch) CgroupID() uint64 { return w.cgroupID }

// Events delivers the watch's events in ring order. It is closed after
// Stop (or the Tracer's Close) once every event has been delivered.
// Events are buffered without bound, so a slow reader never makes the
// kernel drop events; the caller must read the channel until it closes.
func (w *Watch) Events() <-chan Event { return w.out }

// push queues an event; the consumer signals w.cond after a batch.
func (w *Watch) push(ev Event) {
	w.mu.Lock()
	w.queue = append(w.queue, ev)
	w.delivered++
	w.mu.Unlock()
}

// finish marks the end of the watch's events: the pump closes Events once
// the queue is empty.
func (w *Watch) finish() {
	w.mu.Lock()
	w.ended = true
	w.mu.Unlock()
	w.cond.Signal()
}

func (w *Watch) pump() {
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && !w.ended {
			w.cond.Wait()
		}
		batch := w.queue
		w.queue = nil
		ended := w.ended
		w.mu.Unlock()
		for _, ev := range batch {
			w.out <- ev
		}
		if ended && len(batch) == 0 {
			close(w.out)
			return
		}
	}
}

// Stop disarms the watch and returns its accounting. It waits until every
// event the kernel attempted for this watch is delivered or counted lost
// (matched == delivered + lost), for at most a second; anything still
// missing then is Stats.Unaccounted. Call it after the cgroup's processes
// have exited: execs after Stop are not recorded (and, if enforcing, not
// killed). Stop is idempotent.
func (w *Watch) Stop() (Stats, error) {
	w.stopOnce.Do(func() { w.stats, w.stopErr = w.stop() })
	return w.stats, w.stopErr
}

func (w *Watch) stop() (Stats, error) {
	t := w.t
	t.life.RLock()
	defer t.life.RUnlock()
	defer w.finish()
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return w.snapshot(Counters{}), ErrClosed
	}

	var errs []error
	if err := t.objs.TracedCgroups.Delete(w.cgroupID); err != nil {
		errs = append(errs, fmt.Errorf("disarm cgroup %d: %w", w.cgroupID, err))
	}
	var c Counters
	deadline := time.Now().Add(stopTimeout)
	for {
		t.drain()
		var err error
		if c, err = t.slotCounters(w.slot); err != nil {
			errs = append(errs, err)
			break
		}
		s := w.snapshot(c)
		if s.Delivered+s.Lost+s.DecodeErrors >= c.Matched || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if m, err := t.missed(); err != nil {
		errs = append(errs, err)
	} else {
		c.Missed = m - w.missed0
	}
	if err := t.Err(); err != nil {
		errs = append(errs, err)
	}

	for _, k := range w.allowed {
		if err := t.objs.AllowedFiles.Delete(k); err != nil {
			errs = append(errs, fmt.Errorf("remove allowed file: %w", err))
		}
	}
	errs = append(errs, t.forgetPending(w.cgroupID))

	t.mu.Lock()
	delete(t.byCookie, w.cookie)
	delete(t.byCgroup, w.cgroupID)
	t.slotUsed[w.slot] = false
	t.mu.Unlock()
	return w.snapshot(c), errors.Join(errs...)
}

func (w *Watch) snapshot(c Counters) Stats {
	w.mu.Lock()
	s := Stats{Counters: c, Delivered: w.delivered, DecodeErrors: w.decodeErrors.Load(), Denies: w.denies}
	w.mu.Unlock()
	if got := s.Delivered + s.Lost + s.DecodeErrors; got < c.Matched {
		s.Unaccounted = c.Matched - got
	}
	return s
}

// forgetPending removes the cgroup's entries left in the pending map (a
// non-leader thread's successful exec changes its pid_tgid before the
// exit tracepoint, which then cannot find the entry).
func (t *Tracer) forgetPending(cgroupID uint64) error {
	var (
		key   uint64
		val   execPendingExec
		stale []uint64
	)
	it := t.objs.Pending.Iterate()
	for it.Next(&key, &val) {
		if val.CgroupId == cgroupID {
			stale = append(stale, key)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("scan pending execs: %w", err)
	}
	for _, k := range stale {
		if err := t.objs.Pending.Delete(k); err != nil && !errors.Is(err, cebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove pending exec: %w", err)
		}
	}
	return nil
}
