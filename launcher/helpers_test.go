package launcher

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/config/notifyconf"
	"hookbox.dev/hookbox/internal/config/secretsconf"
	"hookbox.dev/hookbox/internal/initsecrets"
	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/launcher/cgroup"
	"hookbox.dev/hookbox/launcher/cgroup/cgrouptest"
	"hookbox.dev/hookbox/notify"
	"hookbox.dev/hookbox/render"
)

// A notifier that will run without a cgroup is in the sealed result; one
// that will not run, or will have a cgroup, is not.
func TestNotifyDegraded(t *testing.T) {
	on := notify.Resolve(notifyconf.Setting{Present: true, Source: notifyconf.SourceFlag, Argv: []string{"/bin/true"}})
	onlyCompleted := on
	onlyCompleted.Filter = notifyconf.Filter{Statuses: []string{string(StatusCompleted)}}
	res := &Result{Status: StatusFailed, Spawn: "demo"}
	for _, tc := range []struct {
		name    string
		plan    notify.Plan
		helpers cgroup.Helpers
		want    string
	}{
		{"no cgroup for helpers", on, cgroup.NoHelpers("no delegated subtree"), "helper-cgroup-unavailable:notify"},
		{"zero helpers", on, cgroup.Helpers{}, "helper-cgroup-unavailable:notify"},
		{"helpers get cgroups", on, cgroup.RootHelpers(), ""},
		{"no notifier", notify.Resolve(), cgroup.NoHelpers("x"), ""},
		{"filtered out", onlyCompleted, cgroup.NoHelpers("x"), ""},
	} {
		if got := notifyDegraded(tc.plan, tc.helpers, res); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// Each backend's cgroups say where helpers go.
func TestBackendHelpers(t *testing.T) {
	if h := (runtimeCgroups{}).Helpers(); h.Parent != cgroup.HelperParent || h.UnifiedOnly {
		t.Errorf("rootful helpers %+v", h)
	}
	d := cgroup.Delegation{Root: "/user.slice/u@1000.service", Jobs: "/user.slice/u@1000.service/jobs"}
	if h := (delegatedCgroups{d}).Helpers(); h.Parent != d.Jobs+"/helpers" || !h.UnifiedOnly {
		t.Errorf("delegated helpers %+v", h)
	}
	if h := (noCgroups{"no delegated subtree"}).Helpers(); h.Parent != "" || h.Unavailable != "no delegated subtree" {
		t.Errorf("no helpers %+v", h)
	}
}

// resolveEnv reports a lookup that ran without a cgroup once, with why.
func TestResolveEnvReportsUncontainedLookups(t *testing.T) {
	dir := t.TempDir()
	lookup := filepath.Join(dir, "lookup")
	if err := os.WriteFile(lookup, []byte("#!/bin/sh\necho v\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &render.Render{Process: render.Process{Env: []render.EnvVar{
		{Name: "HBX_UNSET_ONE", Source: render.EnvSecret}, {Name: "HBX_UNSET_TWO", Source: render.EnvSecret}}}}
	l := secretsconf.Lookup{State: secretsconf.Enabled, Argv: []string{lookup, "{name}"}, Timeout: 10 * time.Second}
	_, stream, _, degraded, err := resolveEnv(context.Background(), r, l, cgroup.NoHelpers("no delegated subtree"), "hbx-test")
	if err != nil {
		t.Fatal(err)
	}
	if values, err := initsecrets.Read(bytes.NewReader(stream), []string{"HBX_UNSET_ONE", "HBX_UNSET_TWO"}); err != nil || values["HBX_UNSET_ONE"] != "v" || values["HBX_UNSET_TWO"] != "v" {
		t.Fatalf("the lookups' values did not reach the secret stream: %v", err)
	}
	if len(degraded) != 1 || degraded[0].reason != "helper-cgroup-unavailable:lookup" || !strings.Contains(degraded[0].why, "no delegated subtree") {
		t.Errorf("degraded %+v", degraded)
	}
}

// gc kills what runs in a helper cgroup whose hookbox is gone and removes
// it; a live hookbox's helper is left alone.
func TestCollectHelpers(t *testing.T) {
	helpers := cgrouptest.Helpers(t)
	dir := t.TempDir()
	live, err := helpers.New("hbx-live", "notify")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Destroy(context.Background())
	// The killed hookbox: this test binary, re-run, makes a helper cgroup,
	// leaves a daemon in it and SIGKILLs itself.
	owner := exec.Command(os.Args[0])
	owner.Env = append(os.Environ(), ownerEnv+"="+helpers.Parent+":"+dir)
	out, _ := owner.CombinedOutput()
	pid := testenv.ReadPidFile(t, filepath.Join(dir, "daemon.pid"), 5*time.Second)

	report := &GCReport{}
	collectHelpers(context.Background(), helpers, true, report)
	if len(report.Actions) != 1 || report.Actions[0].What != "helper-cgroup" || report.Actions[0].RunID != "hbx-killed" ||
		!strings.Contains(report.Actions[0].Detail, "(lookup-1, 1 processes)") {
		t.Fatalf("dry run: %+v\n%s", report.Actions, out)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the dry run ended the daemon: %v", err)
	}
	report = &GCReport{}
	collectHelpers(context.Background(), helpers, false, report)
	if len(report.Actions) != 1 || report.Actions[0].Error != "" {
		t.Fatalf("gc: %+v", report.Actions)
	}
	if testenv.Survived(t, pid, 2*time.Second) {
		t.Errorf("gc left the daemon %d", pid)
	}
	if left, err := helpers.Abandoned(); len(left) != 0 || err != nil {
		t.Errorf("still abandoned: %+v %v", left, err)
	}
	if ok, _ := cgroup.Exists(live.Run.Path); !ok {
		t.Error("gc removed a live hookbox's helper cgroup")
	}
}

// ownerEnv is PARENT:DIR for the owner stand-in of TestCollectHelpers.
const ownerEnv = "HBX_TEST_HELPER_OWNER"

func TestMain(m *testing.M) {
	if v := os.Getenv(ownerEnv); v != "" {
		killedHelperOwner(v)
	}
	os.Exit(m.Run())
}

// killedHelperOwner is the killed hookbox of TestCollectHelpers: it makes a
// helper cgroup under parent, leaves a daemon in it and SIGKILLs itself.
func killedHelperOwner(v string) {
	parent, dir, _ := strings.Cut(v, ":")
	h := cgroup.RootHelpers()
	h.Parent = parent
	c, err := h.New("hbx-killed", "lookup-1")
	if err != nil {
		panic(err)
	}
	daemon, err := testenv.WriteDaemonScript(dir)
	if err != nil {
		panic(err)
	}
	pidFile := filepath.Join(dir, "daemon.pid")
	cmd := exec.Command(daemon, "hbx-gc-daemon", pidFile)
	if err := c.Start(cmd); err != nil {
		panic(err)
	}
	cmd.Wait()
	for _, err := os.Stat(pidFile); err != nil; _, err = os.Stat(pidFile) {
		time.Sleep(10 * time.Millisecond)
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
}
