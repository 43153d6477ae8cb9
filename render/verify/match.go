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
	diffs   []Diff // empty unless outcome is matchNo; nil when only counted
	n       int    // how many differences (len(diffs) when kept)
	idKnown bool   // both the expected and the observed identity were known
}

// tally says how a comparison records its differences: kept, to be
// written out, or only counted, and then only up to limit (0: no limit).
// The nearest hook chain element is chosen by count and only its
// differences are written out; an element with as many differences as one
// found before it is no nearer, however many more it has.
type tally struct {
	keep  bool
	limit int
}

var keepDiffs = tally{keep: true}

// diffList collects the differences of one comparison. n is exact while
// below the limit; at the limit a comparison may stop counting.
type diffList struct {
	tally
	n    int
	list []Diff
}

func (d *diffList) full() bool { return d.limit > 0 && d.n >= d.limit }

func (d *diffList) add(diff Diff) {
	d.n++
	if d.keep {
		d.list = append(d.list, diff)
	}
}

func (d *diffList) differs() matchResult { return matchResult{diffs: d.list, n: d.n} }

// sighting is an event with what the matchers look up about it, looked up
// once: an event may be compared with hundreds of hook chain elements.
type sighting struct {
	*Event
	fileID FileID // ids[Filename]: for a planned exec of that path, the path's identity
	// argv0ID, argv0Program: ids[Argv[0]] and whether Argv[0] is a program
	// of the render (an interpreter, for a render without Shebang entries).
	argv0ID      FileID
	argv0Program bool
	// argv0Cut: Argv[0] is all that is visible and might be a program's
	// path cut short.
	argv0Cut bool
}

func newSighting(e *Event, ids FileIdentities, programs map[string]bool) sighting {
	s := sighting{Event: e, fileID: ids.lookup(e.Filename)}
	if len(e.Argv) > 0 {
		s.argv0ID, s.argv0Program = ids.lookup(e.Argv[0]), programs[e.Argv[0]]
		s.argv0Cut = e.Truncated && len(e.Argv) == 1 && isPrefixOfAny(e.Argv[0], programs)
	}
	return s
}

// match compares e with m, trying the direct form and the shebang form
// (see the package doc) and keeping the closest: a match, else a possible
// match, else the form with the fewest differences (direct on a tie).
func (m *execMatcher) match(e *Event, ids FileIdentities, programs map[string]bool) matchResult {
	s := newSighting(e, ids, programs)
	return m.compare(&s, ids, keepDiffs)
}

// compare is match, recording the differences as t says.
func (m *execMatcher) compare(s *sighting, ids FileIdentities, t tally) matchResult {
	e := s.Event
	if e.Filename != m.path {
		d := diffList{tally: t}
		d.add(Diff{Rule: m.rule, Field: FieldFilename, Index: -1, Want: m.path, Got: e.Filename})
		return d.differs()
	}
	best := m.matchForm(e, 0, s.fileID, t)
	if m.script != nil {
		if best.outcome != matchYes {
			best = closer(best, m.matchScript(e, ids, t))
		}
		return best
	}
	// A render that does not say how its scripts run (recorded before the
	// compiler read "#!" lines): any program of the render may be the
	// interpreter.
	offsets, undecided := m.shebangOffsets(s)
	for _, off := range offsets {
		if best.outcome == matchYes {
			break
		}
		best = closer(best, m.matchForm(e, off, s.argv0ID, t))
	}
	if undecided && best.outcome == matchNo {
		return matchResult{outcome: matchMaybe}
	}
	return best
}

