package oci

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/internal/initseccomp"
	"hookbox.dev/hookbox/render"
)

// childFilter makes the test binary a child that installs the filter at
// this path and reports what a set of syscalls returned (filteredChild).
const childFilter = "HBX_OCI_TEST_SECCOMP_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(childFilter); path != "" {
		os.Exit(filteredChild(path))
	}
	os.Exit(m.Run())
}

// probes are the syscalls the child makes under the filter, by name.
var probes = map[string]func() syscall.Errno{
	"getpid": func() syscall.Errno { _, _, e := unix.RawSyscall(unix.SYS_GETPID, 0, 0, 0); return e },
	"ptrace": func() syscall.Errno {
		_, _, e := unix.RawSyscall(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0)
		return e
	},
	"process_vm_readv": func() syscall.Errno {
		_, _, e := unix.RawSyscall6(unix.SYS_PROCESS_VM_READV, uintptr(os.Getpid()), 0, 0, 0, 0, 0)
		return e
	},
	"pidfd_getfd": func() syscall.Errno { _, _, e := unix.RawSyscall(unix.SYS_PIDFD_GETFD, 0, 0, 0); return e },
	// clone3 fails with ENOSYS, so that a libc falls back to clone.
	"clone3": func() syscall.Errno { _, _, e := unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0); return e },
	"reboot": func() syscall.Errno { _, _, e := unix.RawSyscall(unix.SYS_REBOOT, 0, 0, 0); return e },
	"mount":  func() syscall.Errno { _, _, e := unix.RawSyscall6(unix.SYS_MOUNT, 0, 0, 0, 0, 0, 0); return e },
	"unshare-user": func() syscall.Errno {
		_, _, e := unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0)
		return e
	},
	// socket: allowed for families below AF_VSOCK (40) and a few above.
	"socket-unix": func() syscall.Errno {
		fd, _, e := unix.RawSyscall(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if e == 0 {
			unix.Close(int(fd))
		}
		return e
	},
	"socket-vsock": func() syscall.Errno {
		_, _, e := unix.RawSyscall(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0)
		return e
	},
	// personality: the query (0xffffffff) and plain Linux only.
	"personality-query": func() syscall.Errno {
		_, _, e := unix.RawSyscall(unix.SYS_PERSONALITY, 0xffffffff, 0, 0)
		return e
	},
	"personality-read-implies-exec": func() syscall.Errno {
		_, _, e := unix.RawSyscall(unix.SYS_PERSONALITY, 0x0400000, 0, 0)
		return e
	},
	// A number beyond every syscall the profile names: ENOSYS.
	"syscall-1000": func() syscall.Errno { _, _, e := unix.RawSyscall(1000, 0, 0, 0); return e },
}

// filteredChild installs the filter and prints each probe's errno name
// ("" when it succeeded, or failed for another reason than the filter's
// errnos) as JSON.
func filteredChild(path string) int {
	runtime.LockOSThread()
	if err := initseccomp.Load(path); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	out := map[string]string{}
	for name, probe := range probes {
		switch e := probe(); e {
		case unix.EPERM, unix.ENOSYS:
			out[name] = unix.ErrnoName(e)
		default:
			out[name] = ""
		}
	}
	json.NewEncoder(os.Stdout).Encode(out)
	return 0
}

// hookboxProfile is the seccomp profile of a run's spec as generated.
func hookboxProfile(t *testing.T) *specs.LinuxSeccomp {
	t.Helper()
	spec, err := Generate(context.Background(), sampleRender(t), Launch{RunID: "r1", Rootfs: "rootfs"})
	if err != nil {
		t.Fatal(err)
	}
	return spec.Linux.Seccomp
}

// The program compiled from hookbox's profile, installed in a process,
// gives each syscall the profile's answer: allowed, EPERM (the default
// and the explicit denials), ENOSYS (clone3, and numbers newer than the
// profile), by argument where the profile says so.
func TestSeccompFilterEnforcesTheProfile(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the probes use amd64's syscall numbers")
	}
	prog, err := SeccompFilter(hookboxProfile(t))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), initseccomp.FileName)
	if err := os.WriteFile(path, prog, 0o444); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childFilter+"="+path)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	var got map[string]string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	want := map[string]string{
		"getpid": "", "socket-unix": "", "personality-query": "",
		"ptrace": "EPERM", "process_vm_readv": "EPERM", "pidfd_getfd": "EPERM", "reboot": "EPERM", "mount": "EPERM",
		"unshare-user": "EPERM", "socket-vsock": "EPERM", "personality-read-implies-exec": "EPERM",
		"clone3": "ENOSYS", "syscall-1000": "ENOSYS",
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %q, want %q", name, got[name], w)
		}
	}
}

