package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"hookbox.dev/hookbox/launcher"
)

// stormRuns is how many storms of each kind are timed: storm-to-storm
// noise on a small VM is as large as a tracer's cost, and five did not
// resolve it.
const stormRuns = 9

// stormExecs is the fastest storm's exec count (-storm-execs).
var stormExecs = 20000

// stormLoad is an exec storm: execs runs of /bin/true, with work shell
// loop iterations (no exec) between two of them to lower the exec rate.
type stormLoad struct{ execs, work int }

// bpftraceProbe prints a line per exec of the run's cgroup, its pid,
// filename and argv: about what hookbox records of an exec. %d is the
// cgroup's id (the inode of its cgroup2 directory, as the spawn record
// has it).
const bpftraceProbe = `BEGIN { printf("READY\n"); }
tracepoint:syscalls:sys_enter_execve /cgroup == %d/ { printf("%%d %%s ", pid, str(args->filename)); join(args->argv); }`

// stormOutcome is one kind of storm's medians.
type stormOutcome struct {
	loopMS []float64 // the storm loop's own time, measured inside the container
	events int
	lost   string
}

// execStorm runs an exec storm inside a container untraced, traced by
// hookbox and untraced under a bpftrace probe of the run's cgroup, and
// compares the time of the storm's loop (timed inside the container, so
// that no tracer's load or unload is in it). The engine waits on a FIFO in
// the workspace until the probe is attached.
func execStorm(hookbox, state, ws, work string, load stormLoad) (string, error) {
	gate := filepath.Join(ws, "storm-gate")
	os.Remove(gate)
	if err := syscall.Mkfifo(gate, 0o666); err != nil {
		return "", fmt.Errorf("storm gate: %w", err)
	}
	os.Chmod(gate, 0o666) // past the umask: the engine's uid opens it
	defer os.Remove(gate)
	specFor := func(mode string) string {
		path := filepath.Join(work, fmt.Sprintf("storm-%d-%d-%s.yaml", load.execs, load.work, mode))
		script := fmt.Sprintf(`read g < /workspace/storm-gate; s=$(date +%%s%%N); i=0; while [ $i -lt %d ]; do /bin/true; j=0; while [ $j -lt %d ]; do j=$((j+1)); done; i=$((i+1)); done; e=$(date +%%s%%N); echo storm-ns $((e-s))`,
			load.execs, load.work)
		os.WriteFile(path, []byte(fmt.Sprintf(`apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: storm}
spec:
  engine: {kind: exec, path: /bin/sh, args: [-c, '%s']}
  tools: [/bin/true, /bin/date]
  workspace: %s
  limits: {timeout: 10m, pids: 64}
  trace: {mode: %s}
`, script, ws, mode)), 0o644)
		return path
	}
	bpftrace, _ := exec.LookPath("bpftrace")
	// Interleaved: each round runs one storm of every kind, so a slow
	// minute of the host weighs on every kind alike.
	type kind struct {
		name, spec, probe string
		o                 stormOutcome
	}
	kinds := []*kind{{name: "untraced", spec: specFor("off")}, {name: "traced by hookbox", spec: specFor("observe")}}
	if bpftrace != "" {
		kinds = append(kinds, &kind{name: "untraced, under a bpftrace probe (a line per exec: pid, filename, argv)", spec: specFor("off"), probe: bpftrace})
	}
	for i := 0; i < stormRuns; i++ {
		for _, k := range kinds {
			loop, events, lost, err := stormOnce(hookbox, state, k.spec, gate, k.probe)
			if err != nil {
				return "", fmt.Errorf("storm %s: %w", k.name, err)
			}
			k.o.loopMS = append(k.o.loopMS, loop)
			k.o.events, k.o.lost = events, lost
		}
	}
	// Each round's ratio to the untraced storm of the same round, before
	// the sort: a drift of the host over the rounds cancels out of it.
	paired := make([]float64, len(kinds))
	for i, k := range kinds {
		paired[i] = medianRatio(k.o.loopMS, kinds[0].o.loopMS)
	}
	for _, k := range kinds {
		slices.Sort(k.o.loopMS)
	}
	mid := stormRuns / 2
	off := kinds[0].o
	var b strings.Builder
	rate := float64(load.execs) / off.loopMS[mid] * 1000
	fmt.Fprintf(&b, "\n| exec storm (%d execs, %d shell iterations between two; %.0f execs/s untraced) | median storm loop | ratio of medians | median of the rounds' ratios | per exec | events | lost |\n|---|---|---|---|---|---|---|\n",
		load.execs, load.work, rate)
	fmt.Fprintf(&b, "| untraced | %.0f ms | 1.000× | 1.000× | - | - | - |\n", off.loopMS[mid])
	for i, k := range kinds[1:] {
		o := k.o
		perExec := (o.loopMS[mid] - off.loopMS[mid]) * 1000 / float64(load.execs)
		fmt.Fprintf(&b, "| %s | %.0f ms | %.3f× | %.3f× | %+.1f µs | %d | %s |\n", k.name, o.loopMS[mid], o.loopMS[mid]/off.loopMS[mid], paired[i+1], perExec, o.events, o.lost)
	}
	if bpftrace == "" {
		b.WriteString("\nbpftrace is not installed here, so its exec probe was not compared in this run.\n")
		return b.String(), nil
	}
	fmt.Fprintf(&b, "\nMedian of %d storms each, in rounds of one storm of every kind (a round's ratio is to that round's untraced storm); the loop is timed inside the container (date before and after).\n", stormRuns)
	return b.String(), nil
}

