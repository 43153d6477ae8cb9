package verify

import (
	"encoding/binary"
	"slices"
)

// Hook chains at scale: a render may have a hundred hooks (render.MaxHooks;
// older records more) and a trace hundreds of thousands of execs. Judging
// every event against every chain element, and keeping per-hook state for
// every process, made 10,000 identical hooks take minutes and gigabytes.
// So:
//
//   - hooks whose chains are exactly alike (the same execs, slots filled
//     alike) share one hookChain: they match the same events, so they are
//     judged once and their matches are written under each hook's own
//     rule names at the end;
//   - an index by path, then by one exact argv element, gives the chain
//     elements an event may match exactly; all other elements are certain
//     not to (see chainIndex);
//   - the nearest element of an event that nothing accepts is chosen by
//     counting differences (only up to the fewest so far), and only its
//     differences are written out;
//   - a chain keeps pids only for the elements a later element links to.
//
// None of this changes a verdict: TestIndexedJudgeIsTheStraightforwardOne
// compares it with the plain loop over every hook (judgeOptions.plain).

// hookRule is one hook of the render: its name, its rule names
// ("hook:<name>/chain[k]") and the chain its occurrences are counted on.
type hookRule struct {
	name     string
	required bool
	rules    []string
	chain    *hookChain
}

// hookChain is a chain of planned execs and the state of its occurrences,
// shared by every hook whose chain is exactly this one.
type hookChain struct {
	// elems are the matchers of the first hook with this chain (their
	// rule names, in diffs, are that hook's).
	elems []*execMatcher
	// reached[k] (k < len(elems)-1) maps a pid to the position of its
	// latest event that completed a linked Chain[0..k]. The last element
	// needs none: no element links to it.
	reached     []map[int]int
	exact       []exactMatches // per element
	occurrences []EventRef
	count       int
	maybe       bool // a truncated event might have been part of it
}

// exactMatches are the exact matches of one chain element: how many, and
// the positions of the first few.
type exactMatches struct {
	count int
	at    []int
}

// chainElem is Chain[k] of a hook chain.
type chainElem struct {
	chain *hookChain
	k     int
}

func (c chainElem) matcher() *execMatcher { return c.chain.elems[c.k] }

// judgeOptions are the ways a verdict may be computed; every way gives the
// same verdict.
type judgeOptions struct {
	// plain: every hook its own chain, every event compared with every
	// chain element (the reference the indexed judge is tested against).
	plain bool
}

// addChain records the hook h with the matchers of its chain, sharing the
// state of an identical chain already recorded.
func (j *judge) addChain(h *hookRule, elems []*execMatcher) {
	var key []byte
	for _, m := range elems {
		key = m.appendShape(key)
	}
	c := j.chainByShape[string(key)]
	if c == nil || j.opts.plain {
		c = &hookChain{elems: elems, exact: make([]exactMatches, len(elems))}
		for range len(elems) - 1 {
			c.reached = append(c.reached, map[int]int{})
		}
		j.chainByShape[string(key)] = c
		for k := range elems {
			j.chainElems = append(j.chainElems, chainElem{chain: c, k: k})
		}
	}
	h.chain = c
	j.hooks = append(j.hooks, h)
}

