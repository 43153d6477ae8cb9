// Package verify judges a run: it compares the execs the tracer saw in the
// run's cgroup with the execs the Render planned, and returns a Verdict.
//
// verify owns the judgement and nothing else. It is pure: (render, events,
// tracer stats, file identities, launch slot values) → Verdict. It reads no
// file, no clock, no environment, and never runs anything, so `hookbox
// verify RUN_DIR` recomputes exactly the verdict the launcher computed.
// Events come from the ebpf package (converted into Event); identities from
// the launcher, which stats the runfiles it mounted; slot values from the
// launcher, which filled them into the hooks' configuration and recorded
// them (result.json "slots").
//
// # Verdicts (docs/contracts.md §5)
//
// Every event is judged, and each finding is either a contradiction (the
// trace shows something the render did not plan, or proves something planned
// did not happen) or an evidence gap (something needed to confirm is
// missing). The status is then:
//
//   - mismatch: at least one contradiction. Contradictions win over gaps:
//     an exec that was seen happened, whatever else was lost, so a run with
//     lost events and an unplanned exec is a mismatch, not unchecked.
//   - unchecked: no contradiction but at least one gap.
//   - confirmed: neither. This needs positive evidence for every rule: the
//     tracer attached before Start, zero lost events, a trace record that
//     agrees with its own final stats line (Stats.Unfinished and
//     Stats.Inconsistent: the gaps trace-incomplete and
//     trace-inconsistent:<what>), no truncated argv anywhere, the engine first with exact argv and known, equal identity,
//     every required hook seen, every other exec accounted for.
//
// Reasons lists every finding, contradictions and gaps alike, sorted and
// without duplicates; the status says which kind won. Diffs say, element by
// element, where a contradiction lies. Matched says which event satisfied
// which rule.
//
// Absence is judged only on complete evidence. "The engine was not first",
// "a required hook never ran" and "no events at all" are contradictions only
// when the tracer attached before Start, lost nothing and every event had a
// known kind; a required hook is also not reported missing while a
// truncated event might have been it. Otherwise absence is only a gap (the
// gaps that made the evidence incomplete are already in Reasons).
//
// Mode: off → unchecked/tracer-off without looking at anything else; an
// unknown mode → unchecked/trace-mode-unknown. observe, verify and enforce
// are judged alike: observe only means the launcher records the verdict and
// does not fail the run on mismatch, which is the caller's business.
//
// # Rules, in the order an exec event is tried
//
//  0. Init (renders with Init: hookbox-init is the container's PID 1 and
//     runs the engine). With complete evidence the first event of any kind
//     must be a successful exec of Init.Path (else init-not-first); in any
//     case the init is the first exec of that path. Its argv must equal
//     Init.Argv exactly (init-argv-differs) and its identity
//     ids[Init.Path] (init-binary-differs; unknown on either side: the gap
//     init-identity-unknown). A render without Init (recorded before the
//     init existed) is judged without this rule, the engine first.
//  1. Engine. With complete evidence the first event of any kind (with an
//     init: the event right after the init's) must be a successful exec of
//     Engine.Exec.Path (else engine-not-first), and it is judged as the
//     engine. Otherwise the engine is the first exec of that path (after
//     the init's) whose argv[0] is not a declared self-exec name. With an
//     init, the engine's parent must be the init (its PPID the init
//     event's PID, else engine-not-child-of-init). The
//     engine's argv must equal Engine.Exec.Argv element by element (launch
//     slots filled, see below) and its (Dev, Ino) must equal
//     ids[Engine.Exec.Path]; an unknown identity on either side is the gap
//     engine-identity-unknown.
//  2. Engine self-exec: argv[0] in Engine.SelfExecArgv0 and the identity of
//     the engine binary (whatever the filename: /proc/self/exe is common);
//     other arguments are free. argv[0] matches but an identity is unknown
//     and no later rule accepts the exec: gap exec-identity-unknown.
//  3. Hook chains: an exec equal to a hook's Chain[k] (path, argv with its
//     launch slots filled, identity when ids has it). Hooks are tried before the allow list, so
//     a hook's shell is judged as the hook when it runs the hook's command.
//     3b. Engine exec rules (Engine.Execs, from the engine's profile): an exec
//     whose Filename is the rule's path and whose argv matches its pattern
//     (exact elements, free positions, any further elements with Rest) and whose
//     identity is the engine's own (Binary engine: the engine's exe as it
//     ran) or the runfile's at the path (Binary path). A matching argv with
//     another identity is engine-exec-binary-differs; with an unknown
//     identity, exec-identity-unknown unless a later rule accepts it.
//  4. Allow list: Filename in Trace.Allow with any argv, provided the
//     identity, when both sides know it, is that program's (for a script
//     whose argv starts as its "#!" line makes it, the interpreter's: see
//     Shebang scripts below); or an exec whose identity is the identity of
//     an allowed program under another path (a symlink to it). An allowed
//     path with another identity is allowed-binary-differs.
//  5. Otherwise: Filename is a hook chain path → hook-argv-differs (or
//     hook-binary-differs) with the diffs of the closest chain element;
//     anything else → unexpected-exec.
//
// A killed exec (enforce) is always killed-exec, in addition to its own
// judgement: killed-exec alone means enforce killed something the render
// planned. A failed exec of the engine or of a hook chain path is
// failed-exec; other failed execs are PATH searches and the like (nothing
// ran) and are only listed in Matched as "failed-ignored".
//
// Refusals (the tracer's BPF LSM programs) are contradictions too, though
// nothing ran: the run attempted something the render does not plan. An
// exec refused in enforce mode (KindDenied: a file outside the planned
// set, a memfd) is denied-exec, the refusal counterpart of killed-exec;
// its argv is not recorded, so it is not judged further. A refused
// ptrace-class access to another process (KindPtraceDenied: ptrace
// attach, /proc/<pid>/mem, process_vm_*, pidfd_getfd, PTRACE_TRACEME) is
// denied-ptrace: no planned program injects into another.
//
// # Launch slots
//
// A planned exec's Slots (render.Exec) are launch slots: elements that are
// "{run_id}" or "{run_dir}", which the launcher filled at launch with the
// run's values and recorded. Each must be exactly its value, and a hook
// shell's command string must be exactly the canonical quoting
// (shellwords.Join) of the hook's argv with those values: any other value,
// the placeholder itself included, is a difference like any other. Given
// no value for a slot (nil slots: a record from before hookbox filled
// them), the slot matches any single element and the verdict gets the gap
// slot-values-unknown, so such a render is never confirmed; a command
// string is then accepted only as the canonical quoting of an argv that
// matches the hook's with any value in those slots. A slot index on an
// element that is no launch slot is the gap render-incomplete.
//
// An engine exec rule's Slots (render.EngineExec) are something else: free
// positions the engine fills at will (a tool shell's model-chosen
// command), with no value to check.
//
// # Interpreter hops
//
// A program whose render entry has a Shebang with a Hop (#!/usr/bin/env
// NAME, NAME found on the container's PATH) makes two execs in one
// process: the script's (Filename the script, argv [env, NAME, script,
// args...], exe env) and env's exec of NAME. Once an exec of such a script
// is accepted by any rule (engine, hook chain, engine exec, allow list),
// the next exec of the same process must be Hop with argv exactly the
// script exec's argv without env's own element ([NAME, script, args...])
// and the runfile's identity: else interpreter-hop-differs. A hop that
// never comes is interpreter-hop-missing on complete evidence. Failed
// execs in between (env's PATH search) are ignored as always.
//
// # Hook occurrences
//
// An occurrence of a hook is a sequence of exact matches of Chain[0..n-1]
// where each element after the first was exec'd, later, by the same process
// (a shell that execs its last simple command: dash and bash both do for
// `-c 'cmd'`) or by a descendant of it through the PPID chain of traced
// processes. A process that forked without exec leaves no event, so a chain
// through such a process is not linked. A required hook needs at least one
// occurrence (else hook-not-run); an exact match of a later chain element
// that is not linked is still planned (it is that hook's exact argv), it
// just does not count as an occurrence.
//
// # Argument forms verify accepts
//
//   - Shell commands with slots: a shell chain element whose argv holds the
//     command string that quotes the next element's argv (shellwords.Join)
//     matches exactly the Join of that argv with its launch slots filled
//     (see Launch slots). Any other text (another value, extra shell
//     syntax around a slot value) is a difference.
//   - Shebang scripts: when the program is a script, the kernel makes the
//     argv [interpreter, (the "#!" line's argument), script path,
//     argv[1:]...] and the exe is the interpreter. For a program whose
//     render entry has a Shebang, a planned exec of it (init, engine, hook
//     chain) also matches an event whose argv is exactly
//     [Shebang.Interpreter, Shebang.Arg (when set), script, argv[1:]...]
//     with the identity ids[Shebang.Interpreter], whether or not the
//     interpreter is declared anywhere; a different interpreter or argument
//     is a FieldInterpreter diff. An allowed script is accepted in that form
//     with the interpreter's identity (any further argv, as for any allowed
//     program). The rule's argv[0] is not visible in this form and is not
//     compared. For a render without Shebang entries (recorded before the
//     compiler read "#!" lines), an event whose argv[0] is a Program of the
//     render and whose argv has the script path at index 1 or 2 matches the
//     same way, the identity checked against that program's. An `env`
//     shebang (#!/usr/bin/env node) then makes env exec the interpreter: the
//     hop, above.
//   - Truncated argv: the last visible element may be cut. The visible
//     prefix is compared (the last visible element as a prefix); a
//     difference there is a contradiction, agreement is only the gap
//     argv-truncated. Any truncation (an event's flag or Stats.Truncated)
//     is the gap argv-truncated even for a program whose argv is free: "no
//     truncated argv" is a condition of confirmed (docs/threat-model.md).
//
// Diff.Index is an index into the render's argv (the want side), also in
// shebang form; -1 for findings about the exec as a whole.
//
// What verify does not do: it does not check that an allowed program's
// argv is harmless, nor order between hooks, nor how often a hook ran
// beyond "at least once when required".
package verify

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"hookbox.dev/hookbox/internal/shellwords"
	"hookbox.dev/hookbox/render"
)

