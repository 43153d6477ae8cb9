package launcher

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"hookbox.dev/hookbox/ebpf"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/verify"
)

func TestReadTrace(t *testing.T) {
	full := traceRecord(t, fixtureEvents(true))
	lines := strings.SplitAfter(string(full), "\n")
	lines = lines[:len(lines)-1] // the empty string after the last newline
	join := func(ls ...string) []byte { return []byte(strings.Join(ls, "")) }
	statsLine := func(edit func(*traceStatsLine)) string {
		var s traceStatsLine
		if err := json.Unmarshal([]byte(lines[3]), &s); err != nil {
			t.Fatal(err)
		}
		edit(&s)
		b, _ := json.Marshal(s)
		return string(b) + "\n"
	}
	for _, tc := range []struct {
		name         string
		data         []byte
		events       int
		unfinished   bool
		inconsistent []string
		lost         uint64
	}{
		{name: "complete", data: full, events: 3},
		{name: "a deleted event line", data: join(lines[0], lines[1], lines[3]), events: 2, inconsistent: []string{"count"}},
		{name: "an added event line", data: join(lines[0], lines[1], lines[2], lines[2], lines[3]), events: 4, inconsistent: []string{"count"}},
		{name: "no stats line", data: join(lines[0], lines[1], lines[2]), events: 3, unfinished: true},
		{name: "a last line cut short", data: join(lines[0], lines[1], lines[2][:20]), events: 2, unfinished: true},
		{name: "the stats line cut short", data: join(lines[0], lines[1], lines[2], lines[3][:30]), events: 3, unfinished: true},
		{name: "empty", data: nil, unfinished: true},
		{name: "an event after the stats line", data: join(lines[0], lines[1], lines[3], lines[2]), events: 2, inconsistent: []string{"after-stats", "count"}},
		{name: "two stats lines", data: join(lines[0], lines[1], lines[2], lines[3], lines[3]), events: 3, inconsistent: []string{"after-stats"}},
		{
			name: "lost events erased from the stats", events: 3, inconsistent: []string{"stats"},
			data: join(lines[0], lines[1], lines[2], statsLine(func(s *traceStatsLine) { s.Stats.Matched = 5 })),
		},
		{
			name: "lost events", events: 3, lost: 2,
			data: join(lines[0], lines[1], lines[2], statsLine(func(s *traceStatsLine) { s.Stats.Matched, s.Stats.Lost = 5, 2 })),
		},
		{
			name: "a watch that did not stop cleanly", events: 3, lost: 1,
			data: join(lines[0], lines[1], lines[2], statsLine(func(s *traceStatsLine) { s.StopError = "drain timed out" })),
		},
		{
			name: "an event that could not be encoded", events: 2, lost: 1,
			data: join(lines[0], lines[1], statsLine(func(s *traceStatsLine) { s.Unwritten = 1 })),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events, stats, err := ReadTrace(tc.data)
			if err != nil {
				t.Fatal(err)
			}
			if len(events) != tc.events || stats.Unfinished != tc.unfinished || !slices.Equal(stats.Inconsistent, tc.inconsistent) || stats.Lost != tc.lost {
				t.Errorf("%d events, stats %+v; want %d events, unfinished %v, inconsistent %v, lost %d",
					len(events), stats, tc.events, tc.unfinished, tc.inconsistent, tc.lost)
			}
		})
	}
	if _, _, err := ReadTrace(join(lines[0], "{not json\n", lines[3])); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("an unreadable line in the middle must be an error naming it, got %v", err)
	}
}

// FuzzReadTrace: no input panics the trace reader, and a record it reads
// as complete and consistent has exactly as many events as delivered.
func FuzzReadTrace(f *testing.F) {
	full := traceRecord(f, fixtureEvents(true))
	f.Add(full)
	f.Add(full[:len(full)/2])
	f.Add([]byte(`{"kind":"stats","stats":{"delivered":1,"matched":1}}` + "\n"))
	f.Add([]byte("{}\n{\"kind\":\"stats\"}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		events, stats, err := ReadTrace(data)
		if err != nil || stats.Unfinished || len(stats.Inconsistent) > 0 {
			return
		}
		var last traceStatsLine
		lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
		if json.Unmarshal(lines[len(lines)-1], &last) != nil {
			t.Fatalf("read as complete without a final stats line: %q", data)
		}
		if uint64(len(events)+last.Unwritten) != last.Stats.Delivered {
			t.Fatalf("%d events read as consistent with delivered %d: %q", len(events), last.Stats.Delivered, data)
		}
	})
}

// fakeWatch delivers events and stops with stats that account for them.
type fakeWatch struct {
	events chan ebpf.Event
	n      uint64
}

func newFakeWatch(events []ebpf.Event) *fakeWatch {
	w := &fakeWatch{events: make(chan ebpf.Event, len(events)), n: uint64(len(events))}
	for _, ev := range events {
		w.events <- ev
	}
	return w
}

func (w *fakeWatch) Events() <-chan ebpf.Event { return w.events }
func (w *fakeWatch) Stop() (ebpf.Stats, error) {
	close(w.events)
	return ebpf.Stats{Counters: ebpf.Counters{Matched: w.n}, Delivered: w.n}, nil
}

// armedExecution is a run whose tracer watches events, as armTracer leaves
// it, without a container.
func armedExecution(t *testing.T, r *render.Render, events []ebpf.Event) *execution {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, TraceFile))
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	close(ready)
	x := &execution{r: r, dir: dir, result: &Result{}, opts: Options{Sink: SinkFunc(func(Event) {})}}
	x.trace = &tracing{ready: ready, watch: newFakeWatch(events), ids: fixtureIDs, file: f, out: bufio.NewWriter(f)}
	x.trace.consumed.Add(1)
	go x.consumeTrace()
	return x
}

// Issue item 8: the verdict was computed inside teardown, under its
// deadline, so judging a big trace made the container deletes after it
// fail. Teardown now only stops the trace (stopTrace ends the record and
// judges nothing); the verdict is judgeTrace's, after teardown, from the
// record alone.
func TestStoppingTheTraceJudgesNothing(t *testing.T) {
	x := armedExecution(t, fixtureRender(fixtureGit), fixtureEvents(true))
	x.stopTrace()
	if x.result.Trace.Status != "" {
		t.Fatalf("stopTrace judged the trace: %+v", x.result.Trace)
	}
	data, err := os.ReadFile(filepath.Join(x.dir, TraceFile))
	if err != nil {
		t.Fatal(err)
	}
	events, stats, err := ReadTrace(data)
	if err != nil || len(events) != 3 || stats.Unfinished || len(stats.Inconsistent) > 0 {
		t.Fatalf("the record after stopTrace: %d events, %+v, %v; want 3, ended and consistent", len(events), stats, err)
	}
	x.judgeTrace()
	if got := x.result.Trace; got.Status != verify.StatusConfirmed || got.Events != 3 || got.Mode != render.TraceVerify {
		t.Errorf("judgeTrace: %+v, want confirmed, 3 events, mode verify", got)
	}
}

// A run that never reached teardown's stopTrace (an early failure) is
// still judged: judgeTrace stops the trace itself.
func TestJudgingStopsTheTrace(t *testing.T) {
	x := armedExecution(t, fixtureRender(), fixtureEvents(true))
	x.judgeTrace()
	if got := x.result.Trace; got.Status != verify.StatusMismatch || !slices.Contains(got.Reasons, verify.ReasonUnexpectedExec) {
		t.Errorf("judgeTrace: %+v, want mismatch/unexpected-exec", got)
	}
}