// Names only other architectures have change nothing in the program (the
// compiler leaves out a name the native table lacks, as libseccomp does);
// a native name allowed changes it, so the comparison can see a change.
func TestSeccompFilterForeignNames(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the names below are amd64's foreign ones")
	}
	profile := hookboxProfile(t)
	with := func(names ...string) []byte {
		t.Helper()
		sc := *profile
		sc.Syscalls = append(slices.Clone(profile.Syscalls), specs.LinuxSyscall{Names: names, Action: specs.ActAllow})
		prog, err := SeccompFilter(&sc)
		if err != nil {
			t.Fatal(err)
		}
		return prog
	}
	generated, err := SeccompFilter(profile)
	if err != nil {
		t.Fatal(err)
	}
	foreign := []string{"stat64", "lstat64", "fstat64", "chown32", "setuid32", "fcntl64", "_llseek", "_newselect", "socketcall", "ipc", "mmap2", "sigreturn", "waitpid", "send", "recv", "ugetrlimit", "clock_gettime64", "futex_time64"}
	if !slices.Equal(generated, with(foreign...)) {
		t.Errorf("allowing %v changed the program", foreign)
	}
	if slices.Equal(generated, with("reboot")) {
		t.Error("allowing reboot left the program as it was: the comparison cannot see a change")
	}
	t.Logf("hookbox's filter: %d instructions", len(generated)/8)
}

// A profile the compiler cannot give runc's meaning is refused with
// ErrFilterUnsupported (runc then applies it), never compiled loosely.
func TestSeccompFilterRefusesWhatItCannotExpress(t *testing.T) {
	native := nativeArch[runtime.GOARCH]
	allow := specs.LinuxSyscall{Names: []string{"read"}, Action: specs.ActAllow}
	base := specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Architectures: []specs.Arch{native}, Syscalls: []specs.LinuxSyscall{allow}}
	if _, err := SeccompFilter(&base); err != nil {
		t.Fatalf("the minimal profile: %v", err)
	}
	zero, enosys := uint(0), uint(syscall.ENOSYS)
	for name, change := range map[string]func(*specs.LinuxSeccomp){
		"two architectures": func(s *specs.LinuxSeccomp) { s.Architectures = append(s.Architectures, specs.ArchX86) },
		"default allow":     func(s *specs.LinuxSeccomp) { s.DefaultAction = specs.ActAllow },
		"default ENOSYS":    func(s *specs.LinuxSeccomp) { s.DefaultErrnoRet = &enosys },
		"flags":             func(s *specs.LinuxSeccomp) { s.Flags = []specs.LinuxSeccompFlag{specs.LinuxSeccompFlagLog} },
		"notify action": func(s *specs.LinuxSeccomp) {
			s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{Names: []string{"write"}, Action: specs.ActNotify})
		},
		"errno 0": func(s *specs.LinuxSeccomp) {
			s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{Names: []string{"write"}, Action: specs.ActErrno, ErrnoRet: &zero})
		},
		"argument 6": func(s *specs.LinuxSeccomp) {
			s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{Names: []string{"clone"}, Action: specs.ActAllow,
				Args: []specs.LinuxSeccompArg{{Index: 6, Value: 1, Op: specs.OpEqualTo}}})
		},
		"an unknown operator": func(s *specs.LinuxSeccomp) {
			s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{Names: []string{"clone"}, Action: specs.ActAllow,
				Args: []specs.LinuxSeccompArg{{Index: 0, Value: 1, Op: "SCMP_CMP_ROUGHLY"}}})
		},
		"a name with two actions": func(s *specs.LinuxSeccomp) {
			s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{Names: []string{"read"}, Action: specs.ActErrno})
		},
	} {
		sc := base
		sc.Syscalls = slices.Clone(base.Syscalls)
		change(&sc)
		if _, err := SeccompFilter(&sc); !errors.Is(err, ErrFilterUnsupported) {
			t.Errorf("%s: %v, want ErrFilterUnsupported", name, err)
		}
	}
}

