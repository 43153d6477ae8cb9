//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	cebpf "github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// BenchmarkExecStorm runs an exec storm (a shell forking and exec'ing
// /bin/true HOOKBOX_STORM_EXECS times, default 20,000) inside a cgroup,
// once per mode in every iteration, interleaved so drift on a shared host
// hits all modes alike:
//
//   - untraced: no BPF program attached;
//   - traced:   the tracer attached and the cgroup armed; every event
//     delivered (a loss fails the benchmark);
//   - bpftrace: a bpftrace probe on sched_process_exec filtered to the
//     cgroup and printing pid and filename per exec (skipped when bpftrace
//     is not installed).
//
// It reports the median ns per exec of each mode and the overheads in %
// against untraced, then the BPF programs' own run time per traced exec
// (kernel.bpf_stats_enabled during one extra traced storm).
//
//	sudo go test ./ebpf/ -run '^$' -bench BenchmarkExecStorm -benchtime 5x
func BenchmarkExecStorm(b *testing.B) {
	n := stormSize
	if s := os.Getenv("HOOKBOX_STORM_EXECS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n <= 0 {
			b.Fatalf("HOOKBOX_STORM_EXECS=%q", s)
		}
	}
	cg := newTestCgroup(b)
	tr := requireTracer(b, Options{})
	bpftrace, _ := exec.LookPath("bpftrace")

	times := map[string][]time.Duration{}
	b.ResetTimer()
	for range b.N {
		// untraced: detach everything for the round by closing the tracer.
		if tr != nil {
			if err := tr.Close(); err != nil {
				b.Fatal(err)
			}
			tr = nil
		}
		times["untraced"] = append(times["untraced"], runStorm(b, cg, n))

		tr = requireTracer(b, Options{})
		w, err := tr.Watch(cg.ID, Policy{})
		if err != nil {
			b.Fatal(err)
		}
		col := collect(w)
		times["traced"] = append(times["traced"], runStorm(b, cg, n))
		events, st := col.stop(b, w)
		if len(events) != n+1 || st.Lost != 0 || len(st.Incomplete()) > 0 {
			b.Fatalf("traced storm: %d events of %d, stats %+v", len(events), n+1, st)
		}

		if bpftrace != "" {
			if err := tr.Close(); err != nil {
				b.Fatal(err)
			}
			tr = nil
			stop := startBpftrace(b, bpftrace, cg.ID)
			times["bpftrace"] = append(times["bpftrace"], runStorm(b, cg, n))
			if got := stop(); got != n+1 {
				b.Logf("bpftrace printed %d of %d execs", got, n+1)
			}
		}
	}
	b.StopTimer()

	base := median(times["untraced"])
	b.ReportMetric(float64(base.Nanoseconds())/float64(n+1), "untraced-ns/exec")
	for _, mode := range []string{"traced", "bpftrace"} {
		if len(times[mode]) == 0 {
			continue
		}
		m := median(times[mode])
		b.ReportMetric(float64(m.Nanoseconds())/float64(n+1), mode+"-ns/exec")
		b.ReportMetric(100*(float64(m)-float64(base))/float64(base), mode+"-overhead-%")
	}
	b.ReportMetric(0, "ns/op") // the per-mode metrics are the result

	if tr == nil {
		tr = requireTracer(b, Options{})
	}
	perExec, perMiss := bpfCost(b, tr, cg, min(n, 5000))
	b.ReportMetric(perExec, "bpf-ns/matched-exec")
	b.ReportMetric(perMiss, "bpf-ns/unwatched-exec")
}

func runStorm(b *testing.B, cg *testCgroup, n int) time.Duration {
	start := time.Now()
	if err := stormCommand(cg, n).Run(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// startBpftrace runs a bpftrace exec probe for the cgroup and returns a
// function that stops it and returns how many events it printed.
func startBpftrace(b *testing.B, bin string, cgroupID uint64) func() int {
	prog := fmt.Sprintf(`tracepoint:sched:sched_process_exec /cgroup == %d/ { printf("%%d %%s\n", pid, str(args->filename)); }`, cgroupID)
	cmd := exec.Command(bin, "-e", prog)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	lines := make(chan int, 1)
	ready := make(chan struct{})
	go func() {
		s := bufio.NewScanner(out)
		n := 0
		for s.Scan() {
			if strings.HasPrefix(s.Text(), "Attaching") {
				close(ready)
				continue
			}
			if len(strings.Fields(s.Text())) == 2 { // "pid filename"; not the blank line at exit
				n++
			}
		}
		lines <- n
	}()
	select {
	case <-ready:
		// bpftrace says "Attaching" before it attaches.
		time.Sleep(time.Second)
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		b.Fatal("bpftrace did not attach")
	}
	return func() int {
		time.Sleep(200 * time.Millisecond) // let it print the last events
		_ = cmd.Process.Signal(syscall.SIGINT)
		n := <-lines
		_ = cmd.Wait()
		return n
	}
}

// bpfCost measures the tracer's BPF run time per exec with the kernel's
// program statistics: n execs in a watched cgroup, then n outside any.
func bpfCost(b *testing.B, tr *Tracer, cg *testCgroup, n int) (perMatched, perUnwatched float64) {
	closer, err := cebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Logf("bpf stats unavailable: %v", err)
		return 0, 0
	}
	defer closer.Close()
	total := func() time.Duration {
		var d time.Duration
		for _, tp := range tr.tracepoints() {
			s, err := tp.prog.Stats()
			if err != nil {
				b.Fatal(err)
			}
			d += s.Runtime
		}
		return d
	}

	w, err := tr.Watch(cg.ID, Policy{})
	if err != nil {
		b.Fatal(err)
	}
	col := collect(w)
	t0 := total()
	if err := stormCommand(cg, n).Run(); err != nil {
		b.Fatal(err)
	}
	t1 := total()
	if _, st := col.stop(b, w); st.Delivered != uint64(n+1) {
		b.Fatalf("cost storm: %+v", st)
	}
	perMatched = float64((t1 - t0).Nanoseconds()) / float64(n+1)

	t0 = total()
	if err := stormCommand(cg, n).Run(); err != nil {
		b.Fatal(err)
	}
	perUnwatched = float64((total() - t0).Nanoseconds()) / float64(n+1)
	return perMatched, perUnwatched
}
