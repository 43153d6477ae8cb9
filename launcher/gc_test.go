package launcher

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/host"
)

// abandonedRecord writes the intent of a run whose hookbox is gone (this
// process's pid with another start time) and that was to have no cgroup.
func abandonedRecord(t *testing.T, stateDir, id string) string {
	t.Helper()
	self, err := host.StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(RunsDir(stateDir), id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	intent := Intent{SchemaVersion: 1, RunID: id, ContainerID: id, SnapshotKey: id, HookboxPID: os.Getpid(), HookboxStart: self + 1,
		Address: "/run/hookbox-test-gone/containerd.sock", CreatedAt: time.Now().UTC()}
	if err := writeJSON(filepath.Join(dir, IntentFile), intent, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readMark(t *testing.T, dir string) (Collected, bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, CollectedFile))
	if err != nil {
		return Collected{}, false
	}
	var mark Collected
	if err := json.Unmarshal(data, &mark); err != nil {
		t.Fatalf("%s: %v", CollectedFile, err)
	}
	return mark, true
}

// Without containerd, gc cannot check an abandoned run's containerd
// resources: it reports them as left, marks the run incomplete and checks
// it again next time.
func TestGCWithoutContainerdNeverMarksARunCollected(t *testing.T) {
	state := t.TempDir()
	dir := abandonedRecord(t, state, "hbx-test-nocontainerd")
	for pass := 1; pass <= 2; pass++ {
		report, err := GC(context.Background(), nil, state, false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(report.Left, func(l GCLeft) bool { return l.RunID == "hbx-test-nocontainerd" && l.What == "containerd" }) {
			t.Errorf("pass %d: left %+v, want the run's containerd resources unchecked", pass, report.Left)
		}
		if mark, ok := readMark(t, dir); !ok || mark.Complete || len(mark.Left) == 0 {
			t.Errorf("pass %d: mark %+v (written: %v), want an incomplete mark listing what is left", pass, mark, ok)
		}
	}
}

// A complete mark ends gc's interest in a run; a mark without "complete"
// (an older hookbox's, written whatever it left) does not.
func TestGCMarks(t *testing.T) {
	state := t.TempDir()
	done := abandonedRecord(t, state, "hbx-test-complete")
	if err := writeJSON(filepath.Join(done, CollectedFile), Collected{Complete: true, CheckedAt: time.Now()}, 0o644); err != nil {
		t.Fatal(err)
	}
	legacy := abandonedRecord(t, state, "hbx-test-legacy")
	if err := writeJSON(filepath.Join(legacy, CollectedFile), map[string]any{"collected_at": time.Now()}, 0o644); err != nil {
		t.Fatal(err)
	}
	report, err := GC(context.Background(), nil, state, false)
	if err != nil {
		t.Fatal(err)
	}
	var checked []string
	for _, l := range report.Left {
		if !slices.Contains(checked, l.RunID) {
			checked = append(checked, l.RunID)
		}
	}
	if !slices.Equal(checked, []string{"hbx-test-legacy"}) {
		t.Errorf("gc checked %v, want only the run with the legacy mark", checked)
	}
}

func TestFIFOSets(t *testing.T) {
	root := t.TempDir()
	mk := func(dir string, files ...string) {
		os.MkdirAll(filepath.Join(root, dir), 0o700)
		for _, f := range files {
			os.WriteFile(filepath.Join(root, dir, f), nil, 0o600)
		}
	}
	mk("1", "hbx-a-stdout", "hbx-a-stderr")
	mk("2", "hbx-a-stdin", "hbx-a-stdout", "hbx-a-stderr")
	mk("3", "hbx-b-stdout", "hbx-c-stderr") // two tasks: not one set
	mk("4", "hbx-d-stdout", "notes.txt")
	mk("5")
	os.WriteFile(filepath.Join(root, "hbx-e-stdout"), nil, 0o600) // not in a set directory
	got := fifoSets(root)
	want := map[string][]string{"hbx-a": {filepath.Join(root, "1"), filepath.Join(root, "2")}}
	if len(got) != len(want) || !slices.Equal(got["hbx-a"], want["hbx-a"]) {
		t.Errorf("fifoSets = %v, want %v", got, want)
	}
	if sets := fifoSets(filepath.Join(root, "missing")); len(sets) != 0 {
		t.Errorf("a missing FIFO directory: %v", sets)
	}
}

// A run is clean by its result unless the result's own reasons name
// teardown-incomplete: the reason's text elsewhere (an error, a spawn
// name) does not make it unclean, and an unreadable result is not clean.
func TestFinishedCleanlyReadsOnlyTheReasons(t *testing.T) {
	for _, tc := range []struct {
		name   string
		result string
		clean  bool
	}{
		{"clean", `{"status": "completed", "reasons": ["no-declared-artifact"]}`, true},
		{"incomplete", `{"status": "infra_error", "reasons": ["cancelled-by-signal", "teardown-incomplete"]}`, false},
		{"named in the error only", `{"status": "failed", "error": "\"teardown-incomplete\" was not the reason"}`, true},
		{"truncated", `{"status": "completed", "reasons": [`, false},
		{"truncated after the reason", `{"reasons": ["teardown-incomplete"`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, ResultFile), []byte(tc.result), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := finishedCleanly(dir); got != tc.clean {
				t.Errorf("finishedCleanly(%s) = %v, want %v", tc.result, got, tc.clean)
			}
		})
	}
}