// A run's spec (hookbox-init as its process) carries no profile: its
// program is for the init, named in the init's environment, its digest an
// annotation. A spec with another process keeps its profile for runc.
func TestSeccompInInit(t *testing.T) {
	spec, err := Generate(context.Background(), sampleRender(t), Launch{RunID: "r1", Rootfs: "rootfs"})
	if err != nil {
		t.Fatal(err)
	}
	if spec.Process.Args[0] != render.InitPath {
		t.Fatalf("the sample's process is %q", spec.Process.Args[0])
	}
	profile := spec.Linux.Seccomp
	prog, err := SeccompInInit(spec)
	if err != nil || prog == nil {
		t.Fatalf("program %d bytes, %v", len(prog), err)
	}
	want, _ := SeccompFilter(profile)
	sum := sha256.Sum256(prog)
	switch {
	case !slices.Equal(prog, want):
		t.Error("the program is not the profile's")
	case spec.Linux.Seccomp != nil:
		t.Error("the spec still holds the profile: runc would build it again")
	case !slices.Contains(spec.Process.Env, initseccomp.EnvName+"="+initseccomp.Path):
		t.Errorf("the init is not told where the filter is: %v", spec.Process.Env)
	case spec.Annotations[AnnotationSeccompFilter] != "sha256:"+hex.EncodeToString(sum[:]):
		t.Errorf("annotation %q", spec.Annotations[AnnotationSeccompFilter])
	}
	if initseccomp.Path != render.ConfigDir+"/"+initseccomp.FileName {
		t.Errorf("initseccomp.Path %s is not in the config dir %s", initseccomp.Path, render.ConfigDir)
	}

	other, err := Generate(context.Background(), sampleRender(t), Launch{RunID: "r2", Rootfs: "rootfs"})
	if err != nil {
		t.Fatal(err)
	}
	other.Process.Args = []string{"/usr/bin/true"}
	if prog, err := SeccompInInit(other); err != nil || prog != nil || other.Linux.Seccomp == nil {
		t.Errorf("a spec without hookbox-init: program %d bytes, err %v, profile kept %v", len(prog), err, other.Linux.Seccomp != nil)
	}
}

// seccompData is struct seccomp_data as x/net/bpf's VM reads it: each
// 32-bit word where the kernel has it, in the VM's (big-endian) order, so
// that a load gives the value the kernel's load gives.
func seccompData(arch, nr uint32, args [6]uint64) []byte {
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[0:], nr)
	binary.BigEndian.PutUint32(data[4:], arch)
	for i, a := range args {
		lo, hi := argOffsets(uint(i))
		binary.BigEndian.PutUint32(data[lo:], uint32(a))
		binary.BigEndian.PutUint32(data[hi:], uint32(a>>32))
	}
	return data
}

// expected is what runc and libseccomp make of sc for one syscall: the
// reference the compiled program is compared with.
func expected(sc *specs.LinuxSeccomp, arch, nr uint32, args [6]uint64) uint32 {
	if arch != auditArch[runtime.GOARCH] {
		return unix.SECCOMP_RET_KILL_THREAD
	}
	highest, matched := uint32(0), false
	var verdict uint32
	for _, rule := range sc.Syscalls {
		for _, name := range rule.Names {
			n, known := syscallNr(name)
			if !known {
				continue
			}
			highest = max(highest, n)
			if n != nr || matched {
				continue
			}
			holds := true
			for _, c := range rule.Args {
				a := args[c.Index]
				switch c.Op {
				case specs.OpEqualTo:
					holds = holds && a == c.Value
				case specs.OpNotEqual:
					holds = holds && a != c.Value
				case specs.OpLessThan:
					holds = holds && a < c.Value
				case specs.OpLessEqual:
					holds = holds && a <= c.Value
				case specs.OpGreaterThan:
					holds = holds && a > c.Value
				case specs.OpGreaterEqual:
					holds = holds && a >= c.Value
				case specs.OpMaskedEqual:
					holds = holds && a&c.Value == c.ValueTwo
				}
			}
			if holds {
				matched = true
				verdict, _ = ruleAction(rule)
			}
		}
	}
	switch {
	case nr > highest:
		return unix.SECCOMP_RET_ERRNO | uint32(syscall.ENOSYS)
	case matched:
		return verdict
	}
	return unix.SECCOMP_RET_ERRNO | uint32(syscall.EPERM)
}

// checkAgainstReference runs prog in x/net/bpf's VM on every case and
// compares its verdict with expected's.
func checkAgainstReference(t *testing.T, sc *specs.LinuxSeccomp, prog []byte, cases func(yield func(arch, nr uint32, args [6]uint64))) {
	t.Helper()
	filter, err := initseccomp.Decode(prog)
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]bpf.RawInstruction, len(filter))
	for i, f := range filter {
		raw[i] = bpf.RawInstruction{Op: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}
	}
	insts, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("the program does not disassemble")
	}
	vm, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatal(err)
	}
	n, wrong := 0, 0
	cases(func(arch, nr uint32, args [6]uint64) {
		n++
		got, err := vm.Run(seccompData(arch, nr, args))
		if want := expected(sc, arch, nr, args); err != nil || uint32(got) != want {
			if wrong++; wrong <= 10 {
				t.Errorf("arch %#x nr %d args %#x: %#x (%v), want %#x", arch, nr, args, got, err, want)
			}
		}
	})
	t.Logf("%d cases, %d wrong", n, wrong)
}

