package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/render"
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

// The names oci leaves out of hookbox's native-ABI profile (those only
// other architectures have) change nothing in the filter runc loads: the
// profile as generated and the profile with such names allowed again load
// byte for byte the same program. A native name added makes a different
// one, so the comparison sees a change when there is one.
func TestDroppedSyscallNamesLeaveTheFilterAlone(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.Runc)
	if runtime.GOARCH != "amd64" {
		t.Skip("the names below are amd64's foreign ones")
	}
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
	configPath := filepath.Join(b.dir, "config.json")
	generated, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	var base specs.Spec
	if err := json.Unmarshal(generated, &base); err != nil {
		t.Fatal(err)
	}

	filterOf := func(name string, extra []string) []byte {
		t.Helper()
		s := base
		sc := *base.Linux.Seccomp
		if extra != nil {
			sc.Syscalls = append(append([]specs.LinuxSyscall(nil), sc.Syscalls...), specs.LinuxSyscall{Names: extra, Action: specs.ActAllow})
		}
		linux := *base.Linux
		linux.Seccomp = &sc
		s.Linux = &linux
		data, err := json.Marshal(&s)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(configPath, data, 0o644); err != nil {
			t.Fatal(err)
		}
		id := b.id + "-" + name
		// Output to a file: a detached container keeps its stdio, and a
		// pipe would not end until it does.
		logPath := filepath.Join(tmp, name+".log")
		logFile, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		run := exec.Command("runc", "run", "--detach", "--bundle", b.dir, id)
		run.Stdout, run.Stderr = logFile, logFile
		err = run.Run()
		logFile.Close()
		if err != nil {
			out, _ := os.ReadFile(logPath)
			t.Fatalf("runc run %s: %v\n%s", name, err, out)
		}
		defer exec.Command("runc", "delete", "--force", id).Run()
		out, err := exec.Command("runc", "state", id).Output()
		if err != nil {
			t.Fatal(err)
		}
		var state struct{ Pid int }
		if err := json.Unmarshal(out, &state); err != nil || state.Pid == 0 {
			t.Fatalf("runc state %s: %v %s", id, err, out)
		}
		// runc loads the filter just before it execs the init (which
		// installs none of its own): wait until the process is the init.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", state.Pid)); exe == render.InitPath {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the container's init did not start", name)
			}
		}
		return loadedFilter(t, state.Pid)
	}

	asGenerated := filterOf("generated", nil)
	foreign := []string{"stat64", "lstat64", "fstat64", "chown32", "setuid32", "fcntl64", "_llseek", "_newselect", "socketcall", "ipc", "mmap2", "sigreturn", "waitpid", "send", "recv", "ugetrlimit", "clock_gettime64", "futex_time64"}
	withForeign := filterOf("foreign", foreign)
	if !bytes.Equal(asGenerated, withForeign) {
		t.Errorf("allowing %v changed the loaded filter (%d → %d instructions): leaving them out of the profile is not a no-op", foreign, len(asGenerated)/8, len(withForeign)/8)
	}
	// Control: a native syscall the profile does not allow changes it.
	if withNative := filterOf("native", []string{"reboot"}); bytes.Equal(asGenerated, withNative) {
		t.Error("allowing reboot left the loaded filter as it was: the comparison cannot see a change")
	}
	t.Logf("hookbox's filter: %d instructions", len(asGenerated)/8)
}
