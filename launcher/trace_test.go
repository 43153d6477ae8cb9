package launcher

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
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