// Every operator, on the high and the low half of an argument, at and
// around its values, with several conditions and rules on one syscall and
// conditional and unconditional syscalls side by side: the program agrees
// with runc's meaning of the profile in every case.
func TestSeccompFilterConditions(t *testing.T) {
	native := nativeArch[runtime.GOARCH]
	if native == "" || len(nativeSyscalls) == 0 {
		t.Skip("no native syscall table here")
	}
	values := []uint64{0, 1, 38, 0xffffffff, 0x100000000, 0x1_00000026, 0xffffffff_ffffffff, 0x7e020000}
	ops := []specs.LinuxSeccompOperator{specs.OpEqualTo, specs.OpNotEqual, specs.OpLessThan, specs.OpLessEqual, specs.OpGreaterThan, specs.OpGreaterEqual, specs.OpMaskedEqual}
	var rules []specs.LinuxSyscall
	names := []string{"read", "write", "close", "socket", "personality", "clone", "ioctl", "fcntl", "prctl", "mmap", "mprotect", "futex"}
	for i, op := range ops {
		for j, v := range values {
			arg := specs.LinuxSeccompArg{Index: uint(j % 6), Value: v, Op: op}
			if op == specs.OpMaskedEqual {
				arg.ValueTwo = v & 0xff00ff00ff00ff00
			}
			rule := specs.LinuxSyscall{Names: []string{names[i]}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{arg}}
			if j%3 == 2 { // and a second condition
				rule.Args = append(rule.Args, specs.LinuxSeccompArg{Index: 5, Value: values[(j+3)%len(values)], Op: ops[(i+j)%len(ops)]})
			}
			rules = append(rules, rule)
		}
	}
	eacces := uint(syscall.EACCES)
	rules = append(rules,
		specs.LinuxSyscall{Names: []string{"getpid", "gettid"}, Action: specs.ActAllow},
		specs.LinuxSyscall{Names: []string{"kill"}, Action: specs.ActErrno, ErrnoRet: &eacces},
		specs.LinuxSyscall{Names: []string{"openat"}, Action: specs.ActErrno, ErrnoRet: &eacces,
			Args: []specs.LinuxSeccompArg{{Index: 2, Value: 0x3, ValueTwo: 0x1, Op: specs.OpMaskedEqual}}})
	sc := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Architectures: []specs.Arch{native}, Syscalls: rules}
	prog, err := SeccompFilter(sc)
	if err != nil {
		t.Fatal(err)
	}
	var probeArgs []uint64
	for _, v := range values {
		probeArgs = append(probeArgs, v, v-1, v+1, v^0xffffffff_00000000, v&0xffffffff, v|1<<40)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	checkAgainstReference(t, sc, prog, func(yield func(uint32, uint32, [6]uint64)) {
		for _, name := range append(names, "getpid", "kill", "openat", "execve") {
			nr, _ := syscallNr(name)
			for _, a := range probeArgs {
				for _, b := range probeArgs[:12] {
					yield(auditArch[runtime.GOARCH], nr, [6]uint64{a, a, a, a, b, b})
				}
			}
			for range 2000 {
				var args [6]uint64
				for k := range args {
					args[k] = probeArgs[rng.IntN(len(probeArgs))]
				}
				yield(auditArch[runtime.GOARCH], nr, args)
			}
		}
	})
}

// hookbox's own profile, over every syscall number up to beyond its
// highest, through the native ABI and another, with arguments at and
// around the profile's values: the program agrees with runc's meaning.
func TestSeccompFilterMatchesTheProfile(t *testing.T) {
	if len(nativeSyscalls) == 0 {
		t.Skip("no native syscall table here")
	}
	sc := hookboxProfile(t)
	prog, err := SeccompFilter(sc)
	if err != nil {
		t.Fatal(err)
	}
	args := []uint64{0, 1, 8, 16, 38, 39, 40, 41, 45, 46, 0x20000, 0x20008, 0xffffffff, 0x1_00000000, 0x7e020000, 0x10000000, 0x20000000, 0x100000, 0x11, 0xffffffff_ffffffff}
	checkAgainstReference(t, sc, prog, func(yield func(uint32, uint32, [6]uint64)) {
		for nr := uint32(0); nr < 600; nr++ {
			for _, a := range args {
				yield(auditArch[runtime.GOARCH], nr, [6]uint64{a})
			}
		}
		yield(unix.AUDIT_ARCH_I386, 1, [6]uint64{})
		yield(auditArch[runtime.GOARCH], 0x40000000|1, [6]uint64{})
	})
}
