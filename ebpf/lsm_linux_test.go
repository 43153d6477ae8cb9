//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// requireLSM skips where the tracer runs without its BPF LSM programs: a
// host without the BPF LSM is a supported host (enforce kills there).
func requireLSM(t *testing.T, tr *Tracer) {
	t.Helper()
	if err := tr.LSM(); err != nil {
		t.Skipf("the BPF LSM programs are not attached here: %v", err)
	}
}

// The BPF LSM programs pass the verifier. Where they cannot be loaded as
// LSM programs (no BPF LSM, or a kernel that refuses trampolines), they
// are loaded as BTF raw tracepoint programs whose arguments have the same
// shapes, which checks everything but the LSM return range (kept() in
// bpf/lsm.c bounds it).
func TestLSMProgramsVerify(t *testing.T) {
	if os.Geteuid() != 0 {
		missing(t, "loading BPF programs needs root")
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	spec, err := loadLsm()
	if err != nil {
		t.Fatal(err)
	}
	// A raw tracepoint per program whose leading arguments are (pointer,
	// scalar[, scalar]) like the hook's.
	standIn := map[string]string{"deny_exec": "sys_enter", "deny_ptrace": "sched_move_numa", "deny_traceme": "sched_move_numa"}
	if len(spec.Programs) != len(standIn) {
		t.Fatalf("lsm object has %d programs, the test knows %d", len(spec.Programs), len(standIn))
	}
	for name, ps := range spec.Programs {
		ps.Type, ps.AttachType, ps.AttachTo = cebpf.Tracing, cebpf.AttachTraceRawTp, standIn[name]
	}
	coll, err := cebpf.NewCollection(spec)
	var ve *cebpf.VerifierError
	if errors.As(err, &ve) {
		t.Fatalf("verifier: %+v", ve)
	}
	if err != nil {
		t.Fatal(err)
	}
	coll.Close()
}

// Ptrace-class access of attach strength from a watched cgroup to another
// process is refused and recorded; read-strength access is not; after
// Stop nothing is refused.
func TestLSMDeniesPtrace(t *testing.T) {
	tr := requireTracer(t, Options{})
	requireLSM(t, tr)
	cg := newTestCgroup(t)
	w, err := tr.Watch(cg.ID, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	col := collect(w)
	helper := cg.command(os.Args[0])
	helper.Env = append(os.Environ(), "HOOKBOX_EBPF_HELPER=inject")
	out, err := helper.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	const want = "environ=ok mem=EACCES ptrace=EPERM getfd=EPERM"
	if got := strings.TrimSpace(string(out)); !strings.HasSuffix(got, want) {
		t.Errorf("helper in a watched cgroup: %q, want %q", got, want)
	}
	events, st := col.stop(t, w)
	target := 0
	if fields := strings.Fields(string(out)); len(fields) > 0 {
		target, _ = strconv.Atoi(strings.TrimPrefix(fields[0], "sibling="))
	}
	checkEvents(t, events,
		expect{kind: KindExec, tgid: helper.Process.Pid},
		expect{kind: KindExec, filename: "/bin/sleep", tgid: target},
		expect{kind: KindPtraceDenied, tgid: helper.Process.Pid, errno: syscall.EPERM},
		expect{kind: KindPtraceDenied, tgid: helper.Process.Pid, errno: syscall.EPERM},
		expect{kind: KindPtraceDenied, tgid: helper.Process.Pid, errno: syscall.EPERM},
	)
	for _, ev := range events {
		if ev.Kind == KindPtraceDenied && (int(ev.Target) != target || ev.Mode&0x02 == 0) {
			t.Errorf("refusal target %d mode %#x, want target %d and PTRACE_MODE_ATTACH", ev.Target, ev.Mode, target)
		}
	}
	if st.PtraceDenied != 3 || st.Denies != (Denies{Ptrace: true}) {
		t.Errorf("ptrace denied %d, denies %+v; want 3, ptrace only", st.PtraceDenied, st.Denies)
	}
	requireComplete(t, st)

	// Unwatched: the same accesses work.
	again := cg.command(os.Args[0])
	again.Env = helper.Env
	out, err = again.CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "environ=ok mem=ok ptrace=ok getfd=ok") {
		t.Errorf("helper after Stop: %v %q, want every access granted", err, out)
	}
}

// Enforce with the BPF LSM: an exec outside the allowed set fails with
// EPERM and its caller goes on; so does a memfd exec, which no noexec
// mount stops. Each is one denied event (no failed event besides), and
// nothing is killed.
func TestLSMEnforceDenies(t *testing.T) {
	tr := requireTracer(t, Options{})
	requireLSM(t, tr)
	cg := newTestCgroup(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sh, selfID, touch := mustIdentity(t, "/bin/sh"), mustIdentity(t, self), mustIdentity(t, "/usr/bin/touch")
	w, err := tr.Watch(cg.ID, Policy{Enforce: true, Allowed: []FileID{sh, selfID}})
	if err != nil {
		t.Fatal(err)
	}
	col := collect(w)

	marker := filepath.Join(t.TempDir(), "ran")
	out, err := cg.command("/bin/sh", "-c", `/usr/bin/touch `+marker+`; echo "status=$?"`).Output()
	if err != nil || !strings.HasSuffix(string(out), "status=126\n") {
		t.Errorf("sh: %v, output %q; want the exec refused (126) and the shell going on", err, out)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused touch ran: %s exists (%v)", marker, err)
	}

	helper := cg.command(self)
	helper.Env = append(os.Environ(), "HOOKBOX_EBPF_HELPER=memfd")
	out, err = helper.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "errno=1" {
		t.Errorf("memfd exec: %v %q, want errno=1 (EPERM)", err, out)
	}

	events, st := col.stop(t, w)
	checkEvents(t, events,
		expect{kind: KindExec, filename: "/bin/sh", file: &sh, killed: ptr(false)},
		expect{kind: KindDenied, filename: "/usr/bin/touch", file: &touch, errno: syscall.EPERM},
		expect{kind: KindExec, file: &selfID, tgid: helper.Process.Pid},
		expect{kind: KindDenied, errno: syscall.EPERM, tgid: helper.Process.Pid},
	)
	if len(events) == 4 && !strings.HasPrefix(events[3].Filename, "/dev/fd/") {
		t.Errorf("memfd exec recorded as %q, want /dev/fd/N", events[3].Filename)
	}
	for _, ev := range events {
		if ev.Kind == KindDenied && ev.Flags&FlagEnforced == 0 {
			t.Errorf("denied %q not marked enforced", ev.Filename)
		}
	}
	if st.Denied != 2 || st.Killed != 0 || st.Denies != (Denies{Ptrace: true, Exec: true}) {
		t.Errorf("denied %d, killed %d, denies %+v; want 2, 0, both", st.Denied, st.Killed, st.Denies)
	}
	requireComplete(t, st)
}

// helperInject is the test binary re-executed by TestLSMDeniesPtrace (see
// TestMain): it starts a sibling and tries read- and attach-strength
// access to it, printing "sibling=PID environ=… mem=… ptrace=… getfd=…".
func helperInject() int {
	sib := exec.Command("/bin/sleep", "30")
	if err := sib.Start(); err != nil {
		fmt.Println(err)
		return 1
	}
	defer func() {
		sib.Process.Kill()
		sib.Wait()
	}()
	pid := sib.Process.Pid
	for range 500 { // until the child runs sleep, not the forked test binary
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); strings.HasSuffix(exe, "/sleep") {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	result := func(err error) string {
		var errno syscall.Errno
		switch {
		case err == nil:
			return "ok"
		case errors.As(err, &errno) && errno == syscall.EPERM:
			return "EPERM"
		case errors.As(err, &errno) && errno == syscall.EACCES:
			return "EACCES"
		}
		return strings.ReplaceAll(err.Error(), " ", "_")
	}
	_, environ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	var mem error
	if f, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_RDWR, 0); err != nil {
		mem = err
	} else {
		f.Close()
	}
	ptrace := unix.PtraceAttach(pid)
	if ptrace == nil {
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, unix.WALL, nil)
		unix.PtraceDetach(pid)
	}
	var getfd error
	if pidfd, err := unix.PidfdOpen(pid, 0); err != nil {
		getfd = err
	} else {
		fd, err := unix.PidfdGetfd(pidfd, 0, 0)
		if getfd = err; err == nil {
			unix.Close(fd)
		}
		unix.Close(pidfd)
	}
	fmt.Printf("sibling=%d environ=%s mem=%s ptrace=%s getfd=%s\n", pid, result(environ), result(mem), result(ptrace), result(getfd))
	return 0
}

// helperMemfd is the test binary re-executed by TestLSMEnforceDenies: it
// copies /bin/true into a memfd and execs it (execveat, AT_EMPTY_PATH),
// printing "errno=N" when the exec fails.
func helperMemfd() int {
	fd, err := unix.MemfdCreate("hookbox-test", 0)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	data, err := os.ReadFile("/bin/true")
	if err == nil {
		_, err = unix.Write(fd, data)
	}
	if err != nil {
		fmt.Println(err)
		return 1
	}
	empty, _ := syscall.BytePtrFromString("")
	name, _ := syscall.BytePtrFromString("true")
	argv := []*byte{name, nil}
	envv := []*byte{nil}
	_, _, e := syscall.Syscall6(unix.SYS_EXECVEAT, uintptr(fd), uintptr(unsafe.Pointer(empty)),
		uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])), unix.AT_EMPTY_PATH, 0)
	fmt.Printf("errno=%d\n", int(e))
	return 0
}
