package verify

import (
	"slices"
	"strconv"
	"strings"

	"hookbox.dev/hookbox/internal/shellwords"
	"hookbox.dev/hookbox/render"
)

// outcome is how an event compares with a planned exec. matchMaybe is a
// truncated argv whose visible part agrees: neither proof nor contradiction.
type outcome int

const (
	matchNo outcome = iota
	matchMaybe
	matchYes
)

// execMatcher is one planned exec: the path execve gets, the exact argv
// (launch slots already filled where their values are known) with free
// positions that match any single element, and the identity of the file
// when the launcher knows it.
type execMatcher struct {
	rule string
	path string
	argv []string
	slot []bool // free positions
	// rest: elements after argv are free (an engine exec rule's Rest).
	rest bool
	// script is how the kernel runs path when it is a "#!" script (its
	// program's render.Shebang); nil when the render does not say.
	script *render.Shebang
	// cmd is the index of a shell command string that quotes cmdArgv, the
	// next chain element, some of whose launch slots have no known value
	// (cmdSlot); -1 when none.
	cmd     int
	cmdArgv []string
	cmdSlot []bool
}

// newExecMatcher matches path and argv exactly, except at the free
// positions.
func newExecMatcher(rule, path string, argv []string, free []int) *execMatcher {
	return &execMatcher{rule: rule, path: path, argv: slices.Clone(argv), slot: slotMask(len(argv), free), cmd: -1}
}

// slotMask turns slot indices into a mask; indices out of range are ignored.
func slotMask(n int, slots []int) []bool {
	mask := make([]bool, n)
	for _, i := range slots {
		if i >= 0 && i < n {
			mask[i] = true
		}
	}
	return mask
}

// matchResult is the judgement of one event against one execMatcher.
type matchResult struct {
	outcome outcome
	diffs   []Diff // empty unless outcome is matchNo
	idKnown bool   // both the expected and the observed identity were known
}

// match compares e with m, trying the direct form and the shebang form
// (see the package doc) and keeping the closest: a match, else a possible
// match, else the form with the fewest differences (direct on a tie).
func (m *execMatcher) match(e *Event, ids FileIdentities, programs map[string]bool) matchResult {
	if e.Filename != m.path {
		return matchResult{diffs: []Diff{{Rule: m.rule, Field: FieldFilename, Index: -1, Want: m.path, Got: e.Filename}}}
	}
	best := m.matchForm(e, 0, ids.lookup(m.path))
	if m.script != nil {
		if best.outcome != matchYes {
			best = closer(best, m.matchScript(e, ids))
		}
		return best
	}
	// A render that does not say how its scripts run (recorded before the
	// compiler read "#!" lines): any program of the render may be the
	// interpreter.
	offsets, undecided := m.shebangOffsets(e, programs)
	for _, off := range offsets {
		if best.outcome == matchYes {
			break
		}
		best = closer(best, m.matchForm(e, off, ids.lookup(e.Argv[0])))
	}
	if undecided && best.outcome == matchNo {
		return matchResult{outcome: matchMaybe}
	}
	return best
}

// closer is b when it is a better outcome than a, or as bad with fewer
// differences; else a.
func closer(a, b matchResult) matchResult {
	if b.outcome > a.outcome || b.outcome == matchNo && a.outcome == matchNo && len(b.diffs) < len(a.diffs) {
		return b
	}
	return a
}

// scriptHead is how the argv the kernel builds for a "#!" script starts:
// the interpreter, the line's argument if it has one, the script's path.
func scriptHead(sc *render.Shebang, script string) []string {
	head := []string{sc.Interpreter}
	if sc.Arg != "" {
		head = append(head, sc.Arg)
	}
	return append(head, script)
}

// headDiffs compares the visible start of e.Argv with head (the last
// visible element of a truncated argv may be cut) and reports the
// differences, and whether the whole head was visible.
func headDiffs(rule string, head []string, e *Event) (diffs []Diff, whole bool) {
	script := len(head) - 1
	for i := 0; i < len(head) && i < len(e.Argv); i++ {
		got := e.Argv[i]
		if got == head[i] || e.Truncated && i == len(e.Argv)-1 && strings.HasPrefix(head[i], got) {
			continue
		}
		if i == script {
			// The script path stands for the rule's argv[0].
			diffs = append(diffs, Diff{Rule: rule, Field: FieldArgv, Index: 0, Want: head[i], Got: got})
			continue
		}
		diffs = append(diffs, Diff{Rule: rule, Field: FieldInterpreter, Index: -1, Want: head[i], Got: got})
	}
	return diffs, len(e.Argv) >= len(head)
}

// matchScript compares e with the kernel's exec of the script m.path by
// its "#!" line: argv [Interpreter, Arg?, script, argv[1:]...], the exe
// the interpreter, whether or not the render declares the interpreter.
func (m *execMatcher) matchScript(e *Event, ids FileIdentities) matchResult {
	head := scriptHead(m.script, m.path)
	diffs, whole := headDiffs(m.rule, head, e)
	if !whole {
		switch {
		case len(diffs) == 0 && e.Truncated:
			return matchResult{outcome: matchMaybe}
		case !e.Truncated:
			diffs = append(diffs, Diff{Rule: m.rule, Field: FieldArgc, Index: -1,
				Want: strconv.Itoa(len(m.argv) + len(head) - 1), Got: strconv.Itoa(len(e.Argv))})
		}
		return matchResult{diffs: diffs}
	}
	res := m.matchForm(e, len(head)-1, ids.lookup(m.script.Interpreter))
	if len(diffs) > 0 {
		res.outcome, res.diffs = matchNo, append(diffs, res.diffs...)
	}
	return res
}