// Event kinds.
const (
	KindExec         = "exec"          // execve succeeded
	KindFailed       = "failed"        // execve returned an error
	KindDenied       = "denied"        // enforce refused the exec (EPERM): nothing ran
	KindPtraceDenied = "ptrace-denied" // a ptrace-class access to another process was refused
)

// knownKind: the judge knows what the kind records.
func knownKind(k string) bool {
	return k == KindExec || k == KindFailed || k == KindDenied || k == KindPtraceDenied
}

// Status is a verdict's outcome.
type Status string

// Verdict statuses.
const (
	StatusConfirmed Status = "confirmed"
	StatusMismatch  Status = "mismatch"
	StatusUnchecked Status = "unchecked"
)

// Reasons that are evidence gaps: they make a verdict unchecked.
const (
	ReasonTracerOff             = "tracer-off"
	ReasonTraceModeUnknown      = "trace-mode-unknown"
	ReasonTracerUnavailable     = "tracer-unavailable" // written "tracer-unavailable:<Stats.Reason>"
	ReasonTracerLate            = "tracer-late"
	ReasonEventsLost            = "events-lost"
	ReasonArgvTruncated         = "argv-truncated"
	ReasonEngineIdentityUnknown = "engine-identity-unknown"
	ReasonInitIdentityUnknown   = "init-identity-unknown"
	ReasonExecIdentityUnknown   = "exec-identity-unknown"
	ReasonEventKindUnknown      = "event-kind-unknown"
	ReasonRenderIncomplete      = "render-incomplete"
	// ReasonSlotValuesUnknown: the render has launch slots and the run's
	// values for them were not given (a record from before hookbox filled
	// and recorded them), so a slot element cannot be checked.
	ReasonSlotValuesUnknown = "slot-values-unknown"
	// ReasonTraceIncomplete: the trace record has no final stats line (its
	// writer stopped early), so nothing vouches for its completeness.
	ReasonTraceIncomplete = "trace-incomplete"
	// ReasonTraceInconsistent: the trace record disagrees with its own
	// stats line; written "trace-inconsistent:<Stats.Inconsistent entry>".
	ReasonTraceInconsistent = "trace-inconsistent"
)

