package launcher

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"hookbox.dev/hookbox/ebpf"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/verify"
)

// TraceFile is the run record's exec trace: one event per line, then a
// final stats line.
const TraceFile = "trace.jsonl"

// One loaded tracer serves every run of this hookbox process.
var (
	tracerOnce   sync.Once
	sharedTracer *ebpf.Tracer
	tracerErr    error
)

// loadTracer loads the process's tracer once; later calls get the first
// call's tracer, whatever their opts (one run per hookbox process).
func loadTracer(opts ebpf.Options) (*ebpf.Tracer, error) {
	tracerOnce.Do(func() {
		if err := ebpf.EnsureTracefs(); err != nil {
			tracerErr = err
			return
		}
		// Best effort: without securityfs the tracer cannot tell whether
		// the BPF LSM is active and leaves its programs out (the run
		// then says ptrace-denial-unavailable).
		_ = ebpf.EnsureSecurityfs()
		sharedTracer, tracerErr = ebpf.Load(opts)
	})
	return sharedTracer, tracerErr
}

// releaseTracer closes the process's tracer if it loaded one (the detach
// waits for RCU grace periods: ~0.35 s here). Later loads fail.
func releaseTracer() {
	tracerOnce.Do(func() { tracerErr = ebpf.ErrClosed })
	if sharedTracer != nil {
		_ = sharedTracer.Close()
	}
}

// ExecTracer records the execs of a cgroup: a BPF tracer in this process,
// or a privileged helper serving a rootless hookbox (cmd/hookbox wires it).
type ExecTracer interface {
	// Watch arms the tracer on the cgroup whose cgroup2 directory is dir
	// and whose id is id.
	Watch(dir string, id uint64, policy ebpf.Policy) (ExecWatch, error)
}

// ExecWatch is one armed cgroup (see ebpf.Watch).
type ExecWatch interface {
	Events() <-chan ebpf.Event
	Stop() (ebpf.Stats, error)
}

// UnavailableError is a tracer that cannot run for a known reason: ID is
// the reason id (the verdict says tracer-unavailable:<ID>), Detail what to
// do about it.
type UnavailableError struct{ ID, Detail string }

func (e *UnavailableError) Error() string { return e.ID + ": " + e.Detail }

// localTracer is this process's BPF tracer.
type localTracer struct{ t *ebpf.Tracer }

func (l localTracer) Watch(_ string, id uint64, policy ebpf.Policy) (ExecWatch, error) {
	return l.t.Watch(id, policy)
}

// loadLocalTracer loads (once per process) the BPF tracer.
func loadLocalTracer(opts ebpf.Options) (ExecTracer, error) {
	t, err := loadTracer(opts)
	if err != nil {
		return nil, err
	}
	return localTracer{t}, nil
}

// tracing is the exec trace of one run.
type tracing struct {
	ready   chan struct{} // closed when the tracer is loaded (or failed to)
	tracer  ExecTracer
	loadErr error

	watch    ExecWatch
	ids      verify.FileIdentities
	consumed sync.WaitGroup
	file     *os.File
	out      *bufio.Writer // trace.jsonl, flushed when the watch ends
	// stopped: the watch is stopped and the record ended (stopTrace);
	// writeErr is why the record could not be written whole.
	stopped  bool
	writeErr error
}

// startTracer loads the tracer in the background, so its cost overlaps
// with preparing and creating the container (26–32 ms, measured on a
// 2-vCPU Debian 12 VM).
func (x *execution) startTracer() {
	if x.r.Trace.Mode == render.TraceOff {
		return
	}
	x.trace = &tracing{ready: make(chan struct{})}
	go func() {
		defer close(x.trace.ready)
		load := x.opts.Backend.Tracer
		if load == nil {
			load = func() (ExecTracer, error) { return loadLocalTracer(ebpf.Options{}) }
		}
		x.trace.tracer, x.trace.loadErr = load()
	}()
}