// The check before a run looks only at the runs marked active: an
// abandoned run without a mark is left to hookbox gc, which reads every
// record; a mark goes once its run finished cleanly, was collected
// completely, or has no record; a live run's mark stays.
func TestPreRunCollectionReadsTheActiveMarks(t *testing.T) {
	state := t.TempDir()
	marked := abandonedRecord(t, state, "hbx-test-marked")
	abandonedRecord(t, state, "hbx-test-unmarked")
	clean := abandonedRecord(t, state, "hbx-test-clean")
	if err := writeJSON(filepath.Join(clean, ResultFile), Result{SchemaVersion: ResultSchemaVersion, RunID: "hbx-test-clean"}, 0o644); err != nil {
		t.Fatal(err)
	}
	collectedDir := abandonedRecord(t, state, "hbx-test-collected")
	if err := writeJSON(filepath.Join(collectedDir, CollectedFile), Collected{Complete: true, CheckedAt: time.Now()}, 0o644); err != nil {
		t.Fatal(err)
	}
	live := abandonedRecord(t, state, "hbx-test-live")
	self, err := host.StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(filepath.Join(live, IntentFile), Intent{SchemaVersion: 1, RunID: "hbx-test-live", HookboxPID: os.Getpid(), HookboxStart: self}, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"hbx-test-marked", "hbx-test-clean", "hbx-test-collected", "hbx-test-live", "hbx-test-no-record"} {
		if err := markActive(state, id); err != nil {
			t.Fatal(err)
		}
	}
	marks := func() []string {
		entries, _ := os.ReadDir(ActiveDir(state))
		var ids []string
		for _, e := range entries {
			ids = append(ids, e.Name())
		}
		return ids
	}

	report, err := collect(context.Background(), nil, state, false, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(report.Live, []string{"hbx-test-live"}) {
		t.Errorf("live %v, want the live run", report.Live)
	}
	var checked []string
	for _, l := range report.Left {
		if !slices.Contains(checked, l.RunID) {
			checked = append(checked, l.RunID)
		}
	}
	if !slices.Equal(checked, []string{"hbx-test-marked"}) {
		t.Errorf("collected %v, want only the marked abandoned run (the unmarked one is hookbox gc's)", checked)
	}
	if _, ok := readMark(t, marked); !ok {
		t.Error("the marked abandoned run has no collected mark")
	}
	// Without containerd the marked run is not collected completely: its
	// mark stays for the next check, as does the live run's.
	if got := marks(); !slices.Equal(got, []string{"hbx-test-live", "hbx-test-marked"}) {
		t.Errorf("marks after the check: %v, want the live and the incompletely collected run's", got)
	}

	// hookbox gc reads every record: the unmarked abandoned run too.
	report, err = GC(context.Background(), nil, state, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(report.Left, func(l GCLeft) bool { return l.RunID == "hbx-test-unmarked" }) {
		t.Errorf("hookbox gc left %+v, want the unmarked abandoned run checked", report.Left)
	}
}
