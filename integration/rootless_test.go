package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"hookbox.dev/hookbox/ebpf"
	"hookbox.dev/hookbox/egress"
	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/launcher/doctor"
	"hookbox.dev/hookbox/notify"
	"hookbox.dev/hookbox/tracehelper"
)

// The rootless pass (make test-rootless) runs these as a non-root user
// started by `hookbox rootless setup --user … -- <test binary>`, so inside
// a delegated cgroup2 subtree; hookbox starts its own rootless containerd
// under rootlesskit. HOOKBOX_TRACER_SOCKET names the tracer helper the
// pass started as root.

func newRootlessEnv(t *testing.T) *env {
	t.Helper()
	testenv.RequireRootless(t)
	buildTools(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil { // the container's uid reads the workspace
		t.Fatal(err)
	}
	// One state dir for the whole pass: the managed rootless containerd
	// hookbox starts keeps its root there, and it outlives a test.
	e := &env{t: t, state: rootlessStateDir(t), specDir: filepath.Join(dir, "spec")}
	if err := os.MkdirAll(filepath.Join(e.specDir, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(e.specDir, "ws", "README.md"), []byte("workspace\n"), 0o644)
	t.Cleanup(func() { exec.Command(hookboxBin, "gc", "--state-dir", e.state).Run() })
	return e
}

func rootlessStateDir(t *testing.T) string {
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(home, ".local", "share", "hookbox-rootless-it")
}

// withoutHelper points hookbox at a socket nothing listens on.
func (e *env) withoutHelper() {
	e.extraEnv = append(e.extraEnv, "HOOKBOX_TRACER_SOCKET=/nonexistent/tracer.sock")
}

func TestRootlessRunWithHelper(t *testing.T) {
	e := newRootlessEnv(t)
	marker := fmt.Sprintf("hbx-rootless-daemon-%d", time.Now().UnixNano())
	spec := e.spec("rootless", `
		- print: {type: system, subtype: init}
		- hook: greet
		- daemonize: {marker: `+marker+`}
		- sleep: 500ms
		- write: {path: /run/hookbox/out/hello.txt, content: "hello rootless\n"}
		- print: {type: result, subtype: success}
		- exit: 0`,
		"  hooks: [{name: greet, event: SessionStart, argv: [/usr/bin/printf, '%s', hook-ran]}]",
		"  artifacts: [hello.txt]",
		"  limits: {timeout: 1m, memory: 256Mi, pids: 64}")
	r := e.run(spec)
	res := r.mustResult(t)
	if r.code != 0 || res.Status != launcher.StatusCompleted {
		t.Fatalf("exit %d, result %+v\nstderr:\n%s", r.code, res, r.stderr)
	}
	got, err := os.ReadFile(filepath.Join(res.RecordDir, launcher.ArtifactDir, "out", "hello.txt"))
	if err != nil || string(got) != "hello rootless\n" {
		t.Errorf("harvested artifact %q %v", got, err)
	}
	if !strings.Contains(r.output(), `"stdout":"hook-ran"`) {
		t.Errorf("the hook did not run:\n%s", r.output())
	}
	if pids := markerProcesses(marker); len(pids) > 0 {
		t.Errorf("the daemonized grandchild survived teardown: %v", pids)
	}
	// Through the helper the trace is complete: confirmed, the engine, the
	// hook and the engine's declared self-execs as the daemon (one or two:
	// the double fork may still be under way when the engine exits).
	rules := map[string]bool{}
	for _, m := range res.Trace.Matched {
		rules[m.Rule] = true
	}
	if res.Trace.Status != "confirmed" || !rules["engine"] || !rules["hook:greet"] || !rules["engine-self-exec:hookbox-scripted-daemon"] {
		t.Errorf("trace %+v, want confirmed: engine, hook, daemon self-exec", res.Trace)
	}
	// The run had a cgroup of its own in the delegated subtree, now gone.
	var spawned launcher.Spawned
	readRecord(t, res.RecordDir, launcher.SpawnedFile, &spawned)
	uid := strconv.Itoa(os.Getuid())
	if !strings.Contains(spawned.CgroupsPath, "/jobs/") || spawned.CgroupID == 0 {
		t.Errorf("spawn record cgroup %q id %d: want a delegated jobs/<run-id> cgroup", spawned.CgroupsPath, spawned.CgroupID)
	}
	if dir := cgroup2Dir(t, spawned.CgroupsPath); spawned.CgroupsPath != "" {
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("run cgroup %s is still there", dir)
		}
	}
	// Limits the host cannot give are reported, not dropped.
	t.Logf("uid %s, cgroup %s, degraded %v", uid, spawned.CgroupsPath, res.Degraded)
	if ctrl := delegatedControllers(t, spawned.CgroupsPath); !strings.Contains(ctrl, "memory") && !contains(res.Degraded, "limit-unavailable:memory") {
		t.Errorf("no memory controller reaches the subtree (%q) but result.json does not say so: %v", ctrl, res.Degraded)
	}
	assertNoRootlessMounts(t, res.RunID)
}

func TestRootlessSandbox(t *testing.T) {
	e := newRootlessEnv(t)
	checkProbeRun(t, e.run(e.probeSpec(filepath.Join(os.Getenv("HOOKBOX_TEST_BIN_DIR"), "probe"))))
}

func TestRootlessWithoutHelper(t *testing.T) {
	e := newRootlessEnv(t)
	e.withoutHelper()
	spec := e.spec("nohelper", "- print: {type: result, subtype: success}\n- exit: 0", "  limits: {timeout: 1m}")
	r := e.run(spec)
	res := r.mustResult(t)
	// The documented exit code: the engine's (0); the verdict says why it
	// is unchecked.
	if r.code != 0 || res.Status != launcher.StatusCompleted {
		t.Fatalf("exit %d, result %+v\nstderr:\n%s", r.code, res, r.stderr)
	}
	if res.Trace.Status != "unchecked" || !contains(res.Trace.Reasons, "tracer-unavailable:rootless") || res.Trace.Detail == "" {
		t.Errorf("trace %+v, want unchecked with tracer-unavailable:rootless and a detail", res.Trace)
	}
	// --require-trace refuses to start an untraceable run: infra, 120.
	r = e.run(spec, "--require-trace")
	if r.code != 120 {
		t.Errorf("--require-trace without the helper: exit %d, want 120\n%s", r.code, r.stderr)
	}
	if r.result != nil && r.result.ExitCode != nil {
		t.Errorf("the engine ran although the trace was required: %+v", r.result)
	}
}

func TestRootlessTimeoutTearsDownDaemons(t *testing.T) {
	e := newRootlessEnv(t)
	marker := fmt.Sprintf("hbx-rootless-timeout-%d", time.Now().UnixNano())
	spec := e.spec("timeout", "- daemonize: {marker: "+marker+"}\n- print: started\n- sleep: 1h", "  limits: {timeout: 3s}")
	r := e.run(spec)
	res := r.mustResult(t)
	if r.code != 121 || res.Status != launcher.StatusTimedOut {
		t.Fatalf("exit %d status %s, want 121 timed_out\n%s", r.code, res.Status, r.stderr)
	}
	if pids := markerProcesses(marker); len(pids) > 0 {
		t.Errorf("daemonized processes survived teardown: %v", pids)
	}
	assertNoRootlessMounts(t, res.RunID)
}

func TestRootlessHelperRefusesForeignCgroup(t *testing.T) {
	testenv.RequireRootless(t)
	c := dialTracerHelper(t)
	// The subtree's parent belongs to root, not to this user.
	foreign := cgroup2Dir(t, "/hookbox-rootless")
	_, err := c.Watch(foreign, ebpf.Policy{})
	var refused *tracehelper.RefusedError
	if !errors.As(err, &refused) || refused.Code != tracehelper.CodeNotOwner {
		t.Fatalf("watch of root's cgroup %s: %v, want refused with %s", foreign, err, tracehelper.CodeNotOwner)
	}
}

// dialTracerHelper connects to the pass's tracer helper the way a rootless
// hookbox does: dialled, then handed on as a file.
func dialTracerHelper(t *testing.T) *tracehelper.Client {
	t.Helper()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: tracehelper.SocketPath(), Net: "unix"})
	if err != nil {
		t.Fatalf("the rootless pass runs a tracer helper: %v", err)
	}
	defer conn.Close()
	f, err := conn.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := tracehelper.FromFile(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRootlessDoctor(t *testing.T) {
	testenv.RequireRootless(t)
	buildTools(t)
	out, err := exec.Command(hookboxBin, "doctor", "--json").Output()
	if err != nil && len(out) == 0 {
		t.Fatalf("doctor: %v", err)
	}
	var rep doctor.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	byName := map[string]doctor.Check{}
	for _, c := range rep.Checks {
		byName[c.Name] = c
		if c.Status != doctor.OK && c.Fix == "" {
			t.Errorf("%s is %s without a fix: %s", c.Name, c.Status, c.Detail)
		}
	}
	for _, name := range []string{doctor.CheckContainerd, doctor.CheckRootlesskit, doctor.CheckUIDMap, doctor.CheckSubIDs, doctor.CheckUserNamespaces, doctor.CheckTracerHelper, doctor.CheckCgroupDelegation} {
		c, ok := byName[name]
		if !ok {
			t.Errorf("doctor as non-root has no %s check", name)
			continue
		}
		if name != doctor.CheckCgroupDelegation && c.Status != doctor.OK {
			t.Errorf("%s: %s %s", name, c.Status, c.Detail)
		}
		t.Logf("%-18s %-4s %s", name, c.Status, c.Detail)
	}
	if d := byName[doctor.CheckCgroupDelegation]; !strings.Contains(d.Detail, "their own cgroup") {
		t.Errorf("delegation: %+v, want runs in their own cgroup", d)
	}
	if caps := rep.Capabilities; !caps.Rootless || !caps.Tmpfs || !caps.NetworkIsolation || !caps.CanTrace {
		t.Errorf("capabilities %+v: rootless, tmpfs, network isolation and (through the helper) tracing work here", caps)
	}
	// Without the helper, doctor says what that costs and how to fix it.
	cmd := exec.Command(hookboxBin, "doctor", "--json")
	cmd.Env = append(os.Environ(), "HOOKBOX_TRACER_SOCKET=/nonexistent/tracer.sock")
	out, _ = cmd.Output()
	rep = doctor.Report{}
	json.Unmarshal(out, &rep)
	for _, c := range rep.Checks {
		if c.Name == doctor.CheckTracerHelper && (c.Status != doctor.Warn || !strings.Contains(c.Detail, "tracer-unavailable:rootless") || c.Fix == "") {
			t.Errorf("without the helper: %+v", c)
		}
	}
	if rep.Capabilities.CanTrace {
		t.Error("without the helper, doctor must not claim tracing")
	}
}

func readRecord(t *testing.T, dir, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// cgroup2Dir is the cgroup2 directory of a cgroup path on this host.
func cgroup2Dir(t *testing.T, p string) string {
	t.Helper()
	for _, base := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(base, "cgroup.controllers")); err == nil {
			return filepath.Join(base, p)
		}
	}
	t.Fatal("no cgroup2 hierarchy")
	return ""
}

