package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"
)

// probeReport is the scripted engine's probe event (internal/probe.Report;
// this module does not import hookbox's).
type probeReport struct {
	Argv   []string
	Env    []string
	UID    int
	GID    int
	Groups []int
	Status map[string]string
	Paths  []struct {
		Path       string
		Exists     bool
		Writable   bool
		FSType     string
		MountFlags string `json:"mount_flags"`
	}
	Dial []struct {
		Address string
		OK      bool
		Error   string
	}
	Interfaces []string
	Limits     map[string]string
}

// The parity spec's process test: fork more children than its pids limit
// allows (each a Go process with a few threads, all counted).
const (
	parityPids  = 32
	parityForks = 40
)

// paritySpec writes the spec both sides run: the scripted engine probes
// its sandbox (argv, environment names, ids, the mounts and writability
// of the paths a spawn has, TCP to a pod and to a closed loopback port,
// the limits it can see), then forks more children than its pids limit.
func paritySpec(t *testing.T, podAddr string) string {
	t.Helper()
	engine, err := filepath.Abs("../bin/hookbox-scripted-engine")
	if err != nil {
		t.Fatal(err)
	}
	spec := fmt.Sprintf(`apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: parity}
spec:
  engine:
    kind: scripted
    path: %s
    script:
      - probe:
          paths: [/, /workspace, /workspace/README.md, /run/hookbox, /run/hookbox/out, /run/hookbox/home, /tmp, /hookbox/etc, /hookbox/etc/script.json, %s, /etc, /usr, /dev/shm, /sys/fs/cgroup]
          dial: [%q, "127.0.0.1:9"]
      - fork: {count: %d, sleep: 2s, wait: true}
      - exit: 0
  prompt: probe the sandbox
  workspace: %s
  env: {set: {PARITY: "1"}}
  secrets: [PARITY_SECRET]
  limits: {timeout: 2m, memory: 512Mi, pids: %d, tmpfs: 16Mi}
`, engine, engine, podAddr, parityForks, exampleWorkspace(t), parityPids)
	file := filepath.Join(t.TempDir(), "parity.yaml")
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// parseProbe finds the probe event and the fork event in an engine's
// output.
func parseProbe(t *testing.T, side string, out []byte) (probeReport, int) {
	t.Helper()
	var r probeReport
	found, started := false, -1
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e struct {
			Type    string
			Started *int
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		switch e.Type {
		case "probe":
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("%s: probe event: %v", side, err)
			}
			found = true
		case "fork":
			started = *e.Started
		}
	}
	if !found || started < 0 {
		t.Fatalf("%s: no probe or no fork event in the engine's output:\n%s", side, out)
	}
	return r, started
}

// aspects flattens a report into comparable rows.
func aspects(r probeReport, forked int) map[string]string {
	a := map[string]string{
		"argv":                strings.Join(r.Argv, " "),
		"env names":           strings.Join(r.Env, " "),
		"uid gid groups":      fmt.Sprintf("%d %d %v", r.UID, r.GID, r.Groups),
		"interfaces":          strings.Join(r.Interfaces, ", "),
		"processes (pids)":    fmt.Sprintf("%d of %d forks started (pids %d)", forked, parityForks, parityPids),
		"cgroupfs memory":     orNone(r.Limits["memory"]),
		"cgroupfs pids":       orNone(r.Limits["pids"]),
		"cgroupfs cpu":        orNone(r.Limits["cpu"]),
		"/run/hookbox size":   orNone(r.Limits["/run/hookbox bytes"]),
		"/run/hookbox inodes": orNone(r.Limits["/run/hookbox inodes"]),
		"/tmp size":           orNone(r.Limits["/tmp bytes"]),
		"/tmp inodes":         orNone(r.Limits["/tmp inodes"]),
		"status NoNewPrivs":   r.Status["NoNewPrivs"],
		"status Seccomp":      r.Status["Seccomp"],
		"status CapEff":       r.Status["CapEff"],
		"status CapBnd":       r.Status["CapBnd"],
	}
	for _, p := range r.Paths {
		state := "absent"
		if p.Exists {
			state = "read-only"
			if p.Writable {
				state = "writable"
			}
		}
		a["path "+p.Path] = state
		if p.Exists {
			a["mount "+p.Path] = p.FSType + " " + mountFlags(p.MountFlags)
		}
	}
	for _, d := range r.Dial {
		if d.OK {
			a["dial "+d.Address] = "connected"
		} else {
			a["dial "+d.Address] = d.Error
		}
	}
	return a
}

func orNone(s string) string {
	if s == "" {
		return "(not visible)"
	}
	return s
}

// mountFlags keeps the per-mount options that confine: ro/rw, nosuid,
// nodev, noexec (relatime and the like are not the spec's).
func mountFlags(flags string) string {
	var keep []string
	for _, f := range strings.Split(flags, ",") {
		if slices.Contains([]string{"ro", "rw", "nosuid", "nodev", "noexec"}, f) {
			keep = append(keep, f)
		}
	}
	return strings.Join(keep, ",")
}