// Reasons that are contradictions: they make a verdict mismatch.
const (
	ReasonNoEvents             = "no-events"
	ReasonInitNotFirst         = "init-not-first"
	ReasonInitArgvDiffers      = "init-argv-differs"
	ReasonInitBinaryDiffers    = "init-binary-differs"
	ReasonEngineNotInitChild   = "engine-not-child-of-init"
	ReasonEngineNotFirst       = "engine-not-first"
	ReasonEngineArgvDiffers    = "engine-argv-differs"
	ReasonEngineBinaryDiffers  = "engine-binary-differs"
	ReasonHookNotRun           = "hook-not-run"
	ReasonHookArgvDiffers      = "hook-argv-differs"
	ReasonHookBinaryDiffers    = "hook-binary-differs"
	ReasonAllowedBinaryDiffers = "allowed-binary-differs"
	ReasonUnexpectedExec       = "unexpected-exec"
	ReasonFailedExec           = "failed-exec"
	ReasonEngineExecDiffers    = "engine-exec-binary-differs"
	ReasonHopDiffers           = "interpreter-hop-differs"
	ReasonHopMissing           = "interpreter-hop-missing"
	ReasonKilledExec           = "killed-exec"
	ReasonDeniedExec           = "denied-exec"
	ReasonDeniedPtrace         = "denied-ptrace"
)

// Diff fields.
const (
	FieldFilename    = "filename"    // the exec's path
	FieldInterpreter = "interpreter" // a script's interpreter or its "#!" argument (shebang form)
	FieldArgc        = "argc"        // argv length
	FieldArgv        = "argv"        // one argv element (Index)
	FieldIdentity    = "identity"    // (dev, ino) as "dev:ino"
	FieldFirstEvent  = "first-event" // what came first instead of the init or engine
	FieldParent      = "ppid"        // the engine's parent pid (want: the init's)
	FieldExec        = "exec"        // the exec as a whole (unexpected, killed, denied)
	FieldAccess      = "access"      // a refused ptrace-class access (Got: who, to whom)
	FieldErrno       = "errno"       // a failed exec
	FieldOccurrences = "occurrences" // how often a hook ran
	FieldOmitted     = "omitted"     // diffs left out (Got is the count)
)

// Limits that keep a verdict readable after an exec storm.
const (
	maxDiffs         = 256 // per verdict; the rest are counted in one FieldOmitted diff
	maxLengthDiffs   = 8   // extra or missing argv elements listed per event
	maxMatchedEvents = 8   // events listed per Match
	maxAncestry      = 64  // PPID hops searched when linking a hook chain
	maxDescribe      = 1024
)

// Event is one execve seen in the run's cgroup, in the tracer's words (the
// ebpf package's Event, converted). An exec's Argv is the argv the kernel
// built (for a #! script: interpreter first), Filename the path execve got
// (for a script: the script), Dev/Ino the exe (for a script: the
// interpreter). A tracer that could not read an argv reports it empty with
// Truncated set; one that could not read the identity reports 0.
type Event struct {
	Kind      string   `json:"kind"` // KindExec, KindFailed, KindDenied, KindPtraceDenied
	PID       int      `json:"pid"`
	PPID      int      `json:"ppid"`
	Time      int64    `json:"time"`     // ns, monotonic; events are given in time order
	Filename  string   `json:"filename"` // path as passed to execve
	Argv      []string `json:"argv"`     // exact argv (empty elements preserved)
	Truncated bool     `json:"truncated,omitempty"`
	Dev       uint64   `json:"dev,omitempty"` // identity of the executed file (exe);
	Ino       uint64   `json:"ino,omitempty"` // 0 when unknown (failed execs)
	Errno     int      `json:"errno,omitempty"`
	Killed    bool     `json:"killed,omitempty"` // enforce mode killed it
	// Target and Mode (KindPtraceDenied): the process the access was
	// for, and the PTRACE_MODE_* bits asked for (0: PTRACE_TRACEME, the
	// target being the would-be tracer).
	Target int    `json:"target,omitempty"`
	Mode   uint32 `json:"mode,omitempty"`
}

// Stats is what the tracer says about its own coverage.
type Stats struct {
	Attached            bool   `json:"attached"`
	AttachedBeforeStart bool   `json:"attached_before_start"`
	Lost                uint64 `json:"lost"`
	Truncated           uint64 `json:"truncated"` // argvs cut by the tracer's cap
	Reason              string `json:"reason,omitempty"`
	// Unfinished: the events come from a trace record without its final
	// stats line (the gap trace-incomplete): Lost and Truncated are then
	// unknown, not zero.
	Unfinished bool `json:"unfinished,omitempty"`
	// Inconsistent lists how the trace record disagrees with its own stats
	// line ("count": event lines other than delivered; "after-stats": lines
	// after it; "stats": counters that account for fewer events than the
	// kernel matched), each the gap trace-inconsistent:<entry>.
	Inconsistent []string `json:"inconsistent,omitempty"`
}

