package verify

import (
	"reflect"
	"slices"
	"testing"

	"hookbox.dev/hookbox/internal/shellwords"
	"hookbox.dev/hookbox/render"
)

// fuzzRender has every kind of rule: an engine with a self-exec name, an
// exec-form hook with a launch slot, a script hook with its "#!" line, a
// hook through bash -c with a launch slot, and allowed programs.
func fuzzRender() *render.Render {
	r := claudeRender()
	shellArgv := []string{auditPath, "--shell", "{run_id}"}
	command := shellwords.Join(shellArgv)
	r.Hooks = append(r.Hooks, render.Hook{
		Name: "shelled", Event: "Stop", Required: true, Argv: shellArgv, Command: command,
		Chain: []render.Exec{
			{Path: bashPath, Argv: []string{"bash", "-c", command}},
			{Path: auditPath, Argv: shellArgv, Slots: []int{2}},
		},
	})
	r.Trace.Allow = []string{bashPath, gitPath}
	// The lint hook is a script whose "#!" line the render records.
	for i := range r.Programs {
		if r.Programs[i].Path == lintPath {
			r.Programs[i].Shebang = &render.Shebang{Interpreter: python}
		}
	}
	return r
}

// byteReader hands out fuzz bytes; past the end it returns zeros.
type byteReader struct {
	data []byte
	pos  int
}

func (b *byteReader) next() byte {
	if b.pos >= len(b.data) {
		return 0
	}
	c := b.data[b.pos]
	b.pos++
	return c
}

func (b *byteReader) more() bool { return b.pos < len(b.data) }

var fuzzWords = []string{"", "x", "-p", "--", "rg", "do it", claudePath, lintPath, auditPath, python, "--check", "run-1", "run-42", "{run_id}", "'", "a b"}

// decodeTrace turns fuzz bytes into tracer stats and a time-ordered trace
// built from templates of planned and unplanned execs, then mutated.
func decodeTrace(data []byte) (Stats, []Event) {
	stats, events, _ := decodeRun(data)
	return stats, events
}

// decodeRun is decodeTrace and the launch values: testSlots, or unknown.
func decodeRun(data []byte) (Stats, []Event, render.SlotValues) {
	b := &byteReader{data: data}
	flags := b.next()
	stats := Stats{
		Attached:            flags&1 == 0,
		AttachedBeforeStart: flags&2 == 0,
		Reason:              "fuzz",
	}
	if flags&4 != 0 {
		stats.Lost = 1
	}
	if flags&8 != 0 {
		stats.Truncated = 1
	}
	slots := testSlots
	if flags&16 != 0 {
		slots = nil
	}
	shellCmd := shellwords.Join([]string{auditPath, "--shell", "run-42"})
	var events []Event
	var now int64
	for b.more() && len(events) < 48 {
		var e Event
		id := noID
		switch b.next() % 16 {
		case 0:
			e, id = Event{Filename: claudePath, Argv: slices.Clone(claudeArgv)}, claudeID
		case 1:
			e, id = Event{Filename: claudePath, Argv: append([]string{python, claudePath}, claudeArgv[1:]...)}, pythonID
		case 2:
			e, id = Event{Filename: auditPath, Argv: with(auditArgv, 3, "run-42")}, auditID
		case 3:
			e, id = Event{Filename: lintPath, Argv: slices.Clone(lintArgv)}, lintID
		case 4:
			e, id = Event{Filename: lintPath, Argv: []string{python, lintPath, "--check"}}, pythonID
		case 5:
			e, id = Event{Filename: lintPath, Argv: []string{python, "-u", lintPath, "--check"}}, pythonID
		case 6:
			e, id = Event{Filename: bashPath, Argv: []string{"bash", "-c", shellCmd}}, bashID
		case 7:
			e, id = Event{Filename: auditPath, Argv: []string{auditPath, "--shell", "run-42"}}, auditID
		case 8:
			e, id = Event{Filename: gitPath, Argv: []string{"git", "status"}}, gitID
		case 9:
			e, id = Event{Filename: "/proc/self/exe", Argv: []string{"rg", "--files"}}, claudeID
		case 10:
			e, id = Event{Filename: "/usr/local/bin/git", Argv: []string{"git"}}, gitID
		default:
			e = Event{Filename: fuzzWords[int(b.next())%len(fuzzWords)], Argv: []string{fuzzWords[int(b.next())%len(fuzzWords)]}}
		}
		switch k := b.next() % 16; {
		case k < 11:
			e.Kind = KindExec
		case k < 13:
			e.Kind, e.Errno = KindFailed, 2
		case k < 15:
			e.Kind, e.Killed = KindExec, true
		default:
			e.Kind = "fork"
		}
		mut := b.next()
		if mut&1 != 0 && len(e.Argv) > 0 {
			e.Argv[int(b.next())%len(e.Argv)] = fuzzWords[int(b.next())%len(fuzzWords)]
		}
		if mut&2 != 0 && len(e.Argv) > 0 {
			e.Argv = e.Argv[:len(e.Argv)-1]
		}
		if mut&4 != 0 {
			e.Argv = append(e.Argv, fuzzWords[int(b.next())%len(fuzzWords)])
		}
		if mut&8 != 0 {
			e.Truncated = true
			if len(e.Argv) > 0 {
				e.Argv = e.Argv[:int(b.next())%len(e.Argv)+1]
				last := &e.Argv[len(e.Argv)-1]
				*last = (*last)[:int(b.next())%(len(*last)+1)]
			}
		}
		switch mut >> 4 & 3 {
		case 1:
			id = noID
		case 2:
			id = otherID
		case 3:
			id = claudeID
		}
		if e.Kind != KindExec {
			id = noID
		}
		e.Dev, e.Ino = id.Dev, id.Ino
		e.PID, e.PPID = int(b.next()%8)+1, int(b.next()%8)
		now += int64(b.next() % 3)
		e.Time = now
		events = append(events, e)
	}
	return stats, events, slots
}