// delegatedControllers are the controllers offered to a run's cgroup's
// parent (jobs).
func delegatedControllers(t *testing.T, runCgroup string) string {
	b, _ := os.ReadFile(filepath.Join(cgroup2Dir(t, filepath.Dir(runCgroup)), "cgroup.controllers"))
	return string(b)
}

// assertNoRootlessMounts: the run's tmpfs is gone from RootlessKit's mount
// namespace, where hookbox mounted it.
func assertNoRootlessMounts(t *testing.T, runID string) {
	t.Helper()
	pidFile, _ := filepath.Glob(filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "hookbox", "containerd", "rootlesskit", "child_pid"))
	if len(pidFile) == 0 {
		t.Fatal("no RootlessKit child_pid: the managed rootless containerd is not running")
	}
	pid, _ := os.ReadFile(pidFile[0])
	info, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(pid)), "mountinfo"))
	if err != nil {
		t.Fatalf("mountinfo of RootlessKit's child: %v", err)
	}
	if strings.Contains(string(info), runID) {
		t.Errorf("a mount of run %s is still in RootlessKit's mount namespace", runID)
	}
}

func TestRootlessEnforceThroughHelper(t *testing.T) {
	e := newRootlessEnv(t)
	marker := "/run/hookbox/out/should-not-exist"
	spec := e.spec("enforce", "- exec: [/usr/bin/touch, "+marker+"]\n- print: after\n- exit: 0",
		"  tools: [/usr/bin/touch]", "  trace: {mode: enforce, allow: []}")
	r := e.run(spec)
	res := r.mustResult(t)
	reason := "killed-exec"
	if lsmDenied(res) { // the helper's tracer has its BPF LSM programs
		reason = "denied-exec"
	}
	if res.Trace.Status != "mismatch" || !hasReason(res, reason) || r.code != 124 {
		t.Fatalf("enforce through the helper: exit %d, want %s: %+v\n%s", r.code, reason, res.Trace, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(res.RecordDir, launcher.ArtifactDir, "out", "should-not-exist")); err == nil {
		t.Fatal("the stopped program ran: its marker file exists")
	}
}

func TestRootlessCtrlCThenKill9ThenGC(t *testing.T) {
	e := newRootlessEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Ctrl-C: the re-executed hookbox gets the signal itself (nsenter
	// execs it in place) and tears down.
	marker := fmt.Sprintf("hbx-rootless-ctrlc-%d", time.Now().UnixNano())
	spec := e.spec("ctrlc", "- daemonize: {marker: "+marker+"}\n- sleep: 300ms\n- print: ready\n- sleep: 1h")
	cmd, runID, sc := e.startUntil(ctx, spec, "ready", "--grace", "2s")
	cmd.Process.Signal(syscall.SIGINT)
	for sc.Scan() {
	}
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 122 {
		t.Errorf("Ctrl-C: %v, want exit 122", err)
	}
	if pids := markerProcesses(marker); len(pids) > 0 {
		t.Errorf("processes survived Ctrl-C: %v", pids)
	}
	assertNoRootlessMounts(t, runID)

	// kill -9: what the run left (container, tmpfs in RootlessKit's mount
	// namespace, run cgroup, the daemon) is gc's, run as the user.
	marker = fmt.Sprintf("hbx-rootless-kill9-%d", time.Now().UnixNano())
	spec = e.spec("kill9", "- daemonize: {marker: "+marker+"}\n- sleep: 300ms\n- print: ready\n- sleep: 1h")
	cmd, runID, _ = e.startUntil(ctx, spec, "ready")
	cmd.Process.Kill()
	cmd.Wait()
	for deadline := time.Now().Add(10 * time.Second); len(markerProcesses(marker)) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("test setup: the daemon should still run after hookbox was killed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, err := exec.Command(hookboxBin, "gc", "--state-dir", e.state).CombinedOutput()
	if err != nil || !strings.Contains(string(out), runID) {
		t.Fatalf("gc: %v, did not report the abandoned run:\n%s", err, out)
	}
	if pids := markerProcesses(marker); len(pids) > 0 {
		t.Errorf("gc left processes: %v", pids)
	}
	assertNoRootlessMounts(t, runID)
	var spawned launcher.Spawned
	readRecord(t, filepath.Join(e.state, "runs", runID), launcher.SpawnedFile, &spawned)
	if _, err := os.Stat(cgroup2Dir(t, spawned.CgroupsPath)); spawned.CgroupsPath == "" || err == nil {
		t.Errorf("run cgroup %q is still there after gc", spawned.CgroupsPath)
	}
	again, _ := exec.Command(hookboxBin, "gc", "--state-dir", e.state).CombinedOutput()
	if !strings.Contains(string(again), "nothing to collect") {
		t.Errorf("a second gc must do nothing:\n%s", again)
	}
}

// TestRootlessUndelegated runs outside any delegated cgroup subtree (the
// rootless pass's second phase starts it with plain runuser): the run has no
// cgroup of its own, says so, and teardown still ends a daemonized
// grandchild through the container's pid namespace.
func TestRootlessUndelegated(t *testing.T) {
	testenv.RequireRootlessUndelegated(t)
	e := newRootlessEnv(t)
	marker := fmt.Sprintf("hbx-rootless-undelegated-%d", time.Now().UnixNano())
	spec := e.spec("undelegated", "- daemonize: {marker: "+marker+"}\n- sleep: 300ms\n- print: started\n- exit: 0",
		"  limits: {timeout: 1m, memory: 128Mi}")
	r := e.run(spec)
	res := r.mustResult(t)
	if r.code != 0 || res.Status != launcher.StatusCompleted {
		t.Fatalf("exit %d, result %+v\nstderr:\n%s", r.code, res, r.stderr)
	}
	if !contains(res.Degraded, launcher.ReasonNoRunCgroup) || !contains(res.Degraded, "limit-unavailable:memory") {
		t.Errorf("degraded %v, want run-cgroup-unavailable and limit-unavailable:memory", res.Degraded)
	}
	if res.Trace.Status != "unchecked" {
		t.Errorf("a run without a cgroup cannot be traced: %+v", res.Trace)
	}
	if pids := markerProcesses(marker); len(pids) > 0 {
		t.Errorf("the daemonized grandchild survived teardown: %v", pids)
	}
	// Host-side helpers get no cgroup either: they run in their process
	// group, and the result and the notify outcome say so.
	r = e.run(spec, "--notify", `["/bin/true"]`)
	res = r.mustResult(t)
	onDisk := readResultFile(t, res)
	if !contains(onDisk.Degraded, notify.DegradedUncontained) || onDisk.Notify == nil ||
		onDisk.Notify.Status != notify.StatusDelivered || !contains(onDisk.Notify.Degraded, notify.DegradedUncontained) {
		t.Errorf("degraded %v, notify %+v: want %s in both", onDisk.Degraded, onDisk.Notify, notify.DegradedUncontained)
	}
	assertNoRootlessMounts(t, res.RunID)
}

// TestRootlessHelpersContained: in a delegated subtree, the notifier and
// the secret lookup get a cgroup of their own (<jobs>/helpers/…): the
// daemon each leaves (setsid, double fork, SIGTERM ignored) ends with it.
func TestRootlessHelpersContained(t *testing.T) {
	e := newRootlessEnv(t)
	const sentinel = "hbx-sentinel-rootless-lookup-51a0"
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	daemon := testenv.DaemonScript(t, dir)
	notifyMarker := fmt.Sprintf("hbx-rootless-notify-daemon-%d", time.Now().UnixNano())
	lookupMarker := fmt.Sprintf("hbx-rootless-lookup-daemon-%d", time.Now().UnixNano())
	notifier := helperScript(t, dir, "notifier", 1, endExit, "")
	lookup := helperScript(t, dir, "lookup", 2, endExit, sentinel)
	lookupArgv, _ := json.Marshal([]string{lookup, "{name}", daemon, lookupMarker, filepath.Join(dir, "lookup.pid")})
	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte("secrets:\n  lookup:\n    argv: "+string(lookupArgv)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.extraEnv = append(e.extraEnv, "HOOKBOX_CONFIG="+config)
	spec := e.spec("rootless-helpers", "- envHash: HBX_LOOKED_UP\n- exit: 0", "  secrets: [HBX_LOOKED_UP]", "  limits: {timeout: 1m}")
	notifyArgv, _ := json.Marshal([]string{notifier, daemon, notifyMarker, filepath.Join(dir, "notify.pid")})
	r := e.run(spec, "--notify", string(notifyArgv))
	res := r.mustResult(t)
	if r.code != 0 || res.Status != launcher.StatusCompleted {
		t.Fatalf("exit %d, result %+v\nstderr:\n%s", r.code, res, r.stderr)
	}
	sum := sha256.Sum256([]byte(sentinel))
	if !strings.Contains(r.output(), hex.EncodeToString(sum[:])) {
		t.Errorf("the container did not get the looked-up value:\n%s", r.output())
	}
	for what, marker := range map[string]string{"notifier": notifyMarker, "lookup": lookupMarker} {
		if pids := survivors(marker); len(pids) > 0 {
			t.Errorf("the %s's daemon survived: %v", what, pids)
		}
	}
	onDisk := readResultFile(t, res)
	if contains(onDisk.Degraded, notify.DegradedUncontained) || contains(onDisk.Degraded, "helper-cgroup-unavailable:lookup") ||
		onDisk.Notify == nil || onDisk.Notify.Status != notify.StatusDelivered || len(onDisk.Notify.Degraded) > 0 {
		t.Errorf("degraded %v, notify %+v: the helpers had their cgroups", onDisk.Degraded, onDisk.Notify)
	}
	var spawned launcher.Spawned
	readRecord(t, res.RecordDir, launcher.SpawnedFile, &spawned)
	helpers := cgroup2Dir(t, filepath.Join(filepath.Dir(spawned.CgroupsPath), "helpers"))
	entries, err := os.ReadDir(helpers)
	if err != nil {
		t.Errorf("no helper cgroups parent %s: %v", helpers, err)
	}
	for _, en := range entries {
		if strings.HasPrefix(en.Name(), res.RunID+".") {
			t.Errorf("helper cgroup %s/%s is still there", helpers, en.Name())
		}
	}
	assertNoRootlessMounts(t, res.RunID)
}

// TestRootlessExistingContainerd: a rootless containerd the user already
// runs the way nerdctl's containerd-rootless.sh does ($XDG_RUNTIME_DIR/
// containerd/containerd.sock, RootlessKit state in $XDG_RUNTIME_DIR/
// containerd-rootless) is found and used; so is one named by --address with
// $ROOTLESSKIT_STATE_DIR.
func TestRootlessExistingContainerd(t *testing.T) {
	e := newRootlessEnv(t)
	xdg := os.Getenv("XDG_RUNTIME_DIR")
	sock := filepath.Join(xdg, "containerd", "containerd.sock")
	kitDir := filepath.Join(xdg, "containerd-rootless")
	root := filepath.Join(rootlessStateDir(t), "nerdctl-style")
	os.MkdirAll(filepath.Dir(sock), 0o700)
	config := filepath.Join(root, "config.toml")
	os.MkdirAll(root, 0o700)
	os.WriteFile(config, []byte(fmt.Sprintf("version = 2\nroot = %q\nstate = %q\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n",
		filepath.Join(root, "root"), filepath.Join(xdg, "containerd", "state"), sock, sock+".ttrpc")), 0o600)
	os.RemoveAll(kitDir)
	kit := exec.Command("rootlesskit", "--net=host", "--copy-up=/etc", "--copy-up=/run", "--state-dir="+kitDir,
		"/bin/sh", "-c", `rm -f /run/containerd /run/runc && exec containerd --config "$0"`, config)
	log, _ := os.Create(filepath.Join(root, "log"))
	kit.Stdout, kit.Stderr = log, log
	if err := kit.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kit.Process.Signal(syscall.SIGTERM)
		kit.Wait()
		os.Remove(sock)
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(kitDir, "child_pid")); err == nil {
			if out, err := exec.Command("ctr", "--address", sock, "version").CombinedOutput(); err == nil {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("the nerdctl-style rootless containerd did not answer: %v %s", err, out)
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("RootlessKit wrote no child_pid")
		}
	}
	spec := e.spec("existing", "- print: {type: result, subtype: success}\n- exit: 0", "  limits: {timeout: 1m}")
	check := func(name string, r *run) {
		t.Helper()
		res := r.mustResult(t)
		if r.code != 0 || res.Status != launcher.StatusCompleted {
			t.Fatalf("%s: exit %d, result %+v\nstderr:\n%s", name, r.code, res, r.stderr)
		}
		var intent launcher.Intent
		readRecord(t, res.RecordDir, launcher.IntentFile, &intent)
		if intent.Address != sock {
			t.Errorf("%s: the run used containerd at %q, want %s", name, intent.Address, sock)
		}
	}
	check("found at $XDG_RUNTIME_DIR/containerd", e.run(spec))
	e.extraEnv = append(e.extraEnv, "ROOTLESSKIT_STATE_DIR="+kitDir)
	check("named by --address", e.run(spec, "--address", sock))
}

// TestRootlessConcurrentRuns: runs of one user share the rootless
// containerd, the delegated subtree and the helper (one connection and one
// watch each); every one is confirmed with its own events.
func TestRootlessConcurrentRuns(t *testing.T) {
	e := newRootlessEnv(t)
	spec := e.spec("many", "- hook: h\n- write: {path: /run/hookbox/out/id.txt, content: x}\n- sleep: 300ms\n- exit: 0",
		"  hooks: [{name: h, event: SessionStart, argv: [/usr/bin/true]}]", "  artifacts: [id.txt]")
	results := make([]*run, 8)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e.run(spec)
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.result == nil || r.result.Status != launcher.StatusCompleted {
			t.Errorf("run %d: exit %d %+v\n%s", i, r.code, r.result, r.stderr)
			continue
		}
		if tr := r.result.Trace; tr.Status != "confirmed" || tr.Events != 3 {
			t.Errorf("run %d: trace %+v, want confirmed with its own 3 execs (init, engine, hook)", i, tr)
		}
		assertNoRootlessMounts(t, r.result.RunID)
	}
}

// TestRootlessImageBuild: the base image goes into the user's rootless
// containerd.
func TestRootlessImageBuild(t *testing.T) {
	testenv.RequireRootless(t)
	buildTools(t)
	out, err := exec.Command(hookboxBin, "image", "build").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "imported into containerd namespace hookbox") {
		t.Fatalf("image build as the user: %v\n%s", err, out)
	}
}

// TestRootlessEgress: a rootless run gets the same egress proxy: hookbox,
// inside RootlessKit's namespaces, opens the listener in the container's
// network namespace. A request for a name that is not allowed is refused
// before anything is resolved, and recorded.
func TestRootlessEgress(t *testing.T) {
	e := newRootlessEnv(t)
	spec := writeEgressExec(t, e, []string{"/usr/bin/curl", "-fsS", "-m", "5", "https://example.com/"}, "api.anthropic.com:443")
	r := e.run(spec)
	res := r.mustResult(t)
	if res.Status == launcher.StatusInfraError {
		t.Fatalf("infra error: %s\n%s", res.Error, r.stderr)
	}
	if res.ExitCode == nil || *res.ExitCode == 0 {
		t.Errorf("curl should fail through the proxy's refusal, exit %v\n%s", res.ExitCode, r.output())
	}
	attempts := readNetwork(t, res)
	if len(attempts) != 1 || attempts[0].Host != "example.com" || attempts[0].Reason != egress.ReasonNotAllowed || attempts[0].Resolved != "" {
		t.Errorf("want one refused, never resolved attempt for example.com:443, got %+v", attempts)
	}
	if res.Network == nil || res.Network.Mode != "allowlist" || res.Network.Refused != 1 {
		t.Errorf("network section %+v", res.Network)
	}
}