// expectedDifference names, for an aspect that may differ between
// `hookbox run` and the Job, the words of the Job's
// hookbox.dev/not-reproduced annotation that say why. An aspect it has no
// entry for must be the same on both sides.
func expectedDifference(aspect, podAddr string) string {
	switch {
	case aspect == "processes (pids)":
		return "pids limit"
	case aspect == "mount /run/hookbox", aspect == "mount /run/hookbox/out", aspect == "mount /run/hookbox/home", aspect == "mount /tmp":
		return "noexec on /run/hookbox and /tmp"
	case strings.HasSuffix(aspect, " inodes"):
		return "inode limit"
	case aspect == "dial "+podAddr, aspect == "interfaces":
		return "network none only where the CNI enforces NetworkPolicy"
	case strings.HasPrefix(aspect, "cgroupfs "), aspect == "path /sys/fs/cgroup", aspect == "mount /sys/fs/cgroup":
		return "the runtime mounts the container's cgroups"
	case aspect == "env names":
		return "the kubelet adds HOSTNAME"
	case strings.HasPrefix(aspect, "mount /workspace"), strings.HasPrefix(aspect, "mount /hookbox/etc"):
		return "the kubelet mounts volumes ro or rw only"
	case aspect == "uid gid groups":
		return "supplementary groups"
	}
	return ""
}

// TestParityOfRunAndJob runs one spec both ways, `hookbox run` on the
// system containerd and the rendered Job on the cluster, with the scripted
// engine's probe step, and compares what the engine saw: its argv,
// environment names, ids, confinement (capabilities, no_new_privs,
// seccomp), the mount and writability of each path of a spawn, TCP
// reachability of a pod and of a closed loopback port, its interfaces, and
// the limits visible inside (cgroupfs, the run dir's and /tmp's size and
// inodes, how many processes it could start). It prints the table; every
// difference must be one the Job's hookbox.dev/not-reproduced annotation
// lists (expectedDifference says which words), and the test fails on any
// other.
func TestParityOfRunAndJob(t *testing.T) {
	l, client := requireCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	hookbox := repoBin(t, "hookbox")
	// A pod to dial: the scripted API, with nothing to answer.
	_, podIP := scriptedAPIPod(ctx, t, l, client, map[string][]apiTurn{"listener": {}}, []string{"listener"})
	podAddr := podIP + ":8081"
	spec := paritySpec(t, podAddr)
	const secret = "hookbox-parity-secret"

	// hookbox run, on the system containerd. The fork step fails at the
	// pids limit and the engine exits 1: its output is what counts.
	run := exec.CommandContext(ctx, hookbox, "run", spec)
	run.Env = append(os.Environ(), "PARITY_SECRET="+secret)
	var stderr bytes.Buffer
	run.Stderr = &stderr
	local, err := run.Output()
	t.Logf("hookbox run: %v\n%s", err, stderr.String())
	localReport, localForks := parseProbe(t, "hookbox run", local)

	b := applyBuilt(ctx, t, l, client, spec, exampleWorkspace(t), map[string]string{"PARITY_SECRET": secret})
	j := specJob{ns: b.ns, name: b.jobs[0].Name, objects: b.objects}
	waitForJob(ctx, t, client, j.ns, j.name)
	jobOut := j.engineLog(ctx, t, client)
	jobReport, jobForks := parseProbe(t, "Job", jobOut)
	notReproduced := b.jobs[0].Annotations["hookbox.dev/not-reproduced"]
	t.Logf("hookbox.dev/not-reproduced: %s", notReproduced)

	if bytes.Contains(local, []byte(secret)) || bytes.Contains(jobOut, []byte(secret)) {
		t.Error("a secret value is in the engine's output")
	}
	la, ja := aspects(localReport, localForks), aspects(jobReport, jobForks)
	var keys []string
	for k := range la {
		keys = append(keys, k)
	}
	for k := range ja {
		if _, ok := la[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "aspect\thookbox run\tJob\t")
	var unlisted []string
	for _, k := range keys {
		lv, jv := orMissing(la[k]), orMissing(ja[k])
		verdict := "same"
		if k == "env names" {
			lv, jv, verdict = envDiff(localReport.Env, jobReport.Env)
		}
		if lv != jv || verdict != "same" {
			note := expectedDifference(k, podAddr)
			switch {
			case note == "":
				verdict = "UNLISTED"
				unlisted = append(unlisted, k)
			case !strings.Contains(notReproduced, note):
				verdict = "UNLISTED (annotation lacks " + note + ")"
				unlisted = append(unlisted, k)
			default:
				verdict = "listed: " + note
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k, lv, jv, verdict)
	}
	tw.Flush()
	t.Logf("parity of hookbox run and the Job:\n%s", table.String())
	if len(unlisted) > 0 {
		t.Errorf("differences the Job's hookbox.dev/not-reproduced does not list: %v", unlisted)
	}
}

func orMissing(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// envDiff shows environment names as what both have and what only one
// side has; verdict is "same" only when the sets are equal.
func envDiff(local, job []string) (lv, jv, verdict string) {
	var common, onlyLocal, onlyJob []string
	for _, n := range local {
		if slices.Contains(job, n) {
			common = append(common, n)
		} else {
			onlyLocal = append(onlyLocal, n)
		}
	}
	for _, n := range job {
		if !slices.Contains(local, n) {
			onlyJob = append(onlyJob, n)
		}
	}
	both := strings.Join(common, " ")
	lv, jv = both, both
	if len(onlyLocal) > 0 {
		lv += " +" + strings.Join(onlyLocal, " +")
	}
	if len(onlyJob) > 0 {
		jv += " +" + strings.Join(onlyJob, " +")
	}
	verdict = "same"
	if len(onlyLocal)+len(onlyJob) > 0 {
		verdict = "differs"
	}
	return lv, jv, verdict
}