// engineRan says, independently of the matcher, whether e is the engine's
// exec: direct (argv equal, the engine's identity) or as a script
// (interpreter argv, the interpreter's identity).
func engineRan(e Event, ids FileIdentities, programs []render.Program) bool {
	if e.Kind != KindExec || e.Killed || e.Truncated || e.Filename != claudePath {
		return false
	}
	id := FileID{Dev: e.Dev, Ino: e.Ino}
	argsEqual := func(got []string, from int) bool {
		if len(got) != len(claudeArgv)-from {
			return false
		}
		for i, g := range got {
			if g != claudeArgv[i+from] {
				return false
			}
		}
		return true
	}
	if id == ids[claudePath] && argsEqual(e.Argv, 0) {
		return true
	}
	isProgram := len(e.Argv) > 0 && slices.ContainsFunc(programs, func(p render.Program) bool { return p.Path == e.Argv[0] })
	if !isProgram || id != ids[e.Argv[0]] {
		return false
	}
	for off := 1; off <= 2; off++ {
		if len(e.Argv) > off && e.Argv[off] == claudePath && argsEqual(e.Argv[off+1:], 1) {
			return true
		}
	}
	return false
}

var contradictionReasons = []string{
	ReasonNoEvents, ReasonEngineNotFirst, ReasonEngineArgvDiffers, ReasonEngineBinaryDiffers, ReasonHookNotRun,
	ReasonHookArgvDiffers, ReasonHookBinaryDiffers, ReasonAllowedBinaryDiffers, ReasonUnexpectedExec,
	ReasonFailedExec, ReasonKilledExec, ReasonDeniedExec, ReasonDeniedPtrace,
}

// goodRunSeed decodes to a confirmed run: engine, audit hook, the shelled
// hook (bash, then the program in the same pid), git.
var goodRunSeed = []byte{
	0,                // stats: complete
	0, 0, 0, 0, 0, 0, // engine, pid 1
	2, 0, 0, 1, 1, 1, // audit hook, pid 2
	6, 0, 0, 2, 1, 1, // bash -c, pid 3
	7, 0, 0, 2, 1, 1, // audit --shell, pid 3
	8, 0, 0, 3, 1, 1, // git, pid 4
}

func TestGoodRunSeedIsConfirmed(t *testing.T) {
	stats, events := decodeTrace(goodRunSeed)
	v := Verify(fuzzRender(), "", events, stats, testIDs(), testSlots)
	verdictWant{status: StatusConfirmed, matched: map[string]int{"hook:shelled": 1, "hook:audit": 1}}.check(t, v)
}

func FuzzVerify(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0})
	f.Add([]byte{1})
	f.Add([]byte{4, 0, 0, 0, 1, 0, 0})
	// Each event is template, kind, mutation, pid, ppid, time step.
	f.Add(goodRunSeed)
	f.Add(append([]byte{8}, goodRunSeed[1:]...))
	f.Add(append([]byte{16}, goodRunSeed[1:]...)) // launch values unknown
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 4, 1, 1, 15, 3, 7, 1, 2, 3, 4})
	r := fuzzRender()
	ids := testIDs()
	f.Fuzz(func(t *testing.T, data []byte) {
		stats, events, slots := decodeRun(data)
		before := slices.Clone(events)
		v := Verify(r, "", events, stats, ids, slots)

		if !reflect.DeepEqual(events, before) {
			t.Fatal("Verify modified its events")
		}
		if again := Verify(r, "", events, stats, ids, slots); !reflect.DeepEqual(again, v) {
			t.Fatalf("not deterministic:\n%+v\n%+v", v, again)
		}
		if v.Reasons == nil || !slices.IsSorted(v.Reasons) || len(slices.Compact(slices.Clone(v.Reasons))) != len(v.Reasons) {
			t.Fatalf("reasons not a sorted set: %q", v.Reasons)
		}
		contradicted := slices.ContainsFunc(v.Reasons, func(r string) bool { return slices.Contains(contradictionReasons, r) })
		switch v.Status {
		case StatusConfirmed:
			if len(v.Reasons) != 0 || len(v.Diffs) != 0 {
				t.Fatalf("confirmed with reasons %q diffs %+v", v.Reasons, v.Diffs)
			}
			if !stats.Attached || !stats.AttachedBeforeStart || stats.Lost != 0 || stats.Truncated != 0 {
				t.Fatalf("confirmed with incomplete evidence %+v", stats)
			}
			if slices.ContainsFunc(events, func(e Event) bool { return e.Truncated }) {
				t.Fatal("confirmed with a truncated argv")
			}
			if slots == nil {
				t.Fatal("confirmed without the launch values of a render with slots")
			}
			if len(events) == 0 || !engineRan(events[0], ids, r.Programs) {
				t.Fatalf("confirmed but the first event is not the engine: %+v", events)
			}
		case StatusMismatch:
			if !contradicted || len(v.Diffs) == 0 {
				t.Fatalf("mismatch without a contradiction: %q %+v", v.Reasons, v.Diffs)
			}
		case StatusUnchecked:
			if contradicted || len(v.Reasons) == 0 {
				t.Fatalf("unchecked with reasons %q", v.Reasons)
			}
		default:
			t.Fatalf("status %q", v.Status)
		}
	})
}