// armTracer watches the run's cgroup between task create and start: no
// exec happens in that cgroup before Start (runc init waits on its exec
// fifo), so the first event is the engine. It computes the identity of
// every program as the container sees it. An error is returned only with
// RequireTrace.
func (x *execution) armTracer(initPID int, cgroupDir string, cgroupID uint64) error {
	if x.trace == nil {
		return nil
	}
	<-x.trace.ready
	t := x.trace
	if t.loadErr == nil && cgroupID == 0 {
		t.loadErr = &UnavailableError{ID: ReasonNoRunCgroup, Detail: "the run has no cgroup2 directory to watch: " + x.noCgroup}
	}
	if t.loadErr != nil {
		if x.opts.RequireTrace {
			return fmt.Errorf("tracer unavailable (--require-trace): %w", t.loadErr)
		}
		return nil
	}
	// The identities are read through the container's root while the
	// tracer arms, unless enforce needs them for the watch's policy; the
	// verdict needs them only once the run is over, and Start waits for
	// both.
	enforce := x.r.Trace.Mode == render.TraceEnforce
	identities := start(func() (identified, error) {
		ids, allowed, err := ProgramIdentities("/proc/"+strconv.Itoa(initPID)+"/root", x.r)
		return identified{ids, allowed}, err
	})
	var policy ebpf.Policy
	if enforce {
		known, err := identities.wait()
		if err != nil {
			return err
		}
		policy = ebpf.Policy{Enforce: true, Allowed: known.allowed}
	}
	f, err := os.OpenFile(filepath.Join(x.dir, TraceFile), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return identities.failure(err)
	}
	t.file, t.out = f, bufio.NewWriterSize(f, 256<<10)
	w, watchErr := t.tracer.Watch(cgroupDir, cgroupID, policy)
	known, err := identities.wait()
	if err != nil {
		if watchErr == nil {
			w.Stop()
		}
		t.file, t.out = nil, nil
		f.Close()
		os.Remove(f.Name())
		return err
	}
	t.ids = known.ids
	data, err := recordJSON(t.ids)
	if err != nil {
		return err
	}
	x.writeRecord(IdentitiesFile, data)
	if err := watchErr; err != nil {
		t.loadErr = err
		// No trace record, as for a tracer that never loaded: an empty one
		// would read as a trace cut short.
		f.Close()
		os.Remove(f.Name())
		if x.opts.RequireTrace {
			return fmt.Errorf("tracer cannot watch the run (--require-trace): %w", err)
		}
		return nil
	}
	t.watch = w
	t.consumed.Add(1)
	go x.consumeTrace()
	return nil
}

// identified is ProgramIdentities' answer.
type identified struct {
	ids     verify.FileIdentities
	allowed []ebpf.FileID
}

// ProgramIdentities computes the identity of every program of r as the
// container whose root is root (/proc/<pid>/root of its init) sees it, and
// the identities enforce lets run: only what the render plans to exec (the
// init, the engine, the hook programs and shells, and trace.allow). Other
// tools are runfiles (hooks may need them as libraries or data) but may
// not be exec'd. The launcher and the node agent (nodeagent) both arm
// with it.
func ProgramIdentities(root string, r *render.Render) (verify.FileIdentities, []ebpf.FileID, error) {
	ids := verify.FileIdentities{}
	var allowed []ebpf.FileID
	if r.Init != nil {
		id, err := ebpf.FileIdentityIn(root, r.Init.Path)
		if err != nil {
			return nil, nil, fmt.Errorf("identity of the init %s in the container: %w", r.Init.Path, err)
		}
		ids[r.Init.Path] = verify.FileID{Dev: id.Dev, Ino: id.Ino}
		allowed = append(allowed, id)
	}
	for _, p := range r.Programs {
		id, err := ebpf.FileIdentityIn(root, p.Path)
		if err != nil {
			return nil, nil, fmt.Errorf("identity of %s in the container: %w", p.Path, err)
		}
		ids[p.Path] = verify.FileID{Dev: id.Dev, Ino: id.Ino}
		if mayExec(r, p) {
			allowed = append(allowed, id)
		}
	}
	return ids, allowed, nil
}

// mayExec: the render plans an exec of p.
func mayExec(r *render.Render, p render.Program) bool {
	for _, role := range p.Roles {
		if role == render.RoleEngine || role == render.RoleHook || role == render.RoleShell || role == render.RoleInterpreter {
			return true
		}
	}
	for _, a := range r.Trace.Allow {
		if a == p.Path {
			return true
		}
	}
	return false
}

// consumeTrace records every exec event, live.
func (x *execution) consumeTrace() {
	t := x.trace
	defer t.consumed.Done()
	for ev := range t.watch.Events() {
		line := ev.AppendJSON(nil)
		t.out.Write(line)
		t.out.WriteByte('\n')
		x.emit(Event{Type: EventExec, Exec: line})
	}
}

// verifyEvent is the judge's view of a tracer event.
func verifyEvent(ev ebpf.Event) verify.Event {
	out := verify.Event{
		Kind: string(ev.Kind), PID: int(ev.TGID), PPID: int(ev.PPID), Time: int64(ev.Time),
		Filename: ev.Filename, Argv: ev.ArgvStrings(), Truncated: ev.Truncated,
		Dev: ev.Dev, Ino: ev.Ino, Errno: int(ev.Errno), Killed: ev.Killed,
		Target: int(ev.Target), Mode: ev.Mode,
	}
	if ev.Flags&ebpf.FlagArgvUnreadable != 0 {
		out.Argv, out.Truncated = nil, true // nothing visible: not evidence of an argv
	}
	return out
}

