package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A daemon is one started component: its pid file holds "PID STARTTIME",
// the start time (clock ticks since boot, /proc/PID/stat field 22) telling
// the process apart from a later one that reuses the pid.
type daemon struct {
	pid       int
	startTime uint64
}

// startDaemon starts argv in a session of its own (it outlives up), with
// stdout and stderr appended to the component's log, and records it.
func startDaemon(l Layout, component string, env []string, argv ...string) (daemon, error) {
	logf, err := os.OpenFile(l.Log(component), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return daemon{}, err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = l.State
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return daemon{}, fmt.Errorf("starting %s (%s): %w", component, argv[0], err)
	}
	d := daemon{pid: cmd.Process.Pid}
	d.startTime, err = procStartTime(d.pid)
	if err == nil {
		err = writeFile(l.PidFile(component), []byte(fmt.Sprintf("%d %d\n", d.pid, d.startTime)), 0o644)
	}
	// The daemon is not our child to wait for once up returns; release it.
	_ = cmd.Process.Release()
	if err != nil {
		return d, err
	}
	return d, nil
}

// readDaemon returns the recorded daemon of component and whether that very
// process still runs.
func readDaemon(l Layout, component string) (daemon, bool, error) {
	b, err := os.ReadFile(l.PidFile(component))
	if errors.Is(err, os.ErrNotExist) {
		return daemon{}, false, nil
	}
	if err != nil {
		return daemon{}, false, err
	}
	var d daemon
	if _, err := fmt.Sscanf(string(b), "%d %d", &d.pid, &d.startTime); err != nil {
		return daemon{}, false, fmt.Errorf("pid file %s: %w", l.PidFile(component), err)
	}
	return d, d.alive(), nil
}

func (d daemon) alive() bool {
	st, err := procStartTime(d.pid)
	if err != nil || st != d.startTime {
		return false
	}
	// A zombie has exited; it only waits for its parent.
	state, _ := procState(d.pid)
	return state != "Z"
}

// stop sends SIGTERM, waits up to grace for the process to end, then sends
// SIGKILL. It reports whether SIGKILL was needed.
func (d daemon) stop(grace time.Duration) (killed bool) {
	if !d.alive() {
		return false
	}
	_ = syscall.Kill(d.pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !d.alive() {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(d.pid, syscall.SIGKILL)
	for i := 0; i < 50 && d.alive(); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// procStat returns the fields of /proc/PID/stat after the command name
// (which may hold spaces): fields[0] is the state (field 3).
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	return strings.Fields(s[i+1:]), nil
}

func procStartTime(pid int) (uint64, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	return strconv.ParseUint(f[19], 10, 64) // field 22
}

func procState(pid int) (string, error) {
	f, err := procStat(pid)
	if err != nil || len(f) == 0 {
		return "", err
	}
	return f[0], nil
}
