package secrets

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/launcher/cgroup"
	"hookbox.dev/hookbox/launcher/cgroup/cgrouptest"
)

// Without a cgroup for helpers, a lookup still runs, bounded by its
// process group, and the resolver is told what it ran without.
func TestUncontainedLookupIsReported(t *testing.T) {
	dir := t.TempDir()
	r := enabled(writeScript(t, dir, "lookup", "echo value\n"), "{name}")
	r.Cgroups = cgroup.NoHelpers("no delegated cgroup2 subtree")
	var told [][2]string
	r.Degraded = func(reason, why string) { told = append(told, [2]string{reason, why}) }
	got, err := r.Resolve(context.Background(), []string{"A"})
	if err != nil || got["A"] != "value" {
		t.Fatalf("Resolve = %v, %v", got, err)
	}
	if len(told) != 1 || told[0][0] != "helper-cgroup-unavailable:lookup" || !strings.Contains(told[0][1], "no delegated cgroup2 subtree") {
		t.Errorf("told %v", told)
	}
}

// In its cgroup (root), whatever a lookup leaves (a daemon: setsid, double
// fork, SIGTERM ignored) is killed when it exits, times out or is
// cancelled; the value still goes only to the caller, and a failure still
// says only the basename, the variable and the exit status.
func TestLookupDaemonDoesNotSurvive(t *testing.T) {
	helpers := cgrouptest.Helpers(t)
	dir := t.TempDir()
	daemon := testenv.DaemonScript(t, dir)
	for _, tc := range []struct {
		ending, body string
		reason       ResolveReason
		status       int
	}{
		{"exit", `"$2" "$3" "$4"; while [ ! -s "$4" ]; do sleep 0.01; done; echo ` + sentinel, "", 0},
		{"exit-nonzero", `"$2" "$3" "$4"; while [ ! -s "$4" ]; do sleep 0.01; done; echo ` + sentinel + `; exit 7`, ReasonLookupFailed, 7},
		{"timeout", `"$2" "$3" "$4"; sleep 60`, ReasonLookupTimeout, -1},
		{"cancel", `"$2" "$3" "$4"; sleep 60`, ReasonLookupCanceled, -1},
	} {
		t.Run(tc.ending, func(t *testing.T) {
			pidFile := filepath.Join(dir, tc.ending+".pid")
			r := enabled(writeScript(t, dir, "lookup-"+tc.ending, tc.body+"\n"), "{name}", daemon, "hbx-lookup-daemon-"+tc.ending, pidFile)
			r.Cgroups, r.RunID = helpers, "hbx-test"
			r.Degraded = func(reason, why string) { t.Errorf("degraded %s: %s", reason, why) }
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			switch tc.ending {
			case "timeout":
				r.Lookup.Timeout = time.Second
			case "cancel":
				go func() { testenv.ReadPidFile(t, pidFile, 10*time.Second); cancel() }()
			}
			got, err := r.Resolve(ctx, []string{"HBX_KEY"})
			var re *ResolveError
			switch {
			case tc.reason == "" && (err != nil || got["HBX_KEY"] != sentinel):
				t.Errorf("Resolve = %v, %v; want the value", got, err)
			case tc.reason != "" && (!errors.As(err, &re) || re.Reason != tc.reason || re.ExitStatus != tc.status || got != nil):
				t.Errorf("Resolve = %v, %v; want %s with status %d", got, err, tc.reason, tc.status)
			case err != nil:
				msg := err.Error()
				if !strings.Contains(msg, `"lookup-`+tc.ending+`"`) || !strings.Contains(msg, "HBX_KEY") ||
					strings.Contains(msg, sentinel) || strings.Contains(msg, dir) || strings.Contains(msg, "hbx-lookup-daemon") {
					t.Errorf("error %q: want the basename and the variable, no value, path or argument", msg)
				}
			}
			if pid := testenv.ReadPidFile(t, pidFile, time.Second); testenv.Survived(t, pid, 2*time.Second) {
				t.Errorf("the lookup's daemon %d survived (%s)", pid, tc.ending)
			}
		})
	}
}

// A descendant that keeps the lookup's stdout open is in the lookup's
// cgroup, so it ends with the lookup: the value printed is used, where a
// lookup bounded by its process group only would fail (it cannot know the
// output is complete).
func TestLookupStdoutHolderEndsWithIt(t *testing.T) {
	helpers := cgrouptest.Helpers(t)
	dir := t.TempDir()
	r := enabled(writeScript(t, dir, "lookup", `setsid sh -c 'trap "" TERM; sleep 3600' &
echo `+sentinel+"\n"), "{name}")
	r.Cgroups, r.RunID = helpers, "hbx-test"
	start := time.Now()
	got, err := r.Resolve(context.Background(), []string{"HBX_KEY"})
	if err != nil || got["HBX_KEY"] != sentinel {
		t.Fatalf("Resolve = %v, %v", got, err)
	}
	if d := time.Since(start); d > waitDelay {
		t.Errorf("took %v: the stdout holder was not killed with the lookup", d)
	}
}

// Each lookup of one resolution has a cgroup of its own, numbered in the
// order the lookups run.
func TestLookupCgroupsAreNumbered(t *testing.T) {
	helpers := cgrouptest.Helpers(t)
	dir := t.TempDir()
	r := enabled(writeScript(t, dir, "lookup", `cat /proc/self/cgroup > "$2/$1"; echo v`+"\n"), "{name}", dir)
	r.Cgroups, r.RunID = helpers, "hbx-test"
	r.LookupEnv = envOf(map[string]string{"B": "from-env"})
	if _, err := r.Resolve(context.Background(), []string{"A", "B", "C"}); err != nil {
		t.Fatal(err)
	}
	for name, role := range map[string]string{"A": "lookup-1", "C": "lookup-2"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		member, err := host.ParseProcCgroup(string(data))
		if err != nil {
			t.Fatal(err)
		}
		if !member.Within(helpers.Parent) || !strings.Contains(string(data), "/hbx-test."+role+"@") {
			t.Errorf("lookup of %s ran in %s, want %s/hbx-test.%s@…", name, data, helpers.Parent, role)
		}
	}
}
