package verify

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"hookbox.dev/hookbox/internal/shellwords"
	"hookbox.dev/hookbox/render"
)

// randomRun is a run for comparing ways of judging: a render with hooks
// that share paths, argv elements and whole chains (some names twice),
// exec and shell form, scripts with and without their "#!" line, launch
// slots; and a trace of those hooks' execs, direct and in script form,
// mutated, truncated, failed, killed, with pids that link and do not.
type randomRun struct {
	r      *render.Render
	events []Event
	stats  Stats
	ids    FileIdentities
	slots  render.SlotValues
}

var randomWords = []string{"--rule", "a", "b", "x y", "", "{run_id}", "{run_dir}", "--check"}

func newRandomRun(rng *rand.Rand) randomRun {
	r := claudeRender()
	engine := claudeEngine
	if rng.IntN(2) == 0 {
		r, engine = codexRender(), codexEngine
	}
	r.Programs = append(r.Programs,
		render.Program{Path: runnerPath, Roles: []string{render.RoleHook}},
		render.Program{Path: shPath, Roles: []string{render.RoleShell}})
	if rng.IntN(2) == 0 {
		for i := range r.Programs {
			if r.Programs[i].Path == lintPath {
				r.Programs[i].Shebang = &render.Shebang{Interpreter: python}
			}
		}
	}
	ids := scaleIDs()
	ids[shPath] = shID
	if rng.IntN(4) == 0 {
		delete(ids, auditPath)
	}

	hookPaths := []string{auditPath, runnerPath, lintPath}
	r.Hooks = nil
	for n := rng.IntN(10); len(r.Hooks) < n; {
		if len(r.Hooks) > 0 && rng.IntN(4) == 0 {
			// The same chain under another (or the same) name.
			h := r.Hooks[rng.IntN(len(r.Hooks))]
			h.Name = hookName(rng, len(r.Hooks))
			h.Required = rng.IntN(2) == 0
			r.Hooks = append(r.Hooks, h)
			continue
		}
		path := hookPaths[rng.IntN(len(hookPaths))]
		argv := []string{path}
		var slots []int
		for range rng.IntN(4) {
			w := randomWords[rng.IntN(len(randomWords))]
			if _, ok := render.SlotName(w); ok || rng.IntN(10) == 0 {
				slots = append(slots, len(argv))
			}
			argv = append(argv, w)
		}
		h := render.Hook{Name: hookName(rng, len(r.Hooks)), Event: "Stop", Required: rng.IntN(2) == 0, Argv: argv}
		program := render.Exec{Path: path, Argv: argv, Slots: slots}
		switch rng.IntN(4) {
		case 0:
			h.Chain = []render.Exec{program}
		case 1:
			h.Command = shellwords.Join(argv)
			h.Chain = []render.Exec{{Path: bashPath, Argv: []string{bashPath, "-c", h.Command}}, program}
		case 2:
			h.Command = shellwords.Join(argv)
			h.Chain = []render.Exec{{Path: shPath, Argv: []string{"sh", "-c", h.Command}}, program}
		default:
			// A shell that runs a shell.
			h.Command = shellwords.Join(argv)
			sh := []string{"sh", "-c", h.Command}
			h.Chain = []render.Exec{{Path: bashPath, Argv: []string{bashPath, "-c", shellwords.Join(sh)}}, {Path: shPath, Argv: sh}, program}
		}
		r.Hooks = append(r.Hooks, h)
	}

	slots := testSlots
	if rng.IntN(5) == 0 {
		slots = nil
	}
	var events []Event
	if rng.IntN(5) > 0 {
		events = append(events, engine())
	}
	for range rng.IntN(30) {
		events = append(events, randomEvent(rng, r))
	}
	var now int64
	for i := range events {
		now += int64(rng.IntN(3))
		events[i].Time = now
	}
	stats := fullStats
	if rng.IntN(4) == 0 {
		stats.Lost = 1
	}
	return randomRun{r: r, events: events, stats: stats, ids: ids, slots: slots}
}

func hookName(rng *rand.Rand, n int) string {
	switch rng.IntN(6) {
	case 0:
		return "h0"
	case 1:
		return "h0/chain[0]" // its occurrences' rule is h0's first element's
	}
	return fmt.Sprintf("h%d", n)
}