// FileID identifies a file: device and inode. An Ino of 0 means unknown.
type FileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

func (id FileID) known() bool { return id.Ino != 0 }

func (id FileID) String() string {
	if !id.known() {
		return "unknown"
	}
	return fmt.Sprintf("%d:%d", id.Dev, id.Ino)
}

// FileIdentities maps a container path to the identity of the runfile the
// launcher mounted there.
type FileIdentities map[string]FileID

func (ids FileIdentities) lookup(path string) FileID {
	id := ids[path] // a nil map reads as empty
	if !id.known() {
		return FileID{}
	}
	return id
}

// Verdict is the judgement of one run.
type Verdict struct {
	Status  Status   `json:"status"`  // confirmed | mismatch | unchecked
	Reasons []string `json:"reasons"` // stable ids, sorted, never null
	Diffs   []Diff   `json:"diffs,omitempty"`
	Matched []Match  `json:"matched,omitempty"`
}

// Diff is one difference between what the render planned and what ran.
type Diff struct {
	Rule     string `json:"rule"`  // "engine", "hook:<name>/chain[k]", "allow:<path>", "unexpected", …
	Field    string `json:"field"` // one of the Field constants
	Index    int    `json:"index"` // argv index on the render's side, or -1
	Want     string `json:"want"`
	Got      string `json:"got"`
	EventPID int    `json:"pid,omitempty"` // 0 for findings about no event
}

// Match says which events satisfied a rule. Rules: "init", "engine",
// "engine-self-exec:<argv0>", "hook:<name>/chain[k]" (an exact match of one
// chain element), "hook:<name>" (linked occurrences of the whole chain),
// "allow:<path>", and, for events that decided nothing, "failed-ignored",
// "truncated-undecided" and "identity-undecided".
type Match struct {
	Rule   string     `json:"rule"`
	Count  int        `json:"count"`
	Events []EventRef `json:"events"` // the first few, in time order
}

// EventRef points at an event: its position in the slice given to Verify.
type EventRef struct {
	Index int `json:"index"`
	PID   int `json:"pid"`
}

// Verify judges events against r. mode is r.Trace.Mode unless the caller
// overrides it; "" means r.Trace.Mode. slots are the launch values the
// launcher filled into the run's hooks (the run record's "slots"); nil when
// unknown. It never panics on any input, does not modify its arguments,
// and returns the same Verdict for the same arguments.
func Verify(r *render.Render, mode render.TraceMode, events []Event, stats Stats, ids FileIdentities, slots render.SlotValues) Verdict {
	return verify(r, mode, events, stats, ids, slots, judgeOptions{})
}

func verify(r *render.Render, mode render.TraceMode, events []Event, stats Stats, ids FileIdentities, slots render.SlotValues, opts judgeOptions) Verdict {
	if r == nil {
		return unchecked(ReasonRenderIncomplete)
	}
	if mode == "" {
		mode = r.Trace.Mode
	}
	switch mode {
	case render.TraceOff:
		return unchecked(ReasonTracerOff)
	case render.TraceObserve, render.TraceVerify, render.TraceEnforce:
	default:
		return unchecked(ReasonTraceModeUnknown)
	}
	if r.Engine.Exec.Path == "" || len(r.Engine.Exec.Argv) == 0 ||
		r.Init != nil && (r.Init.Path == "" || len(r.Init.Argv) == 0) {
		return unchecked(ReasonRenderIncomplete)
	}
	j := newJudge(r, events, ids, slots, opts)
	j.evidence(stats)
	j.judgeInit()
	j.judgeEngine()
	j.judgeEvents()
	j.judgeHooks()
	return j.verdict()
}

func unchecked(reason string) Verdict {
	return Verdict{Status: StatusUnchecked, Reasons: []string{reason}}
}

// timedEvent is an event with its position in the caller's slice.
type timedEvent struct {
	Event
	index int
}

func (e *timedEvent) id() FileID {
	id := FileID{Dev: e.Dev, Ino: e.Ino}
	if !id.known() {
		return FileID{}
	}
	return id
}

func (e *timedEvent) ref() EventRef { return EventRef{Index: e.index, PID: e.PID} }

// engineExecRule is one of the engine's own execs (render.EngineExec).
type engineExecRule struct {
	matcher *execMatcher
	binary  string
}

// pendingHop is the exec an env interpreter must make next in its process:
// the program it found on PATH, with the script's argv minus env's own.
type pendingHop struct {
	script string
	after  int // position of the script's exec
	want   *execMatcher
}

type judge struct {
	opts   judgeOptions
	r      *render.Render
	ids    FileIdentities
	slots  render.SlotValues
	events []timedEvent // in time order

	programs  map[string]bool
	allow     map[string]bool
	allowIDs  map[FileID]string
	selfExec  map[string]bool
	hookPaths map[string]bool

	init        *execMatcher // nil for a render without an init
	engine      *execMatcher
	engineExecs []engineExecRule
	scripts     map[string]*render.Shebang // programs that are "#!" scripts, by container path
	// hops are the env interpreter hops still expected, by pid: the next
	// exec of that process must be this one.
	hops  map[int]pendingHop
	hooks []*hookRule
	// chainElems are the elements of every distinct hook chain, in render
	// order; chainByShape finds a chain by its matchers' shape and
	// chainIndex finds the elements an event may match (chains.go).
	chainElems   []chainElem
	chainByShape map[string]*hookChain
	chainIndex   chainIndex
	candidateBuf []int
	elemBuf      []chainElem
	initAt       int    // position of the init event in events, -1 if none
	engineAt     int    // position of the engine event in events, -1 if none
	engineID     FileID // identity self-execs must have

	complete       bool // absence can be judged
	unknownKinds   bool
	parent         map[int]int // pid → ppid, from the latest event of pid
	contradictions map[string]bool
	gaps           map[string]bool
	diffs          []Diff
	omitted        int
	matched        map[string]*Match
}

