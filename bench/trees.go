package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"hookbox.dev/hookbox/compiler"
	"hookbox.dev/hookbox/plan"
	"hookbox.dev/hookbox/runfiles"
)

// treeEngines are the real engine specs whose runfiles are large trees:
// pi's package closure is about 20,000 files, the Gemini CLI's a 200 MB
// bundle in a few hundred. make real-engines installs both.
var treeEngines = []string{"examples/engines/pi.yaml", "examples/engines/gemini.yaml"}

// cachedRuns is how many cached assemblies of each engine are timed.
const cachedRuns = 15

// largeTrees measures assembling the runfiles of each real engine as
// `hookbox render --runfiles` and `hookbox run` do: the first assembly
// into an empty store (every byte read, hashed, copied and synced, the
// tree built and verified) and the cached one after it (nothing changed:
// a stat of every host file and tree entry). Both are timed in this
// process, so that they are the assembly's alone; the table also gives
// the wall time of the whole `hookbox render --runfiles --format digests`
// with a cached store (process start, compile, assembly, digests).
func largeTrees(hookbox string) (string, error) {
	if os.Getenv(plan.InitEnv) == "" {
		os.Setenv(plan.InitEnv, filepath.Join(filepath.Dir(hookbox), "hookbox-init"))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| runfiles of a real engine | files | bytes | first assembly | cached assembly (median, fastest of %d) | `hookbox render --runfiles` cached (median) |\n|---|---|---|---|---|---|\n", cachedRuns)
	measured := 0
	for _, spec := range treeEngines {
		row, err := treeAssembly(hookbox, spec)
		if err != nil {
			return "", fmt.Errorf("%s: %w", spec, err)
		}
		if row != "" {
			b.WriteString(row)
			measured++
		}
	}
	if measured == 0 {
		return "\nThe real engines are not installed (make real-engines): large runfiles trees not measured.\n", nil
	}
	b.WriteString("\nFirst: an empty runfiles store. Cached: the same host again (stat cache, assembly index and tree in place).\n")
	return b.String(), nil
}

// treeAssembly measures one engine spec; "" when its engine is not
// installed.
func treeAssembly(hookbox, spec string) (string, error) {
	renders, err := compiler.CompileFileWithOptions(spec, compiler.HostChecks(nil))
	if err != nil {
		return "", err
	}
	r := renders[0]
	for _, p := range r.Programs {
		if _, err := os.Stat(p.HostPath); err != nil {
			return "", nil // not installed here
		}
	}
	cache, err := os.MkdirTemp("/var/tmp", "hookbox-bench-trees-")
	if err != nil {
		return "", err
	}
	defer removeStore(cache)
	store, err := runfiles.OpenStore(cache)
	if err != nil {
		return "", err
	}
	// A file changed within the stat cache's racy window is hashed again by
	// the next assembly, and make bench has just rebuilt hookbox-init (the
	// container's init, assembled with the programs): the cached runs must
	// not count that.
	paths := []string{}
	for _, p := range r.Programs {
		paths = append(paths, p.HostPath)
	}
	if r.Init != nil {
		init, err := plan.InitHostPath()
		if err != nil {
			return "", err
		}
		paths = append(paths, init)
	}
	var newest time.Time
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				if c := time.Unix(st.Ctim.Unix()); c.After(newest) {
					newest = c
				}
			}
		}
	}
	time.Sleep(time.Until(newest.Add(runfiles.RacyWindow + 100*time.Millisecond)))
	ctx := context.Background()
	start := time.Now()
	first, err := plan.Runfiles(ctx, store, r, runfiles.RenderOptions{})
	if err != nil {
		return "", err
	}
	firstTime := time.Since(start)
	var bytes int64
	for _, e := range first.Manifest {
		bytes += e.Size
	}
	var cached []time.Duration
	for range cachedRuns {
		start := time.Now()
		res, err := plan.Runfiles(ctx, store, r, runfiles.RenderOptions{})
		if err != nil {
			return "", err
		}
		cached = append(cached, time.Since(start))
		if st := res.Stats; st.FilesHashed != 0 || st.BytesCopied != 0 || st.TreeBuilt {
			return "", fmt.Errorf("a cached assembly did work: %+v", st)
		}
	}
	cli, err := renderWall(hookbox, cache, spec)
	if err != nil {
		return "", err
	}
	slices.Sort(cached)
	return fmt.Sprintf("| %s (%s) | %d | %.0f MB | %.2f s | %.1f ms, %.1f ms | %.0f ms |\n", r.Spawn, filepath.Base(spec), first.Stats.Files,
		float64(bytes)/1e6, firstTime.Seconds(), ms(cached[len(cached)/2]), ms(cached[0]), ms(cli)), nil
}

// renderWall is the median wall time of `hookbox render --runfiles
// --format digests` of spec with the store at cache.
func renderWall(hookbox, cache, spec string) (time.Duration, error) {
	var times []time.Duration
	for range 5 {
		cmd := exec.Command(hookbox, "render", "--runfiles", "--format", "digests", "--cache-dir", cache, spec)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("hookbox render: %v\n%s", err, out.String())
		}
		times = append(times, time.Since(start))
	}
	slices.Sort(times)
	return times[len(times)/2], nil
}

// removeStore deletes a runfiles store, whose trees are read-only.
func removeStore(dir string) {
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	os.RemoveAll(dir)
}