// stopTrace disarms the watch once the run's processes are gone, drains
// the ring and ends trace.jsonl with the stats line. It judges nothing:
// teardown calls it, and judging a long trace must not eat into the
// deadline of the cleanup that follows (judgeTrace comes after teardown).
func (x *execution) stopTrace() {
	t := x.trace
	if t == nil || t.watch == nil || t.stopped {
		return
	}
	t.stopped = true
	stats, err := t.watch.Stop()
	t.consumed.Wait()
	if !stats.Denies.Ptrace {
		// No BPF LSM programs: seccomp still denies ptrace and
		// process_vm_*, but not /proc/<pid>/mem (docs/threat-model.md).
		x.result.Degraded = append(x.result.Degraded, ReasonPtraceDenialUnavailable)
	}
	t.out.Write(TraceStatsLine(stats, err))
	t.writeErr = errors.Join(t.out.Flush(), t.file.Close())
}

// judgeTrace judges the run's trace against the render, once teardown is
// over: it needs nothing but the record, and has no deadline. It judges
// what the record holds (ReadTrace), not what the tracer delivered in
// memory, so hookbox verify recomputes exactly this verdict and a record
// that could not be written whole is never confirmed.
func (x *execution) judgeTrace() {
	defer func() { x.result.Trace.Mode = x.r.Trace.Mode }()
	if x.r.Trace.Mode == render.TraceOff {
		x.result.Trace = verifyResult(verify.Verify(x.r, render.TraceOff, nil, verify.Stats{}, nil, x.result.Slots))
		return
	}
	t := x.trace
	if t == nil {
		return
	}
	if t.watch == nil {
		<-t.ready
		reason, detail := "not armed", ""
		var unavailable *UnavailableError
		switch {
		case errors.As(t.loadErr, &unavailable):
			reason, detail = unavailable.ID, unavailable.Detail
		case t.loadErr != nil:
			reason = shortReason(t.loadErr.Error())
		}
		x.result.Trace = verifyResult(verify.Verify(x.r, "", nil, verify.Stats{Attached: false, Reason: reason}, nil, x.result.Slots))
		x.result.Trace.Detail = detail
		return
	}
	x.stopTrace() // a no-op after teardown
	werr := t.writeErr
	events, judged, rerr := readTraceFile(filepath.Join(x.dir, TraceFile))
	if rerr != nil {
		// What the record holds cannot be read back: it proves nothing.
		events, judged = nil, verify.Stats{Attached: true, AttachedBeforeStart: true, Unfinished: true}
	}
	v := verify.Verify(x.r, "", events, judged, t.ids, x.result.Slots)
	x.result.Trace = verifyResult(v)
	x.result.Trace.Events = len(events)
	if werr != nil || rerr != nil {
		x.result.Trace.Detail = "the trace record could not be written whole: " + errors.Join(werr, rerr).Error()
	}
}

// shortReason keeps a reason id readable: the first line of the error.
func shortReason(s string) string {
	for i, c := range s {
		if c == '\n' {
			return s[:i]
		}
	}
	return s
}

func verifyResult(v verify.Verdict) TraceResult {
	return TraceResult{Status: v.Status, Reasons: v.Reasons, Diffs: v.Diffs, Matched: v.Matched}
}

// IdentitiesFile records, per program container path, the identity the
// mounted file had when the tracer was armed, so a verdict can be
// recomputed offline.
const IdentitiesFile = "identities.json"

// Reverify recomputes a run's verdict from its record (render.json,
// trace.jsonl, identities.json, result.json and its launch slot values)
// without touching the host.
func Reverify(recordDir string) (verify.Verdict, error) {
	var r render.Render
	if err := readJSON(filepath.Join(recordDir, RenderFile), &r); err != nil {
		return verify.Verdict{}, err
	}
	var res Result
	if err := readJSON(filepath.Join(recordDir, ResultFile), &res); err != nil {
		return verify.Verdict{}, err
	}
	return reverify(recordDir, &r, &res)
}

func reverify(recordDir string, r *render.Render, res *Result) (verify.Verdict, error) {
	if r.Trace.Mode == render.TraceOff {
		return verify.Verify(r, render.TraceOff, nil, verify.Stats{}, nil, res.Slots), nil
	}
	events, stats, err := readTraceFile(filepath.Join(recordDir, TraceFile))
	if errors.Is(err, os.ErrNotExist) {
		// Never armed: the recorded reasons say why.
		reason := "not armed"
		for _, rs := range res.Trace.Reasons {
			if rs == ReasonTracerNotRun {
				// The run ended before its tracer was even started.
				return verify.Verdict{Status: verify.StatusUnchecked, Reasons: []string{ReasonTracerNotRun}}, nil
			}
			if strings.HasPrefix(rs, verify.ReasonTracerUnavailable+":") {
				reason = strings.TrimPrefix(rs, verify.ReasonTracerUnavailable+":")
			}
		}
		return verify.Verify(r, "", nil, verify.Stats{Reason: reason}, nil, res.Slots), nil
	}
	if err != nil {
		return verify.Verdict{}, err
	}
	var ids verify.FileIdentities
	if err := readJSON(filepath.Join(recordDir, IdentitiesFile), &ids); err != nil {
		return verify.Verdict{}, err
	}
	return verify.Verify(r, "", events, stats, ids, res.Slots), nil
}