func newJudge(r *render.Render, events []Event, ids FileIdentities, slots render.SlotValues, opts judgeOptions) *judge {
	j := &judge{
		opts:           opts,
		chainByShape:   map[string]*hookChain{},
		r:              r,
		ids:            ids,
		slots:          slots,
		programs:       map[string]bool{},
		allow:          map[string]bool{},
		allowIDs:       map[FileID]string{},
		selfExec:       map[string]bool{},
		hookPaths:      map[string]bool{},
		scripts:        map[string]*render.Shebang{},
		hops:           map[int]pendingHop{},
		initAt:         -1,
		engineAt:       -1,
		parent:         map[int]int{},
		contradictions: map[string]bool{},
		gaps:           map[string]bool{},
		matched:        map[string]*Match{},
	}
	j.events = make([]timedEvent, len(events))
	for i, e := range events {
		j.events[i] = timedEvent{Event: e, index: i}
	}
	// The tracer delivers events in time order; a stable sort costs little
	// and keeps the judgement right if a caller merged per-CPU streams.
	slices.SortStableFunc(j.events, func(a, b timedEvent) int { return cmp.Compare(a.Time, b.Time) })

	for _, p := range r.Programs {
		j.programs[p.Path] = true
		if p.Shebang != nil {
			j.scripts[p.Path] = p.Shebang
		}
	}
	for _, x := range r.Engine.Execs {
		m := newExecMatcher("engine-exec:"+x.Name, x.Path, x.Argv, x.Slots)
		m.rest = x.Rest
		j.engineExecs = append(j.engineExecs, engineExecRule{matcher: m, binary: x.Binary})
	}
	for _, name := range r.Engine.SelfExecArgv0 {
		j.selfExec[name] = true
	}
	// Allowed identities, in sorted path order so an identity shared by two
	// allowed paths always names the same one.
	allow := slices.Clone(r.Trace.Allow)
	slices.Sort(allow)
	for _, p := range allow {
		j.allow[p] = true
		if id := ids.lookup(p); id.known() {
			if _, dup := j.allowIDs[id]; !dup {
				j.allowIDs[id] = p
			}
		}
	}
	j.engine = j.plannedMatcher("engine", r.Engine.Exec, nil)
	if r.Init != nil {
		j.init = j.plannedMatcher("init", *r.Init, nil)
	}
	for _, h := range r.Hooks {
		if len(h.Chain) == 0 {
			if h.Required {
				j.gap(ReasonRenderIncomplete)
			}
			continue
		}
		hr := &hookRule{name: h.Name, required: h.Required}
		var elems []*execMatcher
		for k, e := range h.Chain {
			var next *render.Exec
			if k+1 < len(h.Chain) {
				next = &h.Chain[k+1]
			}
			rule := fmt.Sprintf("hook:%s/chain[%d]", h.Name, k)
			hr.rules = append(hr.rules, rule)
			elems = append(elems, j.plannedMatcher(rule, e, next))
			j.hookPaths[e.Path] = true
		}
		j.addChain(hr, elems)
	}
	j.chainIndex = newChainIndex(j.chainElems)
	return j
}

// plannedMatcher is the matcher of a planned exec (init, engine, hook
// chain element) with its launch slots filled from the run's values: a
// slot element is exactly its value, and a shell command string that
// quotes next (the following chain element) is exactly the quoting of next
// with its values. A slot without a value stays free (any single
// element), with the gap slot-values-unknown.
func (j *judge) plannedMatcher(rule string, e render.Exec, next *render.Exec) *execMatcher {
	argv, free := j.fill(e)
	m := newExecMatcher(rule, e.Path, argv, free)
	m.script = j.scripts[e.Path]
	if next == nil || len(next.Slots) == 0 {
		return m
	}
	quoted := shellwords.Join(next.Argv)
	nextArgv, nextFree := j.fill(*next)
	for i, a := range e.Argv {
		if a != quoted || m.slot[i] {
			continue
		}
		if len(nextFree) == 0 {
			m.argv[i] = shellwords.Join(nextArgv)
		} else {
			m.cmd, m.cmdArgv, m.cmdSlot = i, nextArgv, slotMask(len(nextArgv), nextFree)
		}
		break
	}
	return m
}

// fill returns e's argv with each launch slot that has a value replaced
// by it, and the positions left free: slots without a value, and slot
// indices on an element that is no launch slot (a malformed render).
func (j *judge) fill(e render.Exec) (argv []string, free []int) {
	argv = slices.Clone(e.Argv)
	for _, i := range e.Slots {
		if i < 0 || i >= len(argv) || slices.Contains(free, i) {
			continue
		}
		name, ok := render.SlotName(e.Argv[i])
		value, known := j.slots[name]
		switch {
		case !ok || !slices.Contains(render.LaunchSlots, name):
			j.gap(ReasonRenderIncomplete)
		case !known:
			j.gap(ReasonSlotValuesUnknown)
		default:
			argv[i] = value
			continue
		}
		free = append(free, i)
	}
	return argv, free
}

