// Command probe runs inside a hookbox container and reports, one JSON object
// per line, what the sandbox allows: the adversarial checks of the container
// assembly (writes to read-only mounts, exec from writable places, network,
// identity). It is built static so its runfiles closure is one file.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

type result struct {
	Check  string `json:"check"`
	OK     bool   `json:"ok"`     // the operation succeeded
	Errno  string `json:"errno"`  // the error's errno name when it failed
	Detail string `json:"detail"` // what was read or observed
}

func report(check string, err error, detail string) {
	r := result{Check: check, OK: err == nil, Detail: detail}
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			r.Errno = errnoName(errno)
		} else {
			r.Errno = err.Error()
		}
	}
	data, _ := json.Marshal(r)
	fmt.Println(string(data))
}

func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.EROFS:
		return "EROFS"
	case syscall.EACCES:
		return "EACCES"
	case syscall.EPERM:
		return "EPERM"
	case syscall.ENOENT:
		return "ENOENT"
	case syscall.ENOSYS:
		return "ENOSYS"
	}
	return e.Error()
}

func writeFile(path string) error {
	return os.WriteFile(path, []byte("probe\n"), 0o644)
}

// execCopy copies this binary into dir and tries to run the copy.
func execCopy(dir string) error {
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer self.Close()
	dst := filepath.Join(dir, "probe-copy")
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	if _, err := io.Copy(out, self); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	defer os.Remove(dst)
	return exec.Command(dst, "--version").Run()
}

func statusField(name string) string {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "--version":
			fmt.Println("probe")
		case "sleep": // the sibling the injection checks aim at
			time.Sleep(time.Minute)
		case "inject":
			injection()
		case "memfd-exec":
			report("memfd-exec", memfdExec(), "")
		case "memfd-exec-self":
			os.Exit(memfdExecSelf())
		case "compat-getpid":
			compatChild()
		default:
			fmt.Fprintf(os.Stderr, "probe: unknown mode %q\n", os.Args[1])
			os.Exit(2)
		}
		return
	}
	data, err := os.ReadFile("/workspace/README.md")
	report("read-workspace", err, strings.TrimSpace(string(data)))
	report("write-run-dir", writeFile("/run/hookbox/probe.txt"), "")
	report("write-root", writeFile("/probe.txt"), "")
	report("write-workspace", writeFile("/workspace/probe.txt"), "")
	self, _ := os.Executable()
	report("write-runfiles", writeFile(filepath.Join(filepath.Dir(self), "probe.txt")), self)
	report("replace-runfile", writeFile(self), self)
	report("write-config", writeFile("/hookbox/etc/probe.txt"), "")
	report("exec-run-dir", execCopy("/run/hookbox"), "")
	report("exec-tmp", execCopy("/tmp"), "")
	report("exec-dev-shm", execCopy("/dev/shm"), "")
	injection()
	compatSyscall()

	ifaces, err := net.Interfaces()
	var names []string
	for _, i := range ifaces {
		names = append(names, i.Name)
	}
	report("interfaces", err, strings.Join(names, ","))
	_, err = net.Dial("tcp", "192.0.2.1:80")
	report("dial-out", err, "")

	report("uid", nil, fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid()))
	report("cap-eff", nil, statusField("CapEff"))
	report("cap-bnd", nil, statusField("CapBnd"))
	report("no-new-privs", nil, statusField("NoNewPrivs"))
	report("seccomp", nil, statusField("Seccomp"))
	host, err := os.Hostname()
	report("hostname", err, host)
	entries, err := os.ReadDir("/")
	var root []string
	for _, e := range entries {
		root = append(root, e.Name())
	}
	report("root-entries", err, strings.Join(root, ","))
}

// injection tries, from this process, every way one process of the run
// could change another's code: the target is a sibling (this program
// again, sleeping), the way a declared tool could aim at the engine or a
// hook. Each check reports ok when the access was granted.
func injection() {
	sib := exec.Command("/proc/self/exe", "sleep")
	if err := sib.Start(); err != nil {
		report("inject-sibling", err, "")
		return
	}
	defer func() {
		sib.Process.Kill()
		sib.Wait()
	}()
	pid := sib.Process.Pid
	// Wait until the sibling runs the probe image (not the forked Go
	// runtime before its exec).
	var addr uintptr
	var err error
	for range 200 {
		if addr, err = writableAddress(pid); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	report("inject-sibling", err, strconv.Itoa(pid))
	if err != nil {
		return
	}
	report("ptrace-attach", ptraceAttach(pid), "")
	report("process-vm-writev", processVMWrite(pid, addr), "")
	report("proc-mem-write", procMemWrite(pid, addr), "")
	report("pidfd-getfd", pidfdGetfd(pid), "")
}

// writableAddress is the start of the sibling's first writable mapping of
// the probe image, once it has exec'd it. Reading maps is a ptrace read
// check, which the sandbox does not deny.
func writableAddress(pid int) (uintptr, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 6 && strings.HasPrefix(fields[1], "rw") && strings.HasSuffix(fields[5], "/probe") {
			start, _, _ := strings.Cut(fields[0], "-")
			v, err := strconv.ParseUint(start, 16, 64)
			return uintptr(v), err
		}
	}
	return 0, fmt.Errorf("no writable mapping of the probe in /proc/%d/maps yet", pid)
}