// TraceStatsLine is trace.jsonl's final line, newline included, for a
// watch that ended with stats and stopErr (ReadTrace checks the record
// against it).
func TraceStatsLine(stats ebpf.Stats, stopErr error) []byte {
	line := traceStatsLine{Kind: traceStatsKind, Stats: stats, Incomplete: stats.Incomplete()}
	if stopErr != nil {
		line.StopError = stopErr.Error()
	}
	b, _ := json.Marshal(line)
	return append(b, '\n')
}

// traceStatsKind is the kind of trace.jsonl's final line.
const traceStatsKind = "stats"

// traceStatsLine is trace.jsonl's final line: the watch's accounting.
type traceStatsLine struct {
	Kind       string     `json:"kind"`
	Stats      ebpf.Stats `json:"stats"`
	Incomplete []string   `json:"incomplete"`
	// StopError: the watch did not stop cleanly, so it cannot vouch for
	// completeness.
	StopError string `json:"stop_error,omitempty"`
	// Unwritten counts delivered events the writer could not encode,
	// which ReadTrace counts as lost. hookbox's writers encode every
	// event (Event.AppendJSON cannot fail) and leave it out.
	Unwritten int `json:"unwritten,omitempty"`
}

func readTraceFile(path string) ([]verify.Event, verify.Stats, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, verify.Stats{}, err
	}
	return ReadTrace(data)
}

// ReadTrace parses a trace record (trace.jsonl): one event per line, then
// the stats line. It returns the events and the evidence the judge needs,
// checking the record against its own stats line: the number of event
// lines must be what the tracer delivered, nothing may follow the stats
// line, and the counters must account for every event the kernel matched.
// The tracer's events carry no sequence number, so the count is what shows
// a deleted or added line. A record without its stats line (its writer
// stopped early; a last line cut short counts as not written) is
// Stats.Unfinished, a disagreement a Stats.Inconsistent entry: both keep
// the verdict from confirmed. Only a line that cannot be read at all is an
// error.
func ReadTrace(data []byte) ([]verify.Event, verify.Stats, error) {
	stats := verify.Stats{Attached: true, AttachedBeforeStart: true}
	var events []verify.Event
	var final *traceStatsLine
	inconsistent := map[string]bool{}
	lines := strings.Split(string(data), "\n")
	cut := lines[len(lines)-1] != "" // no newline after the last line
	if !cut {
		lines = lines[:len(lines)-1]
	}
	for i, line := range lines {
		// Most lines are events in the form the tracer writes, which
		// Event reads without reflection; anything else is told apart
		// by its kind.
		b := []byte(line)
		var ev ebpf.Event
		err := ev.UnmarshalJSON(b)
		var head struct {
			Kind string `json:"kind"`
		}
		if err != nil && json.Unmarshal(b, &head) == nil && head.Kind == traceStatsKind {
			if final != nil {
				inconsistent["after-stats"] = true
				continue
			}
			var s traceStatsLine
			if err = json.Unmarshal(b, &s); err == nil {
				final = &s
				continue
			}
		}
		switch {
		case err != nil && cut && i == len(lines)-1 && final == nil:
			// A write cut short: the stats line never came.
			continue
		case err != nil:
			return nil, verify.Stats{}, fmt.Errorf("%s line %d: %w", TraceFile, i+1, err)
		case final != nil:
			inconsistent["after-stats"] = true
			continue
		}
		events = append(events, verifyEvent(ev))
	}
	if final == nil {
		stats.Unfinished = true
		return events, stats, nil
	}
	s := final.Stats
	stats.Lost = s.Lost + s.Missed + s.Unaccounted + s.DecodeErrors + s.ReadErrors + s.PendingDropped + s.KillFailed + uint64(final.Unwritten)
	if final.StopError != "" {
		stats.Lost++ // a stop that failed cannot vouch for completeness
	}
	stats.Truncated = s.Truncated
	if uint64(len(events)+final.Unwritten) != s.Delivered {
		inconsistent["count"] = true
	}
	if s.Delivered+s.Lost+s.DecodeErrors+s.Unaccounted < s.Matched {
		inconsistent["stats"] = true
	}
	for what := range inconsistent {
		stats.Inconsistent = append(stats.Inconsistent, what)
	}
	slices.Sort(stats.Inconsistent)
	return events, stats, nil
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
