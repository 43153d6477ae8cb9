package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// scaleRounds is how many times each concurrent batch is timed.
const scaleRounds = 3

// concurrent starts k commands at once and returns the wall time until the
// last one exits.
func concurrent(k int, cmd func(i int) *exec.Cmd) (time.Duration, error) {
	cmds := make([]*exec.Cmd, k)
	bufs := make([]bytes.Buffer, k)
	for i := range cmds {
		cmds[i] = cmd(i)
		cmds[i].Stdout, cmds[i].Stderr = &bufs[i], &bufs[i]
	}
	errs := make([]error, k)
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Run()
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	for i, err := range errs {
		if err != nil {
			return 0, fmt.Errorf("%v\n%s", err, bufs[i].String())
		}
	}
	return wall, nil
}

// batchMedian times scaleRounds batches of k and returns the median wall.
func batchMedian(k int, cmd func(round, i int) *exec.Cmd) (time.Duration, error) {
	var walls []time.Duration
	for round := 0; round < scaleRounds; round++ {
		wall, err := concurrent(k, func(i int) *exec.Cmd { return cmd(round, i) })
		if err != nil {
			return 0, err
		}
		walls = append(walls, wall)
	}
	slices.Sort(walls)
	return walls[len(walls)/2], nil
}

// concurrency measures k trivial runs started at once (k = 1, 5, 20):
// hookbox untraced against `ctr run --rm`, and at 20 hookbox traced too.
func concurrency(hookbox, state, spec, traced string, tracedEnv []string, rootfs, addr string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n| concurrent trivial runs | command | wall (median of %d batches) | runs/s | ratio to ctr run --rm |\n|---|---|---|---|---|\n", scaleRounds)
	for _, k := range []int{1, 5, 20} {
		ctr, err := batchMedian(k, func(round, i int) *exec.Cmd {
			return exec.Command("ctr", "--address", addr, "-n", "hookbox-bench", "run", "--rm", "--rootfs", rootfs,
				fmt.Sprintf("bench-ctr-c%d-%d-%d-%d", k, os.Getpid(), round, i), "/usr/bin/true")
		})
		if err != nil {
			return "", fmt.Errorf("%d concurrent ctr run --rm: %w", k, err)
		}
		hb, err := batchMedian(k, func(int, int) *exec.Cmd {
			return exec.Command(hookbox, "run", "--state-dir", state, spec)
		})
		if err != nil {
			return "", fmt.Errorf("%d concurrent hookbox run: %w", k, err)
		}
		rows := []struct {
			name string
			wall time.Duration
		}{{"hookbox run", hb}}
		if k == 20 {
			tr, err := batchMedian(k, func(int, int) *exec.Cmd {
				c := exec.Command(hookbox, "run", "--state-dir", state, traced)
				c.Env = tracedEnv
				return c
			})
			if err != nil {
				return "", fmt.Errorf("%d concurrent traced hookbox run: %w", k, err)
			}
			rows = append(rows, struct {
				name string
				wall time.Duration
			}{"hookbox run (traced, warm, default)", tr})
		}
		rows = append(rows, struct {
			name string
			wall time.Duration
		}{"ctr run --rm", ctr})
		for _, r := range rows {
			fmt.Fprintf(&b, "| %d | %s | %.0f ms | %.1f | %.2f× |\n", k, r.name, ms(r.wall), float64(k)/r.wall.Seconds(), ms(r.wall)/ms(ctr))
		}
	}
	b.WriteString("\nEach batch starts every run at once; runs/s is the batch size over its wall time. Traced: the default trace (verify) without a tracer helper.\n")
	return b.String(), nil
}

// toolCounts are the numbers of declared tools of the runfiles rows.
var toolCounts = []int{1, 100, 600}

// runfilesScale measures a trivial run whose spec declares n tools (ELF
// programs from /usr/bin and /usr/sbin, each with its libraries): the first
// run (assembly into the store) and the median of later ones (cached).
func runfilesScale(hookbox, state, ws, work string, n int) (string, error) {
	programs := hostPrograms()
	var b strings.Builder
	fmt.Fprintf(&b, "\n| declared tools | runfiles files | first run | cached run (median of %d) | cached prepare phase |\n|---|---|---|---|---|\n", n)
	for _, count := range toolCounts {
		if count > len(programs) {
			fmt.Fprintf(&b, "| %d | - | - | - | only %d host programs to declare |\n", count, len(programs))
			continue
		}
		spec := filepath.Join(work, fmt.Sprintf("tools-%d.yaml", count))
		os.WriteFile(spec, []byte(fmt.Sprintf(`apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: tools-%d}
spec:
  engine: {kind: exec, path: /usr/bin/true}
  tools: [%s]
  workspace: %s
  trace: {mode: off}
`, count, strings.Join(quoted(programs[:count]), ", "), ws)), 0o644)
		var walls []time.Duration
		var prepares []float64
		files := 0
		for i := 0; i <= n; i++ {
			start := time.Now()
			if out, err := exec.Command(hookbox, "run", "--state-dir", state, spec).CombinedOutput(); err != nil {
				return "", fmt.Errorf("run with %d tools: %v\n%s", count, err, out)
			}
			walls = append(walls, time.Since(start))
			res, err := lastResult(state)
			if err != nil {
				return "", err
			}
			if res.Runfiles != nil {
				files = res.Runfiles.Files
			}
			if i > 0 {
				prepares = append(prepares, float64(res.Timings.Prepare))
			}
		}
		cached := slices.Clone(walls[1:])
		slices.Sort(cached)
		slices.Sort(prepares)
		fmt.Fprintf(&b, "| %d | %d | %.0f ms | %.1f ms | %.0f ms |\n", count, files, ms(walls[0]), ms(cached[len(cached)/2]), prepares[len(prepares)/2])
	}
	b.WriteString("\nFirst: the first run of that spec against the bench's store (the programs' bytes may already be in it from an earlier row). Untraced.\n")
	return b.String(), nil
}

// quoted quotes each path for a YAML flow sequence (/usr/bin/[ is a
// program too).
func quoted(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = strconv.Quote(p)
	}
	return out
}

// hostPrograms lists the world-readable, non-setuid ELF programs in
// /usr/bin and /usr/sbin, sorted.
func hostPrograms() []string {
	var out []string
	for _, dir := range []string{"/usr/bin", "/usr/sbin"} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if !e.Type().IsRegular() {
				continue
			}
			path := filepath.Join(dir, e.Name())
			info, err := e.Info()
			if err != nil || info.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || info.Mode().Perm()&0o004 == 0 {
				continue
			}
			f, err := os.Open(path)
			if err != nil {
				continue
			}
			magic := make([]byte, 4)
			_, err = f.Read(magic)
			f.Close()
			if err == nil && string(magic) == "\x7fELF" {
				out = append(out, path)
			}
		}
	}
	slices.Sort(out)
	return out
}