// closer is b when it is a better outcome than a, or as bad with fewer
// differences; else a.
func closer(a, b matchResult) matchResult {
	if b.outcome > a.outcome || b.outcome == matchNo && a.outcome == matchNo && b.n < a.n {
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
// visible element of a truncated argv may be cut), adds the differences to
// d and reports whether the whole head was visible.
func headDiffs(d *diffList, rule string, head []string, e *Event) (whole bool) {
	script := len(head) - 1
	for i := 0; i < len(head) && i < len(e.Argv) && !d.full(); i++ {
		got := e.Argv[i]
		if got == head[i] || e.Truncated && i == len(e.Argv)-1 && strings.HasPrefix(head[i], got) {
			continue
		}
		if i == script {
			// The script path stands for the rule's argv[0].
			d.add(Diff{Rule: rule, Field: FieldArgv, Index: 0, Want: head[i], Got: got})
			continue
		}
		d.add(Diff{Rule: rule, Field: FieldInterpreter, Index: -1, Want: head[i], Got: got})
	}
	return len(e.Argv) >= len(head)
}

// matchScript compares e with the kernel's exec of the script m.path by
// its "#!" line: argv [Interpreter, Arg?, script, argv[1:]...], the exe
// the interpreter, whether or not the render declares the interpreter.
func (m *execMatcher) matchScript(e *Event, ids FileIdentities, t tally) matchResult {
	head := scriptHead(m.script, m.path)
	d := diffList{tally: t}
	if !headDiffs(&d, m.rule, head, e) {
		switch {
		case d.n == 0 && e.Truncated:
			return matchResult{outcome: matchMaybe}
		case !e.Truncated:
			d.add(Diff{Rule: m.rule, Field: FieldArgc, Index: -1,
				Want: strconv.Itoa(len(m.argv) + len(head) - 1), Got: strconv.Itoa(len(e.Argv))})
		}
		return d.differs()
	}
	res := m.matchForm(e, len(head)-1, ids.lookup(m.script.Interpreter), t)
	if d.n > 0 {
		res.outcome, res.diffs, res.n = matchNo, append(d.list, res.diffs...), d.n+res.n
	}
	return res
}

// shebangOffsets returns where the script path may sit in e.Argv if the
// kernel ran m.path as a script: index 1 or 2, after an interpreter that is
// a program of the render. undecided reports a truncated argv cut before
// the form could be told.
func (m *execMatcher) shebangOffsets(s *sighting) (offsets []int, undecided bool) {
	e, a := s.Event, s.Argv
	if len(a) == 0 {
		return nil, e.Truncated // nothing visible: either form
	}
	if !s.argv0Program || a[0] == m.path {
		// A cut argv[0] might still be an interpreter's path.
		return nil, s.argv0Cut
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
func (m *execMatcher) matchForm(e *Event, off int, wantID FileID, t tally) matchResult {
	d := diffList{tally: t}
	m.compareArgv(&d, e.Argv[off:], off > 0, e.Truncated)
	gotID := FileID{Dev: e.Dev, Ino: e.Ino}
	idKnown := wantID.known() && gotID.known()
	if idKnown && wantID != gotID {
		diff := Diff{Rule: m.rule, Field: FieldIdentity, Index: -1}
		if d.keep { // formatted only when written out
			diff.Want, diff.Got = wantID.String(), gotID.String()
			if off > 0 {
				diff.Want += " (interpreter " + e.Argv[0] + ")"
			}
		}
		d.add(diff)
	}
	res := d.differs()
	res.idKnown = idKnown
	switch {
	case d.n > 0:
	case e.Truncated:
		res.outcome = matchMaybe
	default:
		res.outcome = matchYes
	}
	return res
}

// compareArgv compares got with m.argv element by element and adds the
// differences to d. With truncated, got is a prefix of the real argv whose
// last element may itself be cut. skip0: got[0] stands for argv[0] and was
// checked by the caller.
func (m *execMatcher) compareArgv(d *diffList, got []string, skip0, truncated bool) {
	n := min(len(m.argv), len(got))
	for i := range n {
		if d.full() {
			return
		}
		if i == 0 && skip0 {
			continue
		}
		if !m.elementOK(i, got[i], truncated && i == len(got)-1) {
			d.add(Diff{Rule: m.rule, Field: FieldArgv, Index: i, Want: m.argv[i], Got: got[i]})
		}
	}
	if len(got) == len(m.argv) || truncated && len(got) < len(m.argv) || m.rest && len(got) > len(m.argv) {
		return
	}
	gotLen := strconv.Itoa(len(got))
	if truncated && d.keep {
		gotLen = ">=" + gotLen
	}
	d.add(Diff{Rule: m.rule, Field: FieldArgc, Index: -1, Want: strconv.Itoa(len(m.argv)), Got: gotLen})
	// The elements one side has and the other lacks, the first few.
	for i := n; i < max(len(m.argv), len(got)) && i < n+maxLengthDiffs; i++ {
		diff := Diff{Rule: m.rule, Field: FieldArgv, Index: i}
		if i < len(m.argv) {
			diff.Want = m.argv[i]
		} else {
			diff.Got = got[i]
		}
		d.add(diff)
	}
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
