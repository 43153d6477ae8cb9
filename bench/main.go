// Command bench measures `hookbox run` of a trivial spawn against its peers
// in one invocation: `ctr run --rm` and `runc run` of the same rootfs and
// command. It prints a table of medians and ratios and hookbox's peak RSS,
// then concurrent runs, exec storms (against a bpftrace probe too), runs
// with many runfiles (scale.go, storm.go) and the assembly of large
// runfiles trees (the real engines, trees.go), and writes the tables to bench/results.md. Run it as
// root with containerd running: make bench.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"hookbox.dev/hookbox/images"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/render"
)

func main() {
	runs := flag.Int("n", 40, "runs per command (rounds of the peer table)")
	hookbox := flag.String("hookbox", "bin/hookbox", "hookbox binary")
	out := flag.String("out", "", "where to write the table (make bench: bench/results.md); else it is printed only")
	flag.IntVar(&stormExecs, "storm-execs", stormExecs, "execs of the fastest exec storm (a slower one has a quarter)")
	only := flag.String("only", "", "the sections to run, comma-separated: peers, scale, storm, tools, trees (default all)")
	flag.Parse()
	want := func(section string) bool { return *only == "" || slices.Contains(strings.Split(*only, ","), section) }
	// Absolute, since hookbox-init is found next to it and specs need
	// absolute paths.
	bin, err := filepath.Abs(*hookbox)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if err := bench(*runs, bin, *out, want); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func bench(n int, hookbox, out string, want func(section string) bool) error {
	work, err := os.MkdirTemp("/var/tmp", "hookbox-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	state := filepath.Join(work, "state")
	ws := filepath.Join(work, "ws")
	os.MkdirAll(ws, 0o755)
	spec := filepath.Join(work, "trivial.yaml")
	os.WriteFile(spec, []byte(`apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: trivial}
spec:
  engine: {kind: exec, path: /usr/bin/true}
  workspace: `+ws+`
  trace: {mode: off}
`), 0o644)
	traced := filepath.Join(work, "traced.yaml")
	os.WriteFile(traced, []byte(`apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: traced}
spec:
  engine: {kind: exec, path: /usr/bin/true}
  workspace: `+ws+`
  trace: {mode: verify}
`), 0o644)

	// Warm up: image import, runfiles store (not counted).
	if out, err := exec.Command(hookbox, "run", "--state-dir", state, spec).CombinedOutput(); err != nil {
		return fmt.Errorf("warm-up run: %v\n%s", err, out)
	}
	// The same rootfs for ctr and runc: the base image with /usr/bin/true's
	// runfiles tree copied in.
	rootfs := filepath.Join(work, "bundle", "rootfs")
	if err := images.NewDefinition(nil).WriteRootfs(rootfs); err != nil {
		return err
	}
	trees, _ := filepath.Glob(filepath.Join(state, "runfiles", "trees", "*"))
	if len(trees) != 1 {
		return fmt.Errorf("expected one runfiles tree, found %d", len(trees))
	}
	if out, err := exec.Command("cp", "-a", trees[0]+"/.", rootfs).CombinedOutput(); err != nil {
		return fmt.Errorf("copy tree: %v %s", err, out)
	}
	bundle := filepath.Join(work, "bundle")
	if out, err := exec.Command("runc", "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		return fmt.Errorf("runc spec: %v %s", err, out)
	}
	cfg, _ := os.ReadFile(filepath.Join(bundle, "config.json"))
	cfg = bytes.Replace(cfg, []byte(`"sh"`), []byte(`"/usr/bin/true"`), 1)
	cfg = bytes.Replace(cfg, []byte(`"terminal": true`), []byte(`"terminal": false`), 1)
	os.WriteFile(filepath.Join(bundle, "config.json"), cfg, 0o644)

	type row struct {
		name   string
		cmd    func(i int) *exec.Cmd
		median time.Duration
		all    []time.Duration
		alone  bool // measured after the rounds, in a block of its own
	}
	var rows []*row
	peakRSS := map[string]int64{}
	// measure adds a command to the rounds; runRounds runs every added
	// command once per round, n rounds, in the order added, rotated by
	// one each round. Interleaved,
	// a slow minute of the host (a neighbour's load) weighs on every
	// command alike instead of on whichever ran then.
	measure := func(name string, cmd func(i int) *exec.Cmd) error {
		rows = append(rows, &row{name: name, cmd: cmd})
		return nil
	}
	// measureAlone is for a command that leaves the host busy after it
	// exits (the kernel detaching a tracer it loaded), which would weigh
	// on the command after it in a round.
	measureAlone := func(name string, cmd func(i int) *exec.Cmd) error {
		rows = append(rows, &row{name: name, cmd: cmd, alone: true})
		return nil
	}
	runOnce := func(r *row, i int) error {
		c := r.cmd(i)
		var buf bytes.Buffer
		c.Stdout, c.Stderr = &buf, &buf
		start := time.Now()
		if err := c.Run(); err != nil {
			return fmt.Errorf("%s: %v\n%s", r.name, err, buf.String())
		}
		r.all = append(r.all, time.Since(start))
		if strings.HasPrefix(r.name, "hookbox run") {
			if ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage); ok && ru.Maxrss > peakRSS[r.name] {
				peakRSS[r.name] = ru.Maxrss
			}
		}
		return nil
	}
	runRounds := func() error {
		for i := 0; i < n; i++ {
			// Each round starts one command later: in a fixed order the
			// same command always follows the same one (whose shim may
			// still be exiting when the next command starts).
			for j := range rows {
				r := rows[(i+j)%len(rows)]
				if !r.alone {
					if err := runOnce(r, i); err != nil {
						return err
					}
				}
			}
		}
		for _, r := range rows {
			for i := 0; r.alone && i < n; i++ {
				if err := runOnce(r, i); err != nil {
					return err
				}
			}
		}
		for _, r := range rows {
			sorted := slices.Clone(r.all)
			slices.Sort(sorted)
			r.median = sorted[len(sorted)/2]
		}
		return nil
	}
	ctx := context.Background()
	addr := os.Getenv("HOOKBOX_CONTAINERD_ADDRESS")
	if addr == "" {
		addr = "/run/containerd/containerd.sock"
	}
	// Traced the default way (no helper answers at the socket it tries):
	// through the managed tracer, of the bench's own runtime directory,
	// which the first traced run starts; then by hookbox itself (a ring
	// size of its own makes it load the tracer in process).
	runtimeDir := filepath.Join(work, "run")
	noHelper := append(os.Environ(), "HOOKBOX_TRACER_SOCKET="+filepath.Join(work, "no-helper.sock"), "HOOKBOX_RUNTIME_DIR="+runtimeDir)
	defer func() {
		c := exec.Command(hookbox, "daemon", "stop", "--state-dir", state)
		c.Env = noHelper
		c.Run()
	}()
	median := func(name string) time.Duration {
		for _, r := range rows {
			if r.name == name {
				return r.median
			}
		}
		return 0
	}
	var b strings.Builder
	if want("peers") {
		if err := measure("hookbox run", func(int) *exec.Cmd {
			return exec.CommandContext(ctx, hookbox, "run", "--state-dir", state, spec)
		}); err != nil {
			return err
		}
		if err := measure("hookbox run (traced, warm, default)", func(int) *exec.Cmd {
			c := exec.CommandContext(ctx, hookbox, "run", "--state-dir", state, traced)
			c.Env = noHelper
			return c
		}); err != nil {
			return err
		}
		if err := measureAlone("hookbox run (traced, cold, in-process)", func(int) *exec.Cmd {
			c := exec.CommandContext(ctx, hookbox, "run", "--state-dir", state, "--trace-ring-size", "4194304", traced)
			c.Env = noHelper
			return c
		}); err != nil {
			return err
		}
		socket := filepath.Join(work, "tracer", "tracer.sock")
		helper := exec.Command(hookbox, "tracer", "serve", "--socket", socket)
		if err := helper.Start(); err != nil {
			return err
		}
		defer func() { helper.Process.Signal(syscall.SIGTERM); helper.Wait() }()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(socket); err == nil {
				break
			} else if time.Now().After(deadline) {
				return fmt.Errorf("tracer helper did not listen at %s", socket)
			}
		}
		withHelper := append(os.Environ(), "HOOKBOX_TRACER_SOCKET="+socket)
		if err := measure("hookbox run (traced, helper)", func(int) *exec.Cmd {
			c := exec.CommandContext(ctx, hookbox, "run", "--state-dir", state, traced)
			c.Env = withHelper
			return c
		}); err != nil {
			return err
		}
		if err := measure("ctr run --rm", func(i int) *exec.Cmd {
			return exec.CommandContext(ctx, "ctr", "--address", addr, "-n", "hookbox-bench", "run", "--rm", "--rootfs", rootfs,
				fmt.Sprintf("bench-ctr-%d-%d", os.Getpid(), i), "/usr/bin/true")
		}); err != nil {
			return err
		}
		if err := measure("runc run", func(i int) *exec.Cmd {
			return exec.CommandContext(ctx, "runc", "run", "--bundle", bundle, fmt.Sprintf("bench-runc-%d-%d", os.Getpid(), i))
		}); err != nil {
			return err
		}
		// The hardened peer: hookbox applies containerd's default seccomp
		// profile to every run, which ctr run --rm does not unless asked.
		if err := measure("ctr run --rm --seccomp", func(i int) *exec.Cmd {
			return exec.CommandContext(ctx, "ctr", "--address", addr, "-n", "hookbox-bench", "run", "--rm", "--seccomp", "--rootfs", rootfs,
				fmt.Sprintf("bench-ctr-sc-%d-%d", os.Getpid(), i), "/usr/bin/true")
		}); err != nil {
			return err
		}
		// The same hardening through ctr: the OCI spec hookbox gave
		// containerd for an untraced run (masked paths, mounts, limits,
		// namespaces, hookbox-init installing the seccomp program),
		// running /usr/bin/true under the init. What separates it from
		// hookbox run is hookbox's own work; what separates it from ctr
		// run --rm is the spec's.
		specPeer, err := hookboxSpecPeer(state, work, rootfs)
		if err != nil {
			return err
		}
		if err := measure("ctr run --rm, hookbox's OCI spec", func(i int) *exec.Cmd {
			return exec.CommandContext(ctx, "ctr", "--address", addr, "-n", "hookbox-bench", "run", "--rm", "--config", specPeer,
				fmt.Sprintf("bench-ctr-spec-%d-%d", os.Getpid(), i))
		}); err != nil {
			return err
		}
		if err := runRounds(); err != nil {
			return err
		}
		fmt.Fprintf(&b, "| command | median | ratio to ctr run --rm | median of the rounds' ratios to ctr run --rm | ratio to runc run |\n|---|---|---|---|---|\n")
		ctrMedian, runcMedian := median("ctr run --rm"), median("runc run")
		var ctrRounds []float64
		for _, r := range rows {
			if r.name == "ctr run --rm" {
				ctrRounds = msAll(r.all)
			}
		}
		for _, r := range rows {
			// A row measured in a block of its own has no round to pair.
			paired := "-"
			if !r.alone {
				paired = fmt.Sprintf("%.2f×", medianRatio(msAll(r.all), ctrRounds))
			}
			fmt.Fprintf(&b, "| %s | %.1f ms | %.2f× | %s | %.2f× |\n", r.name, ms(r.median), ms(r.median)/ms(ctrMedian), paired, ms(r.median)/ms(runcMedian))
		}
		fmt.Fprintf(&b, "\nhookbox peak RSS during a run (max over %d runs): %.1f MiB untraced, %.1f MiB traced (warm, default), %.1f MiB traced (cold, in-process), %.1f MiB traced through the helper\n",
			n, float64(peakRSS["hookbox run"])/1024, float64(peakRSS["hookbox run (traced, warm, default)"])/1024,
			float64(peakRSS["hookbox run (traced, cold, in-process)"])/1024, float64(peakRSS["hookbox run (traced, helper)"])/1024)
		fmt.Fprintf(&b, "\n%d rounds of a trivial spawn (/usr/bin/true; tracing off unless traced), each round running every command once in this order, rotated to start one command later than the round before (the cold in-process tracer in a block of its own after the rounds: the kernel detaches its tracer after it exits), one invocation of `make bench`, %s.\n",
			n, time.Now().UTC().Format("2006-01-02"))
		fmt.Print(b.String())
	}
	if want("scale") {
		scale, err := concurrency(hookbox, state, spec, traced, noHelper, rootfs, addr)
		if err != nil {
			return err
		}
		b.WriteString(scale)
		fmt.Print(scale)
	}
	if want("storm") {
		for _, load := range []stormLoad{{execs: stormExecs}, {execs: stormExecs / 4, work: 400}} {
			storm, err := execStorm(hookbox, state, ws, work, load)
			if err != nil {
				return err
			}
			b.WriteString(storm)
			fmt.Print(storm)
		}
	}
	if want("tools") {
		tools, err := runfilesScale(hookbox, state, ws, work, 5)
		if err != nil {
			return err
		}
		b.WriteString(tools)
		fmt.Print(tools)
	}
	if want("trees") {
		large, err := largeTrees(hookbox)
		if err != nil {
			return err
		}
		b.WriteString(large)
		fmt.Print(large)
	}
	if out == "" {
		return nil
	}
	return os.WriteFile(out, []byte(b.String()), 0o644)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func msAll(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = ms(d)
	}
	return out
}