func (j *judge) gap(reason string)        { j.gaps[reason] = true }
func (j *judge) contradict(reason string) { j.contradictions[reason] = true }
func (j *judge) contradictAll(rs ...string) {
	for _, r := range rs {
		j.contradict(r)
	}
}

func (j *judge) diff(d Diff) {
	if len(j.diffs) >= maxDiffs {
		j.omitted++
		return
	}
	j.diffs = append(j.diffs, d)
}

func (j *judge) match(rule string, e *timedEvent) {
	m := j.matched[rule]
	if m == nil {
		m = &Match{Rule: rule}
		j.matched[rule] = m
	}
	m.Count++
	if len(m.Events) < maxMatchedEvents {
		m.Events = append(m.Events, e.ref())
	}
}

// evidence records the gaps in the tracer's coverage and decides whether
// absence can be judged.
func (j *judge) evidence(s Stats) {
	switch {
	case !s.Attached:
		why := s.Reason
		if why == "" {
			why = "unknown"
		}
		j.gap(ReasonTracerUnavailable + ":" + why)
	case !s.AttachedBeforeStart:
		j.gap(ReasonTracerLate)
	}
	if s.Lost > 0 {
		j.gap(ReasonEventsLost)
	}
	if s.Unfinished {
		j.gap(ReasonTraceIncomplete)
	}
	for _, what := range s.Inconsistent {
		j.gap(ReasonTraceInconsistent + ":" + what)
	}
	truncated := s.Truncated > 0
	for i := range j.events {
		e := &j.events[i]
		truncated = truncated || e.Truncated
		if !knownKind(e.Kind) {
			j.unknownKinds = true
		}
	}
	if truncated {
		j.gap(ReasonArgvTruncated)
	}
	if j.unknownKinds {
		j.gap(ReasonEventKindUnknown)
	}
	j.complete = s.Attached && s.AttachedBeforeStart && s.Lost == 0 && !j.unknownKinds && !s.Unfinished && len(s.Inconsistent) == 0
}

// hasExec reports whether any event is a successful exec.
func (j *judge) hasExec() bool {
	for i := range j.events {
		if j.events[i].Kind == KindExec {
			return true
		}
	}
	return false
}

// atStart reports whether the event at pos is a successful exec of path;
// if not, it records the contradiction reason with a first-event diff.
func (j *judge) atStart(pos int, rule, path, reason string) bool {
	if pos >= len(j.events) {
		j.contradict(reason)
		j.diff(Diff{Rule: rule, Field: FieldFirstEvent, Index: -1, Want: path, Got: "no exec"})
		return false
	}
	e := &j.events[pos]
	if e.Kind == KindExec && e.Filename == path {
		return true
	}
	got := e.Filename
	if e.Kind != KindExec {
		got += " (" + e.Kind + ")"
	}
	j.contradict(reason)
	j.diff(Diff{Rule: rule, Field: FieldFirstEvent, Index: -1, Want: path, Got: got, EventPID: e.PID})
	return false
}

// judgeInit finds the init's event and judges it (rule 0).
func (j *judge) judgeInit() {
	if j.init == nil || !j.hasExec() {
		return // no exec at all: judgeEngine reports it
	}
	if j.complete && j.atStart(0, "init", j.init.path, ReasonInitNotFirst) {
		j.initAt = 0
	}
	for i := 0; j.initAt < 0 && i < len(j.events); i++ {
		if e := &j.events[i]; e.Kind == KindExec && e.Filename == j.init.path {
			j.initAt = i
		}
	}
	if j.initAt < 0 {
		return
	}
	e := &j.events[j.initAt]
	res := j.init.match(&e.Event, j.ids, j.programs)
	if !res.idKnown {
		j.gap(ReasonInitIdentityUnknown)
	}
	switch res.outcome {
	case matchYes:
		j.match("init", e)
	case matchNo:
		j.contradictAll(reasonsFor(res.diffs, ReasonInitArgvDiffers, ReasonInitBinaryDiffers)...)
		j.addDiffs(res.diffs, e.PID)
	}
}

// judgeEngine finds the engine's event and judges it.
func (j *judge) judgeEngine() {
	first := j.engine
	if j.init != nil {
		first = j.init
	}
	if !j.hasExec() {
		if j.complete {
			j.contradict(ReasonNoEvents)
			j.diff(Diff{Rule: first.rule, Field: FieldFirstEvent, Index: -1, Want: first.path, Got: "no exec"})
		}
		return
	}
	// The engine's place with complete evidence: first, or right after
	// the init. An init that is missing or not first is already a
	// contradiction; the engine is then only searched for.
	start := 0
	if j.init != nil {
		start = j.initAt + 1
	}
	if j.complete && (j.init == nil || j.initAt == 0) && j.atStart(start, "engine", j.engine.path, ReasonEngineNotFirst) {
		j.engineAt = start
	}
	if j.engineAt < 0 {
		// Not in its place, or the start of the trace is not known to be
		// the start of the run: the engine is its first plausible exec.
		for i := start; i < len(j.events); i++ {
			e := &j.events[i]
			if e.Kind == KindExec && e.Filename == j.engine.path &&
				(len(e.Argv) == 0 || !j.selfExec[e.Argv[0]] || e.Argv[0] == j.engine.argv[0]) {
				j.engineAt = i
				break
			}
		}
	}
	j.engineID = j.ids.lookup(j.engine.path)
	if j.engineAt < 0 {
		return
	}
	e := &j.events[j.engineAt]
	if j.initAt >= 0 {
		if init := &j.events[j.initAt]; e.PPID != init.PID {
			j.contradict(ReasonEngineNotInitChild)
			j.diff(Diff{Rule: "engine", Field: FieldParent, Index: -1, Want: strconv.Itoa(init.PID), Got: strconv.Itoa(e.PPID), EventPID: e.PID})
		}
	}
	res := j.engine.match(&e.Event, j.ids, j.programs)
	if !res.idKnown {
		j.gap(ReasonEngineIdentityUnknown)
	}
	switch res.outcome {
	case matchYes:
		j.match("engine", e)
	case matchNo:
		j.contradictAll(reasonsFor(res.diffs, ReasonEngineArgvDiffers, ReasonEngineBinaryDiffers)...)
		j.addDiffs(res.diffs, e.PID)
	}
	if res.outcome != matchNo {
		j.expectHop(j.engineAt, e)
	}
	// The engine's exe as it ran: for a script engine, its interpreter,
	// which is what a self-exec through /proc/self/exe runs again.
	if res.outcome != matchNo && e.id().known() {
		j.engineID = e.id()
	}
}

