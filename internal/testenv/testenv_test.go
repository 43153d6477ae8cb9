package testenv

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// recorder is a testing.TB whose Fatal and Skip end the gate under test,
// as runtime.Goexit ends a real test, and record what it said.
type recorder struct {
	testing.TB
	outcome string // "run", "skip" or "fail"
	msg     string
}

type stop struct{}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.outcome, r.msg = "fail", fmt.Sprintf(format, args...)
	panic(stop{})
}
func (r *recorder) Skipf(format string, args ...any) {
	r.outcome, r.msg = "skip", fmt.Sprintf(format, args...)
	panic(stop{})
}
func (r *recorder) Skip(args ...any) { r.Skipf("%s", fmt.Sprint(args...)) }

// gate runs f against a recorder and returns what it decided.
func gate(f func(testing.TB)) (r *recorder) {
	r = &recorder{outcome: "run"}
	defer func() {
		if v := recover(); v != nil && v != (stop{}) {
			panic(v)
		}
	}()
	f(r)
	return r
}

var (
	met   = Requirement{"met", func() string { return "" }}
	unmet = Requirement{"unmet", func() string { return "not here" }}
)

func TestRequire(t *testing.T) {
	for _, tc := range []struct {
		name        string
		integration string
		gate        func(testing.TB, ...Requirement)
		reqs        []Requirement
		want        string // outcome
		msgHas      string
	}{
		{"require met outside", "", Require, []Requirement{met}, "run", ""},
		{"require unmet outside", "", Require, []Requirement{met, unmet}, "skip", "requirement unmet: not here (set HOOKBOX_INTEGRATION=1"},
		{"require met inside", "1", Require, []Requirement{met}, "run", ""},
		{"require unmet inside", "1", Require, []Requirement{unmet, met}, "fail", "requirement unmet: not here (HOOKBOX_INTEGRATION=1 demands it)"},
		{"require other value is outside", "yes", Require, []Requirement{unmet}, "skip", "requirement unmet"},
		{"integration met outside", "", RequireIntegration, []Requirement{met}, "skip", "integration test: set HOOKBOX_INTEGRATION=1"},
		{"integration unmet outside", "", RequireIntegration, []Requirement{unmet}, "skip", "requirement unmet: not here"},
		{"integration none outside", "", RequireIntegration, nil, "skip", "integration test"},
		{"integration met inside", "1", RequireIntegration, []Requirement{met}, "run", ""},
		{"integration unmet inside", "1", RequireIntegration, []Requirement{met, unmet}, "fail", "requirement unmet: not here (HOOKBOX_INTEGRATION=1 demands it)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(IntegrationEnv, tc.integration)
			r := gate(func(tb testing.TB) { tc.gate(tb, tc.reqs...) })
			if r.outcome != tc.want || !strings.Contains(r.msg, tc.msgHas) {
				t.Errorf("outcome %s %q, want %s with %q", r.outcome, r.msg, tc.want, tc.msgHas)
			}
		})
	}
}

func TestMissing(t *testing.T) {
	t.Setenv(RequireRootEnv, "")
	if r := gate(func(tb testing.TB) { Missing(tb, "no cgroup2") }); r.outcome != "skip" || r.msg != "no cgroup2" {
		t.Errorf("outside: %s %q", r.outcome, r.msg)
	}
	t.Setenv(RequireRootEnv, "1")
	if r := gate(func(tb testing.TB) { Missing(tb, "no cgroup2") }); r.outcome != "fail" || r.msg != "no cgroup2 (HOOKBOX_REQUIRE_ROOT=1 demands it)" {
		t.Errorf("under HOOKBOX_REQUIRE_ROOT=1: %s %q", r.outcome, r.msg)
	}
}

func TestRequireRoot(t *testing.T) {
	for _, env := range []string{"", "1"} {
		t.Setenv(RequireRootEnv, env)
		r := gate(RequireRoot)
		want := "run"
		if Root.Check() != "" {
			want = "skip"
			if env == "1" {
				want = "fail"
			}
		}
		if r.outcome != want {
			t.Errorf("HOOKBOX_REQUIRE_ROOT=%q: %s %q, want %s", env, r.outcome, r.msg, want)
		}
	}
}

func TestUnmet(t *testing.T) {
	t.Setenv(IntegrationEnv, "")
	if r := gate(func(tb testing.TB) { Unmet(tb, "tracer", "no BPF") }); r.outcome != "skip" || !strings.HasPrefix(r.msg, "requirement tracer: no BPF (set HOOKBOX_INTEGRATION=1") {
		t.Errorf("outside: %s %q", r.outcome, r.msg)
	}
	t.Setenv(IntegrationEnv, "1")
	if r := gate(func(tb testing.TB) { Unmet(tb, "tracer", "no BPF") }); r.outcome != "fail" || r.msg != "requirement tracer: no BPF (HOOKBOX_INTEGRATION=1 demands it)" {
		t.Errorf("under HOOKBOX_INTEGRATION=1: %s %q", r.outcome, r.msg)
	}
}

func TestMissingBuildkit(t *testing.T) {
	t.Setenv(RequireBuildkitEnv, "")
	if r := gate(func(tb testing.TB) { MissingBuildkit(tb, "no buildkitd") }); r.outcome != "skip" || r.msg != "no buildkitd" {
		t.Errorf("outside: %s %q", r.outcome, r.msg)
	}
	t.Setenv(RequireBuildkitEnv, "1")
	if r := gate(func(tb testing.TB) { MissingBuildkit(tb, "no buildkitd") }); r.outcome != "fail" || r.msg != "no buildkitd (HOOKBOX_REQUIRE_BUILDKIT=1 demands it)" {
		t.Errorf("under HOOKBOX_REQUIRE_BUILDKIT=1: %s %q", r.outcome, r.msg)
	}
}

func TestRequireRootlessUndelegated(t *testing.T) {
	// The rootless pass runs as a non-root user: as root, inside it fails.
	asRoot := os.Geteuid() == 0
	both := "run"
	if asRoot {
		both = "fail"
	}
	for _, tc := range []struct {
		rootless, undelegated, want, msgHas string
	}{
		{"", "", "skip", "make test-rootless"},
		{"", "1", "skip", "make test-rootless"},
		{"1", "", "fail", ""},
		{"1", "1", both, ""},
	} {
		if tc.want == "fail" && !asRoot {
			tc.msgHas = "HOOKBOX_ROOTLESS_UNDELEGATED=1"
		}
		t.Setenv(RootlessEnv, tc.rootless)
		t.Setenv(RootlessUndelegatedEnv, tc.undelegated)
		if r := gate(RequireRootlessUndelegated); r.outcome != tc.want || !strings.Contains(r.msg, tc.msgHas) {
			t.Errorf("HOOKBOX_ROOTLESS=%q HOOKBOX_ROOTLESS_UNDELEGATED=%q: %s %q, want %s with %q", tc.rootless, tc.undelegated, r.outcome, r.msg, tc.want, tc.msgHas)
		}
	}
}