// medianRatio is the median of xs[i]/base[i]: measurements taken in the
// same round are compared, so a drift of the host over the rounds (a
// neighbour's load on a shared VM) cancels out of it.
func medianRatio(xs, base []float64) float64 {
	ratios := make([]float64, len(xs))
	for i := range xs {
		ratios[i] = xs[i] / base[i]
	}
	slices.Sort(ratios)
	return ratios[len(ratios)/2]
}

// hookboxSpecPeer writes, for ctr run --config, the OCI spec of the newest
// untraced run in state with the bench's rootfs as its root and
// /usr/bin/true as its process; a bind mount whose source the run removed
// gets an empty directory of the bench's. It returns the file's path.
func hookboxSpecPeer(state, work, rootfs string) (string, error) {
	records, _ := filepath.Glob(filepath.Join(state, "runs", "*", launcher.OCIFile))
	slices.Sort(records)
	for i := len(records) - 1; i >= 0; i-- {
		res, err := lastResultIn(filepath.Dir(records[i]))
		if err != nil || res.Trace.Mode != render.TraceOff {
			continue
		}
		data, err := os.ReadFile(records[i])
		if err != nil {
			return "", err
		}
		var spec map[string]any
		if err := json.Unmarshal(data, &spec); err != nil {
			return "", fmt.Errorf("%s: %w", records[i], err)
		}
		spec["root"] = map[string]any{"path": rootfs, "readonly": true}
		process, _ := spec["process"].(map[string]any)
		linux, _ := spec["linux"].(map[string]any)
		mounts, _ := spec["mounts"].([]any)
		if process == nil || linux == nil {
			return "", fmt.Errorf("%s: no process or linux section", records[i])
		}
		// The recorded argv: hookbox-init (in the tree copied into the
		// rootfs), which installs the run's seccomp program from the
		// record's config dir, then /usr/bin/true.
		linux["cgroupsPath"] = "/hookbox-bench/spec-peer"
		for k, m := range mounts {
			mount, _ := m.(map[string]any)
			src, _ := mount["source"].(string)
			if mount["type"] != "bind" || src == "" {
				continue
			}
			if _, err := os.Stat(src); err != nil {
				standIn := filepath.Join(work, "spec-peer", fmt.Sprint(k))
				if err := os.MkdirAll(standIn, 0o755); err != nil {
					return "", err
				}
				mount["source"] = standIn
			}
		}
		out, err := json.Marshal(spec)
		if err != nil {
			return "", err
		}
		path := filepath.Join(work, "hookbox-spec.json")
		return path, os.WriteFile(path, out, 0o644)
	}
	return "", fmt.Errorf("no untraced run's %s in %s", launcher.OCIFile, state)
}

// lastResult reads the newest run record's result (run ids sort by start
// time).
func lastResult(state string) (*launcher.Result, error) {
	records, _ := filepath.Glob(filepath.Join(state, "runs", "*", launcher.ResultFile))
	if len(records) == 0 {
		return nil, fmt.Errorf("no run record in %s", state)
	}
	slices.Sort(records)
	return lastResultIn(filepath.Dir(records[len(records)-1]))
}

// lastResultIn reads the result of the run record dir.
func lastResultIn(dir string) (*launcher.Result, error) {
	data, err := os.ReadFile(filepath.Join(dir, launcher.ResultFile))
	if err != nil {
		return nil, err
	}
	var res launcher.Result
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return &res, nil
}