// judgeEvents judges every event but the engine's, in time order.
func (j *judge) judgeEvents() {
	for i := range j.events {
		e := &j.events[i]
		if e.Killed {
			j.contradict(ReasonKilledExec)
			j.diff(Diff{Rule: "killed", Field: FieldExec, Index: -1, Got: describe(&e.Event), EventPID: e.PID})
		}
		switch {
		case e.Kind == KindFailed:
			j.judgeFailed(e)
		case e.Kind == KindDenied:
			j.contradict(ReasonDeniedExec)
			j.diff(Diff{Rule: "denied", Field: FieldExec, Index: -1, Got: e.Filename + " (" + e.id().String() + ")", EventPID: e.PID})
		case e.Kind == KindPtraceDenied:
			j.contradict(ReasonDeniedPtrace)
			j.diff(Diff{Rule: "denied-ptrace", Field: FieldAccess, Index: -1, Got: describeAccess(&e.Event), EventPID: e.PID})
		case e.Kind != KindExec:
			// Already a gap (event-kind-unknown); nothing to judge.
		case i == j.engineAt || i == j.initAt:
			// Judged by judgeEngine and judgeInit.
		default:
			j.judgeExec(i, e)
		}
		j.parent[e.PID] = e.PPID
	}
	for _, h := range j.hops {
		// The interpreter never ran the script's program: with complete
		// evidence that is what happened; otherwise the hop may be lost.
		if j.complete {
			j.contradict(ReasonHopMissing)
			j.diff(Diff{Rule: "hop:" + h.script, Field: FieldExec, Index: -1, Want: h.want.path, Got: "no exec"})
		}
	}
}

// expectHop records, for an accepted exec of an env "#!" script (filename
// the script, argv [env, NAME, script, args...]), that its process must
// exec the program env finds next: render.Shebang.Hop with argv
// [NAME, script, args...], exactly (env runs execvp(argv[1], argv+1)).
func (j *judge) expectHop(pos int, e *timedEvent) {
	sc := j.scripts[e.Filename]
	if sc == nil || sc.Hop == "" || len(e.Argv) < 2 || e.Argv[0] != sc.Interpreter {
		return
	}
	want := newExecMatcher("hop:"+e.Filename, sc.Hop, e.Argv[1:], nil)
	j.hops[e.PID] = pendingHop{script: e.Filename, after: pos, want: want}
}

// judgeHop judges the exec that must be an env interpreter's hop: the
// program on PATH, the argv env was given, the identity of that runfile.
func (j *judge) judgeHop(h pendingHop, e *timedEvent) {
	delete(j.hops, e.PID)
	res := h.want.match(&e.Event, j.ids, nil)
	if !res.idKnown && res.outcome != matchNo {
		j.gap(ReasonExecIdentityUnknown)
	}
	switch res.outcome {
	case matchYes:
		j.match(h.want.rule, e)
	case matchMaybe:
		j.match("truncated-undecided", e)
	case matchNo:
		j.contradict(ReasonHopDiffers)
		j.addDiffs(res.diffs, e.PID)
	}
}

func (j *judge) judgeFailed(e *timedEvent) {
	if e.Filename == j.engine.path || j.hookPaths[e.Filename] || j.init != nil && e.Filename == j.init.path {
		j.contradict(ReasonFailedExec)
		j.diff(Diff{Rule: "failed", Field: FieldErrno, Index: -1, Want: "0", Got: strconv.Itoa(e.Errno) + " " + e.Filename, EventPID: e.PID})
		return
	}
	j.match("failed-ignored", e)
}