// appendShape appends to b everything that decides what m matches (all but
// its rule name), unambiguously.
func (m *execMatcher) appendShape(b []byte) []byte {
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	strs := func(ss []string) {
		b = binary.AppendUvarint(b, uint64(len(ss)))
		for _, s := range ss {
			str(s)
		}
	}
	mask := func(bs []bool) {
		b = binary.AppendUvarint(b, uint64(len(bs)))
		for _, v := range bs {
			b = append(b, boolByte(v))
		}
	}
	// m.script is the path's own (judge.scripts), so the path decides it.
	str(m.path)
	strs(m.argv)
	mask(m.slot)
	b = append(b, boolByte(m.rest))
	b = binary.AppendVarint(b, int64(m.cmd))
	strs(m.cmdArgv)
	mask(m.cmdSlot)
	return b
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// chainIndex finds the chain elements an event may match exactly.
//
// An event whose argv is not truncated matches an element only in one of
// the forms match tries: direct (the element's argv[i] is the event's
// argv[i]) or as a "#!" script (argv[i] is the event's argv[i+1] or
// argv[i+2]; index 0 is the script path there and is not compared). So
// with i ≥ 1 a position where the element's argv is exact (not a free slot,
// not a command string checked by parsing), an element whose argv[i] is
// none of the event's argv[i], argv[i+1], argv[i+2] cannot match it. Each
// element is filed under such a position, the one whose value the fewest
// elements of its path share; an element without one is always tried. A
// truncated event may match in more ways: every element of its path is
// tried.
type chainIndex map[string]*pathIndex

type pathIndex struct {
	elems     []chainElem // in render order
	unkeyed   []int       // elements without an exact position ≥ 1
	positions []int       // the positions elements are filed under, ascending
	keyed     map[int]map[string][]int
}

// maxScriptOffset is how far right a "#!" form shifts an argv: the
// interpreter and its argument.
const maxScriptOffset = 2

func newChainIndex(elems []chainElem) chainIndex {
	ix := chainIndex{}
	for _, c := range elems {
		p := ix[c.matcher().path]
		if p == nil {
			p = &pathIndex{keyed: map[int]map[string][]int{}}
			ix[c.matcher().path] = p
		}
		p.elems = append(p.elems, c)
	}
	for _, p := range ix {
		p.file()
	}
	return ix
}

type argAt struct {
	i int
	v string
}

func (p *pathIndex) file() {
	shared := map[argAt]int{}
	for _, c := range p.elems {
		m := c.matcher()
		for i := 1; i < len(m.argv); i++ {
			if m.exactAt(i) {
				shared[argAt{i, m.argv[i]}]++
			}
		}
	}
	for n, c := range p.elems {
		m := c.matcher()
		best := -1
		for i := 1; i < len(m.argv); i++ {
			if m.exactAt(i) && (best < 0 || shared[argAt{i, m.argv[i]}] < shared[argAt{best, m.argv[best]}]) {
				best = i
			}
		}
		if best < 0 {
			p.unkeyed = append(p.unkeyed, n)
			continue
		}
		byValue := p.keyed[best]
		if byValue == nil {
			byValue = map[string][]int{}
			p.keyed[best] = byValue
			p.positions = append(p.positions, best)
		}
		byValue[m.argv[best]] = append(byValue[m.argv[best]], n)
	}
	slices.Sort(p.positions)
}

// exactAt reports whether argv[i] must be matched exactly.
func (m *execMatcher) exactAt(i int) bool { return !m.slot[i] && i != m.cmd }

// candidates returns the indices in p.elems of the elements e may match,
// ascending, in buf.
func (p *pathIndex) candidates(e *Event, buf []int) []int {
	buf = buf[:0]
	if e.Truncated {
		for n := range p.elems {
			buf = append(buf, n)
		}
		return buf
	}
	buf = append(buf, p.unkeyed...)
	for _, i := range p.positions {
		byValue := p.keyed[i]
		for off := 0; off <= maxScriptOffset && i+off < len(e.Argv); off++ {
			buf = append(buf, byValue[e.Argv[i+off]]...)
		}
	}
	slices.Sort(buf)
	return slices.Compact(buf)
}

// hookCandidates are the chain elements e may match exactly, in render
// order. The slice is reused by the next call.
func (j *judge) hookCandidates(e *timedEvent) []chainElem {
	if j.opts.plain {
		return j.chainElems
	}
	p := j.chainIndex[e.Filename]
	if p == nil {
		return nil
	}
	j.candidateBuf = p.candidates(&e.Event, j.candidateBuf)
	j.elemBuf = j.elemBuf[:0]
	for _, n := range j.candidateBuf {
		j.elemBuf = append(j.elemBuf, p.elems[n])
	}
	return j.elemBuf
}

// judgeHookChains tries e against the hook chains (rule 3): hit when it
// matched a chain element exactly, maybe when a truncated argv might be one.
func (j *judge) judgeHookChains(pos int, e *timedEvent, s *sighting) (hit, maybe bool) {
	for _, c := range j.hookCandidates(e) {
		m := c.matcher()
		if e.Filename != m.path {
			continue
		}
		switch m.compare(s, j.ids, keepDiffs).outcome {
		case matchYes:
			hit = true
			c.chain.exact[c.k].add(pos)
			j.reach(c.chain, c.k, pos, e)
		case matchMaybe:
			maybe = true
			c.chain.maybe = true
		}
	}
	return hit, maybe
}

func (x *exactMatches) add(pos int) {
	x.count++
	if len(x.at) < maxMatchedEvents {
		x.at = append(x.at, pos)
	}
}

// nearestHook is the comparison of e with the chain element of its path it
// differs least from (the first of those in render order), or nil when no
// chain element has e's path. The differences are counted for every
// element, each only up to the fewest so far, and written out for that
// one only.
func (j *judge) nearestHook(e *timedEvent, s *sighting) *matchResult {
	elems := j.chainElems
	if !j.opts.plain {
		p := j.chainIndex[e.Filename]
		if p == nil {
			return nil
		}
		elems = p.elems
	}
	var nearest *execMatcher
	fewest := 0
	for _, c := range elems {
		m := c.matcher()
		if e.Filename != m.path {
			continue
		}
		t := tally{limit: fewest}
		if j.opts.plain {
			t = keepDiffs
		}
		res := m.compare(s, j.ids, t)
		if res.outcome == matchNo && (nearest == nil || res.n < fewest) {
			nearest, fewest = m, res.n
		}
		if fewest == 1 && !j.opts.plain {
			break // no difference at all is a match: none can be nearer
		}
	}
	if nearest == nil {
		return nil
	}
	res := nearest.compare(s, j.ids, keepDiffs)
	return &res
}

// reach records that the event at pos matched Chain[k] of c, and whether it
// extends a linked occurrence.
func (j *judge) reach(c *hookChain, k, pos int, e *timedEvent) {
	if k > 0 && !j.linked(c.reached[k-1], pos, e) {
		return
	}
	if k < len(c.reached) {
		c.reached[k][e.PID] = pos
	}
	if k == len(c.elems)-1 {
		c.count++
		if len(c.occurrences) < maxMatchedEvents {
			c.occurrences = append(c.occurrences, e.ref())
		}
	}
}

// linked reports whether e was exec'd by a process in prev (before pos):
// the same process after an exec-replacing shell, or a descendant.
func (j *judge) linked(prev map[int]int, pos int, e *timedEvent) bool {
	if at, ok := prev[e.PID]; ok && at < pos {
		return true
	}
	// The pids walked so far, to stop at a cycle: at most maxAncestry+1.
	var seen [maxAncestry + 1]int
	seen[0] = e.PID
	n := 1
	p := e.PPID
	for range maxAncestry {
		if p <= 0 || slices.Contains(seen[:n], p) {
			return false
		}
		if at, ok := prev[p]; ok && at < pos {
			return true
		}
		seen[n] = p
		n++
		next, ok := j.parent[p]
		if !ok {
			return false
		}
		p = next
	}
	return false
}

// judgeHooks writes each hook's exact matches under its own rule names,
// counts occurrences and reports required hooks that never ran.
func (j *judge) judgeHooks() {
	// Two hooks of one name (a render hookbox did not write) share rule
	// names: their matches add up, the first few events in time order.
	byRule := map[string]*exactMatches{}
	for _, h := range j.hooks {
		for k, rule := range h.rules {
			src := h.chain.exact[k]
			if src.count == 0 {
				continue
			}
			dst := byRule[rule]
			if dst == nil {
				dst = &exactMatches{}
				byRule[rule] = dst
			}
			dst.count += src.count
			dst.at = mergePositions(dst.at, src.at)
		}
	}
	for rule, x := range byRule {
		m := &Match{Rule: rule, Count: x.count}
		for _, pos := range x.at {
			m.Events = append(m.Events, j.events[pos].ref())
		}
		j.matched[rule] = m
	}
	for _, h := range j.hooks {
		c := h.chain
		if c.count > 0 {
			j.matched["hook:"+h.name] = &Match{Rule: "hook:" + h.name, Count: c.count, Events: slices.Clone(c.occurrences)}
			continue
		}
		if h.required && j.complete && !c.maybe {
			j.contradict(ReasonHookNotRun)
			j.diff(Diff{Rule: "hook:" + h.name, Field: FieldOccurrences, Index: -1, Want: ">=1", Got: "0"})
		}
	}
}

// mergePositions merges two ascending lists of positions, keeping the
// first maxMatchedEvents.
func mergePositions(a, b []int) []int {
	out := make([]int, 0, min(len(a)+len(b), maxMatchedEvents))
	for len(out) < maxMatchedEvents && (len(a) > 0 || len(b) > 0) {
		if len(b) == 0 || len(a) > 0 && a[0] <= b[0] {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return out
}