// stormOnce runs one storm with --json, opens the gate once the run is
// spawned (and, with bpftrace, once its probe of the run's cgroup is
// attached), and returns the loop's time, the events recorded (hookbox's
// trace or the probe's lines) and the losses.
func stormOnce(hookbox, state, spec, gate, bpftrace string) (float64, int, string, error) {
	cmd := exec.Command(hookbox, "run", "--json", "--state-dir", state, spec)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, "", err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return 0, 0, "", err
	}
	defer cmd.Wait()
	type event struct {
		Type    string            `json:"type"`
		Data    string            `json:"data"`
		Spawned *launcher.Spawned `json:"spawned"`
		Result  *launcher.Result  `json:"result"`
	}
	events := json.NewDecoder(stdout)
	var probe *exec.Cmd
	probeLines := make(chan int, 1)
	probeLost := make(chan string, 1)
	var output strings.Builder
	var res *launcher.Result
	for {
		var e event
		if err := events.Decode(&e); err == io.EOF {
			break
		} else if err != nil {
			return 0, 0, "", fmt.Errorf("event stream: %v\n%s", err, stderr.String())
		}
		switch e.Type {
		case launcher.EventSpawned:
			if bpftrace != "" {
				if e.Spawned.CgroupID == 0 {
					cmd.Process.Signal(syscall.SIGTERM) // hookbox tears the run down
					return 0, 0, "", fmt.Errorf("the run has no cgroup id for the probe to filter on")
				}
				probe, err = startProbe(bpftrace, e.Spawned.CgroupID, probeLines, probeLost)
				if err != nil {
					cmd.Process.Signal(syscall.SIGTERM) // hookbox tears the run down
					return 0, 0, "", err
				}
			}
			// Blocks until the engine opens its end.
			if err := os.WriteFile(gate, []byte("go\n"), 0o666); err != nil {
				return 0, 0, "", err
			}
		case launcher.EventOutput:
			output.WriteString(e.Data)
		case launcher.EventResult:
			res = e.Result
		}
	}
	if err := cmd.Wait(); err != nil {
		return 0, 0, "", fmt.Errorf("%v\n%s", err, stderr.String())
	}
	if res == nil || res.Status != launcher.StatusCompleted {
		return 0, 0, "", fmt.Errorf("storm did not complete: %+v\n%s", res, stderr.String())
	}
	_, ns, ok := strings.Cut(strings.TrimSpace(output.String()), "storm-ns ")
	loopNS, err := strconv.ParseFloat(strings.TrimSpace(ns), 64)
	if !ok || err != nil {
		return 0, 0, "", fmt.Errorf("no storm time in the engine's output %q", output.String())
	}
	if probe != nil {
		probe.Process.Signal(syscall.SIGINT)
		lines, lost := <-probeLines, <-probeLost
		probe.Wait()
		return loopNS / 1e6, lines, lost, nil
	}
	lost := "-"
	if data, err := os.ReadFile(filepath.Join(res.RecordDir, launcher.TraceFile)); err == nil {
		stats := data[bytes.LastIndexByte(bytes.TrimSpace(data), '\n')+1:]
		var st struct {
			Stats struct{ Lost uint64 } `json:"stats"`
		}
		if json.Unmarshal(stats, &st) == nil {
			lost = fmt.Sprint(st.Stats.Lost)
		}
	}
	return loopNS / 1e6, res.Trace.Events, lost, nil
}

// startProbe starts bpftrace on the cgroup and returns once its probe
// is attached (its BEGIN has printed); it then counts the exec lines it
// prints, and reports them and its lost-event count when it ends.
func startProbe(bpftrace string, cgroupID uint64, lines chan<- int, lost chan<- string) (*exec.Cmd, error) {
	probe := exec.Command(bpftrace, "-e", fmt.Sprintf(bpftraceProbe, cgroupID))
	out, err := probe.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	probe.Stderr = &stderr
	if err := probe.Start(); err != nil {
		return nil, err
	}
	ready, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		n, dropped := 0, "0"
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "READY":
				close(ready)
			case strings.HasPrefix(line, "Lost "):
				dropped = strings.Fields(line)[1]
			case strings.Contains(line, " /"):
				n++
			}
		}
		lines <- n
		lost <- dropped
	}()
	select {
	case <-ready:
		return probe, nil
	case <-ended:
		probe.Wait()
		return nil, fmt.Errorf("bpftrace ended before attaching: %s", stderr.String())
	case <-time.After(60 * time.Second):
		probe.Process.Kill()
		return nil, fmt.Errorf("bpftrace did not attach within 60 s: %s", stderr.String())
	}
}
