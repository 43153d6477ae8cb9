package oci

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// A native-ABI profile keeps every name its architecture has (and every
// name no table knows), drops the names only other architectures have and
// the rules left empty, and leaves rules' actions and arguments alone.
func TestNativeNames(t *testing.T) {
	eperm := uint(1)
	rules := []specs.LinuxSyscall{
		{Names: []string{"read", "stat64", "chown32", "cachestat", "not_a_syscall_anywhere"}, Action: specs.ActAllow},
		{Names: []string{"socketcall", "_llseek"}, Action: specs.ActAllow},
		{Names: []string{"personality"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Value: 8, Op: specs.OpEqualTo}}},
		{Names: []string{"ptrace", "waitpid"}, Action: specs.ActErrno, ErrnoRet: &eperm},
	}
	got := nativeNames(slices.Clone(rules), "amd64")
	if len(got) != 3 {
		t.Fatalf("rules %+v: want 3 (the rule of socketcall and _llseek dropped)", got)
	}
	if want := []string{"read", "cachestat", "not_a_syscall_anywhere"}; !slices.Equal(got[0].Names, want) {
		t.Errorf("names %v, want %v", got[0].Names, want)
	}
	if got[1].Names[0] != "personality" || len(got[1].Args) != 1 || got[1].Args[0].Value != 8 {
		t.Errorf("conditional rule changed: %+v", got[1])
	}
	if !slices.Equal(got[2].Names, []string{"ptrace"}) || got[2].Action != specs.ActErrno || *got[2].ErrnoRet != 1 {
		t.Errorf("errno rule: %+v", got[2])
	}
	if !slices.Equal(rules[0].Names, []string{"read", "stat64", "chown32", "cachestat", "not_a_syscall_anywhere"}) {
		t.Errorf("the input rule was changed: %v", rules[0].Names)
	}
	// arm64 has neither stat64 nor the x86-only names, and has no
	// _llseek either; its own names stay.
	arm := nativeNames(slices.Clone(rules), "arm64")
	if !slices.Contains(arm[0].Names, "read") || slices.Contains(arm[0].Names, "stat64") {
		t.Errorf("arm64 names %v", arm[0].Names)
	}
}

// The table is golang.org/x/sys's: spot checks against names every
// architecture has and names only 32-bit ones do.
func TestSyscallArches(t *testing.T) {
	for _, n := range []string{"read", "execve", "openat", "clone3"} {
		for _, a := range []string{"amd64", "arm64", "riscv64", "s390x", "loong64"} {
			if arches, _ := syscallArches(n); !slices.Contains(arches, a) {
				t.Errorf("%s: %s missing", n, a)
			}
		}
	}
	for _, n := range []string{"stat64", "chown32", "fcntl64"} {
		arches, _ := syscallArches(n)
		if slices.Contains(arches, "amd64") || !slices.Contains(arches, "386") {
			t.Errorf("%s: %v, want 386 and not amd64", n, arches)
		}
	}
}
