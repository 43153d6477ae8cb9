package notify

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/config/notifyconf"
	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/launcher/cgroup"
	"hookbox.dev/hookbox/launcher/cgroup/cgrouptest"
)

// Without a cgroup for helpers (rootless without a delegated subtree), the
// notifier still runs, bounded by its process group, and its outcome says
// what it ran without.
func TestUncontainedNotifierIsDegraded(t *testing.T) {
	dir := t.TempDir()
	for _, h := range []cgroup.Helpers{{}, cgroup.NoHelpers("no delegated cgroup2 subtree")} {
		out := Run(context.Background(), enabledPlan("/bin/true"), envelope(dir), Options{RecordDir: dir, Cgroups: h})
		if out.Status != StatusDelivered || !slices.Equal(out.Degraded, []string{DegradedUncontained}) {
			t.Errorf("helpers %+v: outcome %+v, want delivered, degraded %s", h, out, DegradedUncontained)
		}
		if !strings.Contains(out.Describe(), "degraded "+DegradedUncontained) {
			t.Errorf("Describe() = %q", out.Describe())
		}
	}
	// Nothing ran, so nothing ran uncontained.
	out := Run(context.Background(), enabledPlan("/nonexistent/notifier"), envelope(dir), Options{RecordDir: dir})
	if out.Status != StatusFailed || out.Degraded != nil {
		t.Errorf("start failure: %+v", out)
	}
}

// In its cgroup (root), a notifier that leaves a daemon (setsid, double
// fork, SIGTERM ignored) leaves nothing, however it ends.
func TestNotifierDaemonDoesNotSurvive(t *testing.T) {
	helpers := cgrouptest.Helpers(t)
	dir := t.TempDir()
	daemon := testenv.DaemonScript(t, dir)
	for _, tc := range []struct {
		ending, body   string
		status, reason string
	}{
		{"exit", `"$1" "$2" "$3"; while [ ! -s "$3" ]; do sleep 0.01; done; exit 0`, StatusDelivered, ""},
		{"deadline", `"$1" "$2" "$3"; sleep 60`, StatusTimedOut, ReasonDeadline},
		{"cancel", `"$1" "$2" "$3"; sleep 60`, StatusFailed, ReasonCancelled},
	} {
		t.Run(tc.ending, func(t *testing.T) {
			pidFile := filepath.Join(dir, tc.ending+".pid")
			plan := enabledPlan(script(t, dir, "notifier-"+tc.ending, tc.body), daemon, "hbx-notify-daemon-"+tc.ending, pidFile)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			switch tc.ending {
			case "deadline":
				plan.Timeout = time.Second
			case "cancel":
				go func() { testenv.ReadPidFile(t, pidFile, 10*time.Second); cancel() }()
			}
			out := Run(ctx, plan, envelope(dir), Options{RecordDir: dir, Grace: 200 * time.Millisecond, Cgroups: helpers})
			if out.Status != tc.status || out.Reason != tc.reason || out.Degraded != nil {
				t.Fatalf("outcome %+v, want %s %s, contained", out, tc.status, tc.reason)
			}
			if pid := testenv.ReadPidFile(t, pidFile, time.Second); testenv.Survived(t, pid, 2*time.Second) {
				t.Errorf("the notifier's daemon %d survived (%s)", pid, tc.ending)
			}
		})
	}
}

// Starts says whether Run starts a notifier: the launcher's question before
// it seals the result.
func TestPlanStarts(t *testing.T) {
	off := false
	filtered := enabledPlan("/bin/true")
	filtered.Filter = notifyconf.Filter{Statuses: []string{"completed"}}
	for _, tc := range []struct {
		name string
		plan Plan
		want bool
	}{
		{"enabled", enabledPlan("/bin/true"), true},
		{"not configured", Resolve(), false},
		{"disabled", Resolve(notifyconf.Setting{Present: true, Enabled: &off, Argv: []string{"/bin/true"}}), false},
		{"invalid", Resolve(notifyconf.Setting{Present: true, Reason: notifyconf.ReasonConfigInvalid}), false},
		{"filtered out", filtered, false},
		{"refused argv", Plan{Enabled: true, Argv: []string{"/bin/post", "x{payload}"}}, false},
	} {
		if got := tc.plan.Starts("failed", "demo"); got != tc.want {
			t.Errorf("%s: Starts = %v, want %v", tc.name, got, tc.want)
		}
	}
}