// shebangOffsets returns where the script path may sit in e.Argv if the
// kernel ran m.path as a script: index 1 or 2, after an interpreter that is
// a program of the render. undecided reports a truncated argv cut before
// the form could be told.
func (m *execMatcher) shebangOffsets(e *Event, programs map[string]bool) (offsets []int, undecided bool) {
	a := e.Argv
	if len(a) == 0 {
		return nil, e.Truncated // nothing visible: either form
	}
	if !programs[a[0]] || a[0] == m.path {
		// A cut argv[0] might still be an interpreter's path.
		return nil, e.Truncated && len(a) == 1 && isPrefixOfAny(a[0], programs)
	}
	for off := 1; off <= 2; off++ {
		switch {
		case off < len(a) && a[off] == m.path:
			offsets = append(offsets, off)
		case e.Truncated && off == len(a)-1 && strings.HasPrefix(m.path, a[off]):
			undecided = true
		case e.Truncated && off >= len(a):
			undecided = true
		}
	}
	return offsets, undecided
}

func isPrefixOfAny(s string, set map[string]bool) bool {
	for p := range set {
		if strings.HasPrefix(p, s) {
			return true
		}
	}
	return false
}

// matchForm compares e.Argv[off:] with m.argv (off 0: direct; off > 0:
// shebang, where e.Argv[off] is the script path standing for argv[0]) and
// e's identity with wantID.
func (m *execMatcher) matchForm(e *Event, off int, wantID FileID) matchResult {
	diffs := m.compareArgv(e.Argv[off:], off > 0, e.Truncated)
	gotID := FileID{Dev: e.Dev, Ino: e.Ino}
	res := matchResult{idKnown: wantID.known() && gotID.known()}
	if res.idKnown && wantID != gotID {
		want := wantID.String()
		if off > 0 {
			want += " (interpreter " + e.Argv[0] + ")"
		}
		diffs = append(diffs, Diff{Rule: m.rule, Field: FieldIdentity, Index: -1, Want: want, Got: gotID.String()})
	}
	switch {
	case len(diffs) > 0:
		res.diffs = diffs
	case e.Truncated:
		res.outcome = matchMaybe
	default:
		res.outcome = matchYes
	}
	return res
}

// compareArgv compares got with m.argv element by element. With truncated,
// got is a prefix of the real argv whose last element may itself be cut.
// skip0: got[0] stands for argv[0] and was checked by the caller.
func (m *execMatcher) compareArgv(got []string, skip0, truncated bool) []Diff {
	var diffs []Diff
	n := min(len(m.argv), len(got))
	for i := range n {
		if i == 0 && skip0 {
			continue
		}
		if !m.elementOK(i, got[i], truncated && i == len(got)-1) {
			diffs = append(diffs, Diff{Rule: m.rule, Field: FieldArgv, Index: i, Want: m.argv[i], Got: got[i]})
		}
	}
	if len(got) == len(m.argv) || truncated && len(got) < len(m.argv) || m.rest && len(got) > len(m.argv) {
		return diffs
	}
	gotLen := strconv.Itoa(len(got))
	if truncated {
		gotLen = ">=" + gotLen
	}
	diffs = append(diffs, Diff{Rule: m.rule, Field: FieldArgc, Index: -1, Want: strconv.Itoa(len(m.argv)), Got: gotLen})
	// The elements one side has and the other lacks, the first few.
	for i := n; i < max(len(m.argv), len(got)) && i < n+maxLengthDiffs; i++ {
		d := Diff{Rule: m.rule, Field: FieldArgv, Index: i}
		if i < len(m.argv) {
			d.Want = m.argv[i]
		} else {
			d.Got = got[i]
		}
		diffs = append(diffs, d)
	}
	return diffs
}

// elementOK reports whether got may be argv[i]. partial: got is the last
// visible element of a truncated argv and may be cut.
func (m *execMatcher) elementOK(i int, got string, partial bool) bool {
	switch {
	case m.slot[i] || got == m.argv[i]:
		return true
	case partial && strings.HasPrefix(m.argv[i], got):
		return true
	case i == m.cmd:
		// A cut command string cannot be parsed; it is only undecided.
		return partial || m.filledCommand(got)
	}
	return false
}

// filledCommand reports whether cmd is the canonical quoting of an argv that
// matches the next chain element, any value in its unknown slots.
// Requiring the canonical form (Join of the split equals cmd) means no
// shell syntax can hide around a slot value.
func (m *execMatcher) filledCommand(cmd string) bool {
	words, err := shellwords.Split(cmd)
	if err != nil || shellwords.Join(words) != cmd || len(words) != len(m.cmdArgv) {
		return false
	}
	for i, w := range words {
		if !m.cmdSlot[i] && w != m.cmdArgv[i] {
			return false
		}
	}
	return true
}