// randomEvent is an exec of a random chain element of a random hook, or of
// something else, then mutated.
func randomEvent(rng *rand.Rand, r *render.Render) Event {
	e := Event{Kind: KindExec, PID: rng.IntN(8) + 1, PPID: rng.IntN(9)}
	id := noID
	switch pick := rng.IntN(10); {
	case pick < 6 && len(r.Hooks) > 0:
		h := r.Hooks[rng.IntN(len(r.Hooks))]
		k := rng.IntN(len(h.Chain))
		x := h.Chain[k]
		argv := filled(rng, x)
		if len(argv) == 3 && argv[1] == "-c" && k+1 < len(h.Chain) {
			argv[2] = shellwords.Join(filled(rng, h.Chain[k+1]))
		}
		e.Filename, e.Argv = x.Path, argv
		switch x.Path {
		case auditPath:
			id = auditID
		case runnerPath:
			id = runnerID
		case lintPath:
			id = lintID
		case bashPath:
			id = bashID
		case shPath:
			id = shID
		}
		if x.Path == lintPath && rng.IntN(2) == 0 {
			// The kernel's form of a "#!" script.
			e.Argv = append([]string{python, lintPath}, argv[1:]...)
			id = pythonID
		}
	case pick < 7:
		e.Filename, e.Argv, id = gitPath, []string{"git", "status"}, gitID
	case pick < 8:
		e.Filename, e.Argv, id = "/proc/self/exe", []string{"rg", "--files"}, claudeID
	default:
		e.Filename = []string{auditPath, runnerPath, lintPath, bashPath, "/usr/bin/curl"}[rng.IntN(5)]
		e.Argv = []string{e.Filename, randomWords[rng.IntN(len(randomWords))]}
	}
	switch rng.IntN(12) {
	case 0:
		e.Kind, e.Errno = KindFailed, 2
	case 1:
		e.Killed = true
	case 2:
		e.Kind = "fork"
	}
	if rng.IntN(6) == 0 && len(e.Argv) > 0 {
		e.Argv[rng.IntN(len(e.Argv))] = randomWords[rng.IntN(len(randomWords))]
	}
	if rng.IntN(8) == 0 {
		e.Argv = append(e.Argv, "extra")
	}
	if rng.IntN(8) == 0 {
		e.Truncated = true
		if len(e.Argv) > 0 {
			e.Argv = e.Argv[:rng.IntN(len(e.Argv))+1]
			last := &e.Argv[len(e.Argv)-1]
			*last = (*last)[:rng.IntN(len(*last)+1)]
		}
	}
	switch rng.IntN(8) {
	case 0:
		id = noID
	case 1:
		id = otherID
	}
	if e.Kind == KindExec {
		e.Dev, e.Ino = id.Dev, id.Ino
	}
	return e
}

// filled is x's argv with most launch slots filled with the test values.
func filled(rng *rand.Rand, x render.Exec) []string {
	argv := slices.Clone(x.Argv)
	for _, i := range x.Slots {
		if name, ok := render.SlotName(argv[i]); ok && rng.IntN(4) > 0 {
			argv[i] = testSlots[name]
		}
	}
	return argv
}

// TestIndexedJudgeIsTheStraightforwardOne: the judge with shared chains,
// its index and lazy differences gives exactly the verdict of the plain
// loop over every hook, on random runs.
func TestIndexedJudgeIsTheStraightforwardOne(t *testing.T) {
	for seed := range uint64(5000) {
		compareJudges(t, seed)
	}
}

func FuzzIndexedJudge(f *testing.F) {
	f.Add(uint64(0))
	f.Fuzz(func(t *testing.T, seed uint64) { compareJudges(t, seed) })
}

func compareJudges(t *testing.T, seed uint64) {
	t.Helper()
	run := newRandomRun(rand.New(rand.NewPCG(seed, 8)))
	indexed := verify(run.r, "", run.events, run.stats, run.ids, run.slots, judgeOptions{})
	plain := verify(run.r, "", run.events, run.stats, run.ids, run.slots, judgeOptions{plain: true})
	if !reflect.DeepEqual(indexed, plain) {
		in, _ := json.MarshalIndent(run.r.Hooks, "", " ")
		ev, _ := json.Marshal(run.events)
		a, _ := json.MarshalIndent(indexed, "", " ")
		b, _ := json.MarshalIndent(plain, "", " ")
		t.Fatalf("seed %d: hooks %s\nevents %s\nindexed %s\nplain %s", seed, in, ev, a, b)
	}
}

// TestHooksSharingAChain: hooks with one chain are each matched under
// their own names; hooks of one name (a render hookbox did not write) add
// up under it, the first events in time order.
func TestHooksSharingAChain(t *testing.T) {
	r := claudeRender()
	audit, lint := r.Hooks[0], r.Hooks[1]
	again := audit
	again.Name = "audit-again"
	lint.Name = "audit" // the name of the first hook, another chain
	r.Hooks = []render.Hook{audit, lint, again}
	events := []Event{claudeEngine()}
	for i := range 6 {
		events = append(events, auditHook(2+2*i), ev(3+2*i, 1, lintPath, lintID, lintArgv...))
	}
	v := Verify(r, "", trace(events...), fullStats, testIDs(), testSlots)
	want := map[string][]int{ // rule → event indices
		"hook:audit/chain[0]":       {1, 2, 3, 4, 5, 6, 7, 8},
		"hook:audit-again/chain[0]": {1, 3, 5, 7, 9, 11},
		"hook:audit-again":          {1, 3, 5, 7, 9, 11},
	}
	counts := map[string]int{"hook:audit/chain[0]": 12, "hook:audit-again/chain[0]": 6, "hook:audit-again": 6, "hook:audit": 6}
	verdictWant{status: StatusConfirmed, matched: counts}.check(t, v)
	for _, m := range v.Matched {
		if w, ok := want[m.Rule]; ok {
			var got []int
			for _, e := range m.Events {
				got = append(got, e.Index)
			}
			if !slices.Equal(got, w) {
				t.Errorf("%s: events %v, want %v", m.Rule, got, w)
			}
		}
	}
}