func ptraceAttach(pid int) error {
	if err := unix.PtraceAttach(pid); err != nil {
		return err
	}
	var ws unix.WaitStatus
	unix.Wait4(pid, &ws, unix.WALL, nil)
	return unix.PtraceDetach(pid)
}

// processVMWrite writes one byte of the sibling back unchanged.
func processVMWrite(pid int, addr uintptr) error {
	b := make([]byte, 1)
	remote := []unix.RemoteIovec{{Base: addr, Len: 1}}
	if _, err := unix.ProcessVMReadv(pid, []unix.Iovec{{Base: &b[0], Len: 1}}, remote, 0); err != nil {
		return fmt.Errorf("readv: %w", err)
	}
	_, err := unix.ProcessVMWritev(pid, []unix.Iovec{{Base: &b[0], Len: 1}}, remote, 0)
	return err
}

// procMemWrite writes one byte of the sibling back unchanged through
// /proc/<pid>/mem.
func procMemWrite(pid int, addr uintptr) error {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, int64(addr)); err != nil {
		return err
	}
	_, err = f.WriteAt(b, int64(addr))
	return err
}

// pidfdGetfd takes a copy of the sibling's stdin.
func pidfdGetfd(pid int) error {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("pidfd_open: %w", err)
	}
	defer unix.Close(pidfd)
	fd, err := unix.PidfdGetfd(pidfd, 0, 0)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// memfdExec runs this program from a memory file (memfd_create, then
// execveat with AT_EMPTY_PATH) in a child, which every noexec mount lets
// through. ok: the copy ran; else the exec's errno, or "killed".
func memfdExec() error {
	out, err := exec.Command("/proc/self/exe", "memfd-exec-self").Output()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ProcessState.Sys().(syscall.WaitStatus).Signaled():
		return fmt.Errorf("signal %d", int(ee.ProcessState.Sys().(syscall.WaitStatus).Signal()))
	case errors.As(err, &ee) && ee.ExitCode() == 3:
		return syscall.Errno(mustAtoi(strings.TrimSpace(string(out))))
	case err != nil:
		return err
	case strings.TrimSpace(string(out)) != "probe":
		return fmt.Errorf("the memfd copy printed %q", out)
	}
	return nil
}

func mustAtoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// memfdExecSelf copies this program into a memfd and execs it with
// --version; when the exec fails it prints the errno and exits 3.
func memfdExecSelf() int {
	fd, err := unix.MemfdCreate("probe", 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "memfd_create:", err)
		return 1
	}
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := unix.Write(fd, self); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	empty, _ := unix.BytePtrFromString("")
	argv, envv := cStrings([]string{"probe", "--version"}), cStrings(os.Environ())
	_, _, errno := unix.Syscall6(unix.SYS_EXECVEAT, uintptr(fd), uintptr(unsafe.Pointer(empty)),
		uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])), unix.AT_EMPTY_PATH, 0)
	fmt.Println(int(errno))
	return 3
}

// cStrings is a NULL-terminated array of C strings.
func cStrings(ss []string) []*byte {
	out := make([]*byte, 0, len(ss)+1)
	for _, s := range ss {
		p, err := unix.BytePtrFromString(s)
		if err == nil {
			out = append(out, p)
		}
	}
	return append(out, nil)
}

// compatSyscall makes a syscall through the compat ABI in a child (the
// seccomp filter kills the thread that tries): ok when the child got its
// pid back; else the errno or the signal that ended it.
func compatSyscall() {
	cmd := exec.Command("/proc/self/exe", "compat-getpid")
	out, err := cmd.Output()
	pid := strings.TrimSpace(string(out))
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			err = errors.New(ws.Signal().String())
		} else if pid == threadKilled {
			err = errors.New(threadKilled)
		}
	case err == nil && pid != strconv.Itoa(cmd.Process.Pid):
		// A negative return is -errno.
		if n, perr := strconv.Atoi(pid); perr == nil && n < 0 {
			err = syscall.Errno(-n)
		} else {
			err = fmt.Errorf("getpid gave %q for pid %d", pid, cmd.Process.Pid)
		}
	}
	report("compat-syscall", err, compatABI)
}

// threadKilled is what the child says when the thread that made the
// compat syscall never came back: seccomp's kill-thread action ends only
// that thread, and a Go process without it would hang rather than exit.
const threadKilled = "thread killed"

// compatChild makes the compat syscall on a thread of its own and prints
// its result, or threadKilled and exits 3 when that thread is gone.
func compatChild() {
	got := make(chan int32, 1)
	go func() {
		runtime.LockOSThread() // the thread dies with the call; never reused
		got <- compatGetpid()
	}()
	select {
	case v := <-got:
		fmt.Println(v)
	case <-time.After(2 * time.Second):
		fmt.Println(threadKilled)
		os.Exit(3)
	}
}
