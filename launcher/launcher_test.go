package launcher

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/verify"
)

func TestNewRunID(t *testing.T) {
	seen := map[string]bool{}
	valid := regexp.MustCompile(`^hbx-[0-9a-z]+-[0-9a-f]{8}$`)
	now := time.Now()
	prev := ""
	for i := 0; i < 1000; i++ {
		id := NewRunID(now.Add(time.Duration(i) * time.Millisecond))
		if !valid.MatchString(id) || len(id) > 63 {
			t.Fatalf("run id %q is not a DNS-1123-safe containerd id", id)
		}
		if seen[id] {
			t.Fatalf("duplicate run id %q", id)
		}
		if id[:12] < prev[:min(12, len(prev))] {
			t.Fatalf("run ids must sort by start time: %s after %s", id, prev)
		}
		seen[id], prev = true, id
	}
}

func TestDecideStatus(t *testing.T) {
	code := func(c int) *int { return &c }
	for _, tc := range []struct {
		name      string
		killedFor string
		oom       bool
		exit      *int
		status    Status
		reason    string
		signal    string
	}{
		{"clean exit", "", false, code(0), StatusCompleted, "", ""},
		{"engine failure", "", false, code(3), StatusFailed, "", ""},
		{"timeout wins over exit code", ReasonTimeout, false, code(143), StatusTimedOut, ReasonTimeout, "terminated"},
		{"first output watchdog", ReasonFirstOutput, false, code(137), StatusTimedOut, ReasonFirstOutput, "killed"},
		{"idle watchdog", ReasonIdle, false, nil, StatusTimedOut, ReasonIdle, ""},
		{"cancelled", ReasonSignal, false, code(143), StatusCancelled, ReasonSignal, "terminated"},
		{"oom", "", true, code(137), StatusOOMKilled, ReasonOOM, "killed"},
		{"oom without an exit status", "", true, nil, StatusOOMKilled, ReasonOOM, ""},
		{"a child's oom, engine exits 0", "", true, code(0), StatusCompleted, ReasonOOM, ""},
		{"a child's oom, engine fails", "", true, code(1), StatusFailed, ReasonOOM, ""},
		{"unknown exit", "", false, nil, StatusInfraError, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := &execution{result: &Result{ExitCode: tc.exit}, killedFor: tc.killedFor, r: &render.Render{}}
			x.decideStatus(tc.oom)
			if x.result.Status != tc.status {
				t.Errorf("status %s, want %s", x.result.Status, tc.status)
			}
			if tc.reason != "" && !slices.Contains(x.result.Reasons, tc.reason) {
				t.Errorf("reasons %v lack %s", x.result.Reasons, tc.reason)
			}
			if x.result.Signal != tc.signal {
				t.Errorf("signal %q, want %q", x.result.Signal, tc.signal)
			}
		})
	}
	// An infrastructure error is never overwritten by a later decision.
	x := &execution{result: &Result{Status: StatusInfraError}, r: &render.Render{}}
	x.decideStatus(true)
	if x.result.Status != StatusInfraError {
		t.Errorf("infra_error was replaced by %s", x.result.Status)
	}
}

// TestListRunsShowsVerdict: a run that completed with a contradicted trace
// is listed with its mismatch, not as a plain success.
func TestListRunsShowsVerdict(t *testing.T) {
	state := t.TempDir()
	dir := filepath.Join(RunsDir(state), "hbx-1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	zero := 0
	if err := writeJSON(filepath.Join(dir, IntentFile), Intent{SchemaVersion: 1, RunID: "hbx-1", Spawn: "s", CreatedAt: time.Now()}, 0o644); err != nil {
		t.Fatal(err)
	}
	res := Result{SchemaVersion: 1, RunID: "hbx-1", Status: StatusCompleted, ExitCode: &zero, Trace: TraceResult{Mode: render.TraceVerify, Status: verify.StatusMismatch}}
	if err := writeJSON(filepath.Join(dir, ResultFile), res, 0o644); err != nil {
		t.Fatal(err)
	}
	runs, err := ListRuns(state)
	if err != nil || len(runs) != 1 {
		t.Fatalf("ListRuns: %v %v", runs, err)
	}
	if runs[0].Status != StatusCompleted || runs[0].Verdict != verify.StatusMismatch {
		t.Errorf("got status %s verdict %s, want completed + mismatch", runs[0].Status, runs[0].Verdict)
	}
}
