package host

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name string
		stat string
		want ProcStat
	}{
		{"plain", "1234 (sleep) S 1 1234 1235 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 12345678 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n",
			ProcStat{'S', 1, 1234, 1235, 987654}},
		{"comm with parens and spaces", "1234 (a) (b c) Z 1 1234 1234 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 42 0 0\n",
			ProcStat{'Z', 1, 1234, 1234, 42}},
		{"comm that looks like fields", "7 () R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 99) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0",
			ProcStat{'S', 1, 7, 7, 5}},
		{"comm with a newline", "8 (x\ny) S 1 8 8 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 0 0",
			ProcStat{'S', 1, 8, 8, 77}},
		{"exactly field 22", "9 (z) R 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 18446744073709551615",
			ProcStat{'R', 1, 9, 9, 18446744073709551615}},
	} {
		got, err := ParseStat(tc.stat)
		if err != nil || got != tc.want {
			t.Errorf("%s: ParseStat = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	for _, bad := range []string{
		"",
		"1234 sleep S 1",
		"(sleep) S 1 1234 1234 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654",
		"x (sleep) S 1 1234 1234 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654",
		"1234 (sleep) S 1 1234 1234 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0",
		"1234 (sleep) S 1 1234 1234 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 -5",
		"1234 (sleep) SS 1 1234 1234 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 5",
		"1234 )sleep( S 1 1234 1234 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 5",
		"1234 (sleep) S x 1234 1234 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 5",
	} {
		if got, err := ParseStat(bad); err == nil {
			t.Errorf("ParseStat(%q) = %+v, want an error", bad, got)
		}
	}
}

// FuzzParseStat: whatever a process names itself (comm is up to 15 bytes
// of anything but NUL), the fields after comm parse to what the kernel
// wrote; and no input panics.
func FuzzParseStat(f *testing.F) {
	for _, comm := range []string{"sleep", "a) (b c", ")", "(", ") R 1 2", "x\ny", "", " ", "))))))))))))))) "} {
		f.Add(comm, uint64(987654), byte('S'))
	}
	f.Fuzz(func(t *testing.T, comm string, start uint64, state byte) {
		ParseStat(comm) // arbitrary text: must not panic
		if len(comm) > 15 || strings.ContainsRune(comm, 0) || !('A' <= state && state <= 'Z' || 'a' <= state && state <= 'z') {
			return
		}
		line := fmt.Sprintf("4321 (%s) %c 1 4321 4322 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 %d 12345678 300 0\n", comm, state, start)
		got, err := ParseStat(line)
		if want := (ProcStat{state, 1, 4321, 4322, start}); err != nil || got != want {
			t.Fatalf("ParseStat(%q) = %+v, %v; want %+v", line, got, err, want)
		}
	})
}

// A child's identity: alive while it runs, not once it is a zombie or
// reaped; it started after this process and after boot.
func TestProcessIdentity(t *testing.T) {
	self, err := StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "0.2")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	st, err := ReadStat(pid)
	if err != nil || st.PPID != os.Getpid() || st.StartTime < self {
		t.Fatalf("ReadStat(child) = %+v, %v; want ppid %d, start ≥ %d", st, err, os.Getpid(), self)
	}
	if !ProcessAlive(pid, st.StartTime) || ProcessAlive(pid, st.StartTime+1) {
		t.Error("ProcessAlive does not tell the child by its start time")
	}
	at, err := StartedAt(pid)
	if boot, berr := BootTime(); err != nil || berr != nil || at.Before(boot) || at.After(time.Now().Add(time.Second)) {
		t.Errorf("StartedAt = %v, %v; boot %v, %v", at, err, boot, berr)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if z, err := ReadStat(pid); err == nil && z.Exited() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child did not exit")
		}
	}
	if ProcessAlive(pid, st.StartTime) {
		t.Error("ProcessAlive(zombie) = true")
	}
	cmd.Wait()
	if ProcessAlive(pid, st.StartTime) {
		t.Error("ProcessAlive(reaped) = true")
	}
	for _, bad := range []int{0, -1} {
		if _, err := ReadStat(bad); err == nil {
			t.Errorf("ReadStat(%d) succeeded", bad)
		}
	}
}

func TestSplitCmdline(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"\x00", nil},
		{"sleep\x0030\x00", []string{"sleep", "30"}},
		{"a\x00\x00b\x00", []string{"a", "", "b"}},
		{"no-nul", []string{"no-nul"}},
	} {
		if got := SplitCmdline([]byte(tc.in)); !slices.Equal(got, tc.want) {
			t.Errorf("SplitCmdline(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// A child seen through procfs: listed, with its argv, working directory
// and program.
func TestProcessFacts(t *testing.T) {
	dir := t.TempDir()
	script := "sleep 30; : \"$0\""
	cmd := exec.Command("sh", "-c", script, "arg with space")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	pids, err := Pids()
	if err != nil || !slices.Contains(pids, pid) || !slices.Contains(pids, os.Getpid()) {
		t.Fatalf("Pids() = %d pids, %v; want the child %d and this process", len(pids), err, pid)
	}
	// Start returns when the child's close-on-exec pipe closes, inside
	// execve and before the kernel sets the new argument area: until
	// then /proc/PID/cmdline reads empty.
	args, err := Cmdline(pid)
	for deadline := time.Now().Add(5 * time.Second); err == nil && len(args) == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		args, err = Cmdline(pid)
	}
	if err != nil || !slices.Equal(args, []string{"sh", "-c", script, "arg with space"}) {
		t.Errorf("Cmdline = %q, %v", args, err)
	}
	if cwd, err := Cwd(pid); err != nil || cwd != dir {
		t.Errorf("Cwd = %q, %v; want %q", cwd, err, dir)
	}
	want, _ := exec.LookPath("sh")
	want, _ = filepath.EvalSymlinks(want)
	if exe, err := Exe(pid); err != nil || exe != want {
		t.Errorf("Exe = %q, %v; want %q", exe, err, want)
	}
	if _, err := Cmdline(-1); err == nil {
		t.Error("Cmdline(-1) succeeded")
	}
}
