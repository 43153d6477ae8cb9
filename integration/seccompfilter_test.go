package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"hookbox.dev/hookbox/internal/testenv"
)

// ptraceSeccompGetFilter is PTRACE_SECCOMP_GET_FILTER (linux/ptrace.h).
const ptraceSeccompGetFilter = 0x420c

// loadedFilter returns the classic BPF program of the first seccomp filter
// of process pid, as the kernel holds it.
func loadedFilter(t *testing.T, pid int) []byte {
	t.Helper()
	// ptrace requests come from the thread that attached.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := syscall.PtraceAttach(pid); err != nil {
		t.Fatalf("ptrace attach %d: %v", pid, err)
	}
	defer syscall.PtraceDetach(pid)
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, syscall.WALL, nil); err != nil {
		t.Fatal(err)
	}
	n, _, errno := syscall.Syscall6(syscall.SYS_PTRACE, ptraceSeccompGetFilter, uintptr(pid), 0, 0, 0, 0)
	if errno != 0 || n == 0 {
		t.Fatalf("PTRACE_SECCOMP_GET_FILTER: %v (%d instructions)", errno, n)
	}
	prog := make([]byte, n*8) // struct sock_filter is 8 bytes
	if _, _, errno := syscall.Syscall6(syscall.SYS_PTRACE, ptraceSeccompGetFilter, uintptr(pid), 0, uintptr(unsafe.Pointer(&prog[0])), 0, 0); errno != 0 {
		t.Fatal(errno)
	}
	return prog
}

// The run's seccomp program is installed by hookbox-init, not runc: the
// spec holds no profile, and the engine (the init's child) and the init
// itself run under exactly the program hookbox compiled, byte for byte, as
// the kernel holds it; it is their only filter.
func TestInitInstallsTheRunsFilter(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.Runc)
	tmp := t.TempDir()
	probe := buildStatic(t, "hookbox.dev/hookbox/integration/probe", programDir(t))
	ws := filepath.Join(tmp, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	b := assembleBundle(t, `apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: filter}
spec:
  engine: {kind: exec, path: `+probe+`, args: [sleep]}
  workspace: `+ws+`
`, tmp)
	var spec specs.Spec
	if data, err := os.ReadFile(filepath.Join(b.dir, "config.json")); err != nil || json.Unmarshal(data, &spec) != nil {
		t.Fatalf("config.json: %v", err)
	}
	if spec.Linux.Seccomp != nil {
		t.Fatal("the spec holds a seccomp profile: runc would build and load it too")
	}
	// Output to a file: a detached container keeps its stdio, and a pipe
	// would not end until it does.
	logPath := filepath.Join(tmp, "run.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	run := exec.Command("runc", "run", "--detach", "--bundle", b.dir, b.id)
	run.Stdout, run.Stderr = logFile, logFile
	err = run.Run()
	logFile.Close()
	if err != nil {
		out, _ := os.ReadFile(logPath)
		t.Fatalf("runc run: %v\n%s", err, out)
	}
	out, err := exec.Command("runc", "state", b.id).Output()
	if err != nil {
		t.Fatal(err)
	}
	var state struct{ Pid int }
	if err := json.Unmarshal(out, &state); err != nil || state.Pid == 0 {
		t.Fatalf("runc state: %v %s", err, out)
	}
	// The engine is the init's child once the init installed the filter.
	var engine int
	var seen string
	for deadline := time.Now().Add(10 * time.Second); engine == 0; time.Sleep(20 * time.Millisecond) {
		// Any of the init's threads may have forked it.
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", state.Pid))
		for _, task := range tasks {
			children, _ := os.ReadFile(task)
			if pid, err := strconv.Atoi(strings.TrimSpace(string(children))); err == nil {
				cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				if seen = string(cmdline); strings.HasPrefix(seen, probe+"\x00") {
					engine = pid
				}
			}
		}
		if engine == 0 && time.Now().After(deadline) {
			out, _ := os.ReadFile(logPath)
			t.Fatalf("the engine did not start under the init (its child: %q):\n%s", seen, out)
		}
	}
	for who, pid := range map[string]int{"init": state.Pid, "engine": engine} {
		if got := loadedFilter(t, pid); !bytes.Equal(got, b.filter) {
			t.Errorf("%s (pid %d) runs under a %d-instruction program, not hookbox's %d", who, pid, len(got)/8, len(b.filter)/8)
		}
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if !strings.Contains(string(status), "Seccomp_filters:\t1\n") {
			t.Errorf("%s: not exactly one filter:\n%s", who, status)
		}
	}
	t.Logf("hookbox's filter: %d instructions", len(b.filter)/8)
}