func (j *judge) judgeExec(pos int, e *timedEvent) {
	// An env interpreter's hop is judged as exactly that.
	if h, ok := j.hops[e.PID]; ok && h.after < pos {
		j.judgeHop(h, e)
		return
	}

	// 2. The engine re-executing itself under a declared name.
	identityUnknown := false
	if len(e.Argv) > 0 && j.selfExec[e.Argv[0]] {
		switch {
		case !j.engineID.known() || !e.id().known():
			identityUnknown = true
		case j.engineID == e.id():
			j.match("engine-self-exec:"+e.Argv[0], e)
			return
		}
	}

	// 3. Hook chains.
	sighted := newSighting(&e.Event, j.ids, j.programs)
	hit, maybe := j.judgeHookChains(pos, e, &sighted)
	if hit {
		j.expectHop(pos, e)
		return
	}

	// 3b. The engine's own execs, from its profile.
	if done, unknown := j.judgeEngineExec(pos, e); done {
		return
	} else if unknown {
		identityUnknown = true
	}

	// 4. The allow list, by path and by identity.
	if j.allow[e.Filename] {
		want, wantText := j.ids.lookup(e.Filename), ""
		if sc := j.scripts[e.Filename]; sc != nil {
			// The kernel ran the script by its "#!" line when the argv
			// says so: the exe is then the interpreter.
			var head diffList
			if whole := headDiffs(&head, "", scriptHead(sc, e.Filename), &e.Event); head.n == 0 && (whole || e.Truncated) {
				want, wantText = j.ids.lookup(sc.Interpreter), " (interpreter "+sc.Interpreter+")"
			}
		}
		if !want.known() || !e.id().known() || want == e.id() {
			j.match("allow:"+e.Filename, e)
			j.expectHop(pos, e)
			return
		}
		if p, ok := j.allowIDs[e.id()]; ok {
			j.match("allow:"+p, e)
			return
		}
		j.contradict(ReasonAllowedBinaryDiffers)
		j.diff(Diff{Rule: "allow:" + e.Filename, Field: FieldIdentity, Index: -1, Want: want.String() + wantText, Got: e.id().String(), EventPID: e.PID})
		return
	}
	if p, ok := j.allowIDs[e.id()]; ok && e.id().known() {
		j.match("allow:"+p, e)
		return
	}

	// 5. Nothing accepts it: undecidable, near a hook, or unexpected.
	switch {
	case maybe:
		// A truncated argv consistent with a hook: argv-truncated is
		// already a gap.
		j.match("truncated-undecided", e)
	case identityUnknown:
		j.gap(ReasonExecIdentityUnknown)
		j.match("identity-undecided", e)
	default:
		// Only now are the differences worth computing.
		if nearest := j.nearestHook(e, &sighted); nearest != nil {
			j.contradictAll(reasonsFor(nearest.diffs, ReasonHookArgvDiffers, ReasonHookBinaryDiffers)...)
			j.addDiffs(nearest.diffs, e.PID)
			return
		}
		j.contradict(ReasonUnexpectedExec)
		j.diff(Diff{Rule: "unexpected", Field: FieldExec, Index: -1, Got: describe(&e.Event), EventPID: e.PID})
	}
}

// judgeEngineExec tries the engine's own exec rules. done: a rule accepted
// the exec or found it a contradiction. unknown: a rule's argv matched but
// an identity was unknown, so the exec is undecided unless a later rule
// accepts it.
func (j *judge) judgeEngineExec(pos int, e *timedEvent) (done, unknown bool) {
	for _, x := range j.engineExecs {
		if e.Filename != x.matcher.path {
			continue
		}
		wantID := j.ids.lookup(x.matcher.path)
		if x.binary == render.BinaryEngine {
			wantID = j.engineID
		}
		res := x.matcher.matchForm(&e.Event, 0, FileID{}, tally{})
		if res.outcome == matchNo {
			continue
		}
		switch {
		case !wantID.known() || !e.id().known():
			unknown = true
		case wantID != e.id():
			j.contradict(ReasonEngineExecDiffers)
			j.diff(Diff{Rule: x.matcher.rule, Field: FieldIdentity, Index: -1, Want: wantID.String(), Got: e.id().String(), EventPID: e.PID})
			return true, false
		case res.outcome == matchMaybe:
			j.match("truncated-undecided", e)
			return true, false
		default:
			j.match(x.matcher.rule, e)
			j.expectHop(pos, e)
			return true, false
		}
	}
	return false, unknown
}

func (j *judge) addDiffs(ds []Diff, pid int) {
	for _, d := range ds {
		d.EventPID = pid
		j.diff(d)
	}
}

// reasonsFor maps a failed match's diffs to reason ids: identity diffs to
// binary, everything else to argv.
func reasonsFor(ds []Diff, argvReason, binaryReason string) []string {
	var out []string
	for _, d := range ds {
		r := argvReason
		if d.Field == FieldIdentity {
			r = binaryReason
		}
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

func (j *judge) verdict() Verdict {
	v := Verdict{Reasons: []string{}}
	for r := range j.contradictions {
		v.Reasons = append(v.Reasons, r)
	}
	for r := range j.gaps {
		if !j.contradictions[r] {
			v.Reasons = append(v.Reasons, r)
		}
	}
	slices.Sort(v.Reasons)
	switch {
	case len(j.contradictions) > 0:
		v.Status = StatusMismatch
	case len(j.gaps) > 0:
		v.Status = StatusUnchecked
	default:
		v.Status = StatusConfirmed
	}
	v.Diffs = j.diffs
	if j.omitted > 0 {
		v.Diffs = append(v.Diffs, Diff{Rule: "verify", Field: FieldOmitted, Index: -1, Got: strconv.Itoa(j.omitted)})
	}
	for _, m := range j.matched {
		v.Matched = append(v.Matched, *m)
	}
	slices.SortFunc(v.Matched, func(a, b Match) int { return strings.Compare(a.Rule, b.Rule) })
	return v
}

// describe is an exec in one line for a diff: filename and quoted argv,
// the argv cut after maxDescribe bytes.
// describeAccess says who asked which access of whom.
func describeAccess(e *Event) string {
	if e.Mode == 0 {
		return fmt.Sprintf("pid %d asked to be traced by pid %d", e.PID, e.Target)
	}
	return fmt.Sprintf("pid %d asked for pid %d (ptrace mode %#x)", e.PID, e.Target, e.Mode)
}

func describe(e *Event) string {
	var b strings.Builder
	b.WriteString(e.Filename)
	b.WriteString(" [")
	cut := e.Truncated
	for i, a := range e.Argv {
		if b.Len() > maxDescribe {
			cut = true
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Quote(a))
	}
	if cut {
		b.WriteString(" …")
	}
	b.WriteByte(']')
	return b.String()
}
