package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcStat is what hookbox reads from /proc/<pid>/stat (proc(5)).
type ProcStat struct {
	State     byte   // field 3: R, S, D, Z, X…
	PPID      int    // field 4
	PGRP      int    // field 5: process group
	Session   int    // field 6
	StartTime uint64 // field 22: clock ticks after boot when the process started
}

// Exited reports whether the process has exited: a zombie waiting to be
// reaped, or dead.
func (s ProcStat) Exited() bool { return s.State == 'Z' || s.State == 'X' }

// ParseStat parses the text of /proc/<pid>/stat. Field 2, comm, is in
// parentheses and may itself contain spaces, parentheses and newlines, so
// the fields after it are found from the last ')' in the text: no later
// field can contain one.
func ParseStat(data string) (ProcStat, error) {
	open := strings.IndexByte(data, '(')
	end := strings.LastIndexByte(data, ')')
	if open < 1 || end < open {
		return ProcStat{}, fmt.Errorf("proc stat: no (comm) in %q", truncate(data))
	}
	if _, err := strconv.ParseUint(strings.TrimSpace(data[:open]), 10, 31); err != nil {
		return ProcStat{}, fmt.Errorf("proc stat: bad pid field in %q", truncate(data))
	}
	rest := strings.Fields(data[end+1:])
	// rest[0] is field 3, so field 22 is rest[19].
	if len(rest) < 20 || len(rest[0]) != 1 {
		return ProcStat{}, fmt.Errorf("proc stat: %d fields after comm, want at least 20", len(rest))
	}
	st := ProcStat{State: rest[0][0]}
	for i, p := range []*int{&st.PPID, &st.PGRP, &st.Session} {
		n, err := strconv.Atoi(rest[1+i])
		if err != nil {
			return ProcStat{}, fmt.Errorf("proc stat: field %d %q: %w", 4+i, rest[1+i], err)
		}
		*p = n
	}
	start, err := strconv.ParseUint(rest[19], 10, 64)
	if err != nil {
		return ProcStat{}, fmt.Errorf("proc stat: start time %q: %w", rest[19], err)
	}
	st.StartTime = start
	return st, nil
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// ReadStat reads and parses /proc/<pid>/stat.
func ReadStat(pid int) (ProcStat, error) {
	if pid <= 0 {
		return ProcStat{}, fmt.Errorf("pid %d: %w", pid, fs.ErrInvalid)
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ProcStat{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	st, err := ParseStat(string(data))
	if err != nil {
		return ProcStat{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return st, nil
}

// StartTime returns when pid started, in clock ticks after boot. With the
// pid it identifies a process: a pid the kernel reissues belongs to a
// process with a later start time.
func StartTime(pid int) (uint64, error) {
	st, err := ReadStat(pid)
	if err != nil {
		return 0, err
	}
	return st.StartTime, nil
}

// ProcessAlive reports whether pid is the process recorded with startTime
// and has not exited: the pid exists, its start time equals startTime, and
// it is not a zombie (exited, not yet reaped). Two processes given the same
// pid within one clock tick (10 ms at USER_HZ=100) are indistinguishable.
func ProcessAlive(pid int, startTime uint64) bool {
	st, err := ReadStat(pid)
	return err == nil && st.StartTime == startTime && !st.Exited()
}

// userHZ is the unit of /proc/<pid>/stat times; Linux fixes it at 100 for
// user space on every architecture hookbox runs on.
const userHZ = 100

// StartedAt is the wall-clock time pid started: boot time (/proc/stat
// btime) plus its start time.
func StartedAt(pid int) (time.Time, error) {
	ticks, err := StartTime(pid)
	if err != nil {
		return time.Time{}, err
	}
	boot, err := BootTime()
	if err != nil {
		return time.Time{}, err
	}
	return boot.Add(time.Duration(ticks) * time.Second / userHZ), nil
}

// BootTime is when the machine booted (/proc/stat btime).
func BootTime() (time.Time, error) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, err
	}
	for _, line := range strings.Split(string(stat), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			boot, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("/proc/stat: btime: %w", err)
			}
			return time.Unix(boot, 0), nil
		}
	}
	return time.Time{}, errors.New("/proc/stat: no btime line")
}

// Pids lists the processes /proc shows, in /proc's order.
func Pids() ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(entries))
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Cmdline is the argument vector of pid (/proc/<pid>/cmdline); empty for
// a kernel thread or a zombie.
func Cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return nil, err
	}
	return SplitCmdline(b), nil
}

// SplitCmdline splits the text of /proc/<pid>/cmdline: arguments, each
// ended by a NUL.
func SplitCmdline(b []byte) []string {
	s := strings.TrimRight(string(b), "\x00")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}

// Cwd is the working directory of pid (/proc/<pid>/cwd).
func Cwd(pid int) (string, error) {
	return os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
}

// Exe is the program pid runs (/proc/<pid>/exe); a program replaced on
// disk since it started reads "<path> (deleted)".
func Exe(pid int) (string, error) {
	return os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
}
