package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"

	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/launcher/daemon"
	"hookbox.dev/hookbox/mounts"
	"hookbox.dev/hookbox/render"
)

// TestSecretSentinelOnlyInContainerEnv: a secret's value reaches the
// engine's environment and no file on the host (docs/contracts.md §3.5).
// While the container exists and after the run, no file of containerd's
// root (its bolt database, which keeps freed pages, included) or state
// directory, of the run's bundle, of hookbox's state dir or of the run
// record holds the value; inside, the engine sees it, with the
// environment the render plans in the render's order.
func TestSecretSentinelOnlyInContainerEnv(t *testing.T) {
	e := newEnv(t)
	// Random per run: containerd's database keeps freed pages, so a fixed
	// value could be found there from an earlier run of this test.
	sentinel := "hbx-sentinel-" + hex.EncodeToString(randomBytes(t, 12))
	e.extraEnv = append(e.extraEnv, "HBX_TOKEN="+sentinel, "HOOKBOX_CONFIG=/nonexistent/config.yaml")
	// The engine prints the hash of what it got, whether its stdin is a
	// device (/dev/null, not the channel the init read), then waits for
	// the test to look around.
	script := `sum=$(printf %s "$HBX_TOKEN" | /usr/bin/sha256sum); echo "token ${sum%% *}"; ` +
		`if [ -c /dev/stdin ]; then echo stdin-device; fi; echo ready; ` +
		`while [ ! -e /run/hookbox/go ]; do /usr/bin/sleep 0.05; done`
	args, _ := json.Marshal([]string{"-c", script})
	spec := e.execSpec("secret", "/bin/sh", string(args),
		"  tools: [/usr/bin/sha256sum, /usr/bin/sleep]", "  env: {set: {MODE: ci}}", "  secrets: [HBX_TOKEN]", "  limits: {timeout: 2m}")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd, runID, events := e.startUntil(ctx, spec, "ready")
	defer cmd.Process.Kill()
	record := filepath.Join(launcher.RunsDir(e.state), runID)
	d := daemonFiles{root: metadataRoot(t, ctx)}
	d.findBundle(t, record)
	d.assertNoSecret(t, "while the container exists", sentinel, e.state, record)
	checkEngineEnv(t, record, sentinel)

	if err := os.WriteFile(filepath.Join(mounts.RunHostPaths(record).RunDir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var res *launcher.Result
	for events.Scan() {
		var ev launcher.Event
		if err := json.Unmarshal(events.Bytes(), &ev); err != nil {
			t.Fatalf("--json printed a non-event line %q: %v", events.Text(), err)
		}
		if strings.Contains(events.Text(), sentinel) {
			t.Errorf("the secret is in hookbox's output: an event of type %s", ev.Type)
		}
		if ev.Type == launcher.EventResult {
			res = ev.Result
		}
	}
	cmd.Wait()
	if res == nil || res.Status != launcher.StatusCompleted {
		t.Fatalf("result %+v\nstderr.log:\n%s", res, contents(filepath.Join(record, launcher.StderrFile)))
	}
	// The verdict judges argv, and the init's is the render's as before.
	if res.Trace.Status != "confirmed" {
		t.Errorf("trace %+v, want confirmed", res.Trace)
	}
	output := contents(filepath.Join(record, launcher.StdoutFile))
	sum := sha256.Sum256([]byte(sentinel))
	if !strings.Contains(output, "token "+hex.EncodeToString(sum[:])) {
		t.Errorf("the engine did not get the secret (its hash is printed):\n%s", output)
	}
	if !strings.Contains(output, "stdin-device") {
		t.Errorf("the engine's stdin is not a device (/dev/null):\n%s", output)
	}
	if _, err := os.Stat(d.bundle); !os.IsNotExist(err) {
		t.Errorf("the bundle outlived the run: %v", err)
	}
	d.bundle = ""
	d.assertNoSecret(t, "after the run", sentinel, e.state)
	e.assertNothingLeft(runID)

	// A missing secret fails before anything is created, without a value.
	e.extraEnv = []string{"HOOKBOX_KEY_DIR=" + e.keyDir, "HOOKBOX_CONFIG=/nonexistent/config.yaml"}
	missing := e.run(spec)
	if missing.code != 120 || !strings.Contains(missing.stderr, "HBX_TOKEN") {
		t.Errorf("missing secret: exit %d, stderr %s", missing.code, missing.stderr)
	}
}

// TestRootlessSecretReachesTheEngine: under the rootless backend (its
// managed containerd under RootlessKit, stdio FIFOs in its own directory)
// the secret reaches the engine through hookbox-init's stdin as well, and
// while the container exists and after the run no file of the daemon's
// root (in the user's hookbox state), its state (in RootlessKit's mount
// namespace) or the user's runtime directory holds it.
func TestRootlessSecretReachesTheEngine(t *testing.T) {
	e := newRootlessEnv(t)
	sentinel := "hbx-sentinel-" + hex.EncodeToString(randomBytes(t, 12))
	e.extraEnv = append(e.extraEnv, "HBX_TOKEN="+sentinel, "HOOKBOX_CONFIG=/nonexistent/config.yaml")
	// The scripted engine cannot wait for the test: it sleeps long enough
	// for the file walk (5 s was not, once, on a loaded CI host: 10 s),
	// and the test checks that the run is still going after.
	spec := e.spec("rootless-secret", "- envHash: HBX_TOKEN\n- print: ready\n- sleep: 20s\n- exit: 0", "  secrets: [HBX_TOKEN]", "  limits: {timeout: 1m}")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd, runID, events := e.startUntil(ctx, spec, "ready")
	defer cmd.Process.Kill()
	record := filepath.Join(launcher.RunsDir(e.state), runID)
	xdg := os.Getenv("XDG_RUNTIME_DIR")
	m := daemon.RootlessPaths(e.state, filepath.Join(xdg, "hookbox"))
	child, err := m.ChildPID()
	if err != nil {
		t.Fatalf("the run's daemon is not the managed rootless one this test knows: %v", err)
	}
	d := daemonFiles{ns: "/proc/" + strconv.Itoa(child) + "/root", root: m.Root}
	d.findBundle(t, record)
	d.assertNoSecret(t, "while the container exists", sentinel, e.state, xdg)
	if _, err := os.Stat(filepath.Join(record, launcher.ResultFile)); err == nil {
		t.Fatal("test setup: the run ended before the files were read")
	}
	for events.Scan() {
	}
	cmd.Wait()
	var res launcher.Result
	if data, err := os.ReadFile(filepath.Join(record, launcher.ResultFile)); err != nil || json.Unmarshal(data, &res) != nil || res.Status != launcher.StatusCompleted {
		t.Fatalf("result %+v (%v)\nstderr.log:\n%s", res, err, contents(filepath.Join(record, launcher.StderrFile)))
	}
	sum := sha256.Sum256([]byte(sentinel))
	if stdout := contents(filepath.Join(record, launcher.StdoutFile)); !strings.Contains(stdout, hex.EncodeToString(sum[:])) {
		t.Errorf("the engine did not get the secret (its hash is printed):\n%s", stdout)
	}
	d.bundle = ""
	d.assertNoSecret(t, "after the run", sentinel, e.state, xdg)
}

// contents is the text of a file, "" when it cannot be read (a process
// that has exited).
func contents(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// daemonFiles are the directories where a containerd keeps what it knows
// of a run: its root (content, snapshots, the bolt database), its state
// directory and the run's bundle in it. root is a path in the daemon's
// mount namespace, which ns (the /proc/PID/root of a process in it, ""
// for this process's) makes readable here: a rootless daemon's state is
// in RootlessKit's copy of /run. state and bundle are readable as they are.
type daemonFiles struct{ ns, root, state, bundle string }

// metadataRoot is the root of the daemon at containerdAddress(): the bolt
// plugin exports its database's path, <root>/io.containerd.metadata.v1.bolt/meta.db.
func metadataRoot(t *testing.T, ctx context.Context) string {
	t.Helper()
	client, err := containerd.New(containerdAddress())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	plugins, err := client.IntrospectionService().Plugins(ctx, "type==io.containerd.metadata.v1")
	if err != nil || len(plugins.Plugins) == 0 {
		t.Fatalf("containerd's metadata plugin: %v", err)
	}
	db := plugins.Plugins[0].Exports["path"]
	if db == "" {
		t.Fatalf("the metadata plugin exports no path: %v", plugins.Plugins[0].Exports)
	}
	return filepath.Dir(filepath.Dir(db))
}

// findBundle sets the state directory and the run's bundle from the run's
// shim, which runs in the bundle,
// <state>/io.containerd.runtime.v2.task/<namespace>/<id>.
func (d *daemonFiles) findBundle(t *testing.T, record string) {
	t.Helper()
	var spawned launcher.Spawned
	data, err := os.ReadFile(filepath.Join(record, launcher.SpawnedFile))
	if err != nil || json.Unmarshal(data, &spawned) != nil {
		t.Fatalf("spawn record: %v", err)
	}
	st, err := host.ReadStat(spawned.InitPID)
	if err != nil {
		t.Fatal(err)
	}
	shimDir, err := os.Readlink("/proc/" + strconv.Itoa(st.PPID) + "/cwd")
	if err != nil {
		t.Fatalf("the shim's directory: %v", err)
	}
	// The shim runs in the bundle of the task it was started for: the
	// run's, or the shim group's anchor's beside it.
	if b := filepath.Base(shimDir); b != spawned.ContainerID && b != launcher.ShimGroupID {
		t.Fatalf("the init's parent runs in %s, not the bundle of %s or of the shim group's anchor", shimDir, spawned.ContainerID)
	}
	bundle := filepath.Join(filepath.Dir(shimDir), spawned.ContainerID)
	d.bundle = d.ns + bundle
	d.state = d.ns + filepath.Dir(filepath.Dir(filepath.Dir(bundle)))
}

// assertNoSecret checks that no file in the daemon's directories or in
// more holds sentinel. Positive controls first: the database is where it
// is looked for, and the bundle's config.json, while there is one, holds
// the run's environment.
func (d daemonFiles) assertNoSecret(t *testing.T, when, sentinel string, more ...string) {
	t.Helper()
	root := d.ns + d.root
	if _, err := os.Stat(filepath.Join(root, "io.containerd.metadata.v1.bolt", "meta.db")); err != nil {
		t.Fatalf("containerd's database: %v", err)
	}
	if d.bundle != "" {
		if config, err := os.ReadFile(filepath.Join(d.bundle, "config.json")); err != nil || !strings.Contains(string(config), `"HBX_TOKEN=`) {
			t.Fatalf("the bundle's config.json does not hold the run's environment (%v)", err)
		}
	}
	for _, dir := range append([]string{root, d.state, d.bundle}, more...) {
		if dir == "" {
			continue
		}
		if hit := fileContaining(t, dir, []byte(sentinel)); hit != "" {
			t.Errorf("%s, the secret is in %s", when, hit)
		}
	}
}

// checkEngineEnv reads, from the host, the environment of the run's init
// and of the engine (the init's child): the engine's holds exactly the
// render's variables in the render's order, the secret's value included;
// the init's holds no value of it, and the init keeps nothing open on its
// stdin, the channel it read the value from.
func checkEngineEnv(t *testing.T, record, sentinel string) {
	t.Helper()
	var spawned launcher.Spawned
	var r render.Render
	for file, v := range map[string]any{launcher.SpawnedFile: &spawned, launcher.RenderFile: &r} {
		data, err := os.ReadFile(filepath.Join(record, file))
		if err != nil || json.Unmarshal(data, v) != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	init := strconv.Itoa(spawned.InitPID)
	// A child is listed under the thread that forked it.
	var children []string
	threads, _ := filepath.Glob("/proc/" + init + "/task/*/children")
	for _, f := range threads {
		children = append(children, strings.Fields(contents(f))...)
	}
	if len(children) != 1 {
		t.Fatalf("the init has children %v, want the engine alone", children)
	}
	environ, err := os.ReadFile("/proc/" + children[0] + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, kv := range strings.Split(strings.TrimSuffix(string(environ), "\x00"), "\x00") {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	var want []string
	for _, v := range r.Process.Env {
		want = append(want, v.Name)
	}
	if !slices.Equal(names, want) {
		t.Errorf("the engine's environment has %v, want the render's %v in its order", names, want)
	}
	if !strings.Contains(string(environ), "\x00HBX_TOKEN="+sentinel+"\x00") && !strings.HasPrefix(string(environ), "HBX_TOKEN="+sentinel+"\x00") {
		t.Error("the engine's environment lacks the secret's value")
	}
	if strings.Contains(contents("/proc/"+init+"/environ"), sentinel) {
		t.Error("the init's own environment (the spec's) holds the secret's value")
	}
	if target, err := os.Readlink("/proc/" + init + "/fd/0"); err == nil {
		t.Errorf("the init still has its stdin open (%s)", target)
	}
	if target, err := os.Readlink("/proc/" + children[0] + "/fd/0"); err != nil || target != "/dev/null" {
		t.Errorf("the engine's stdin is %q (%v), want /dev/null", target, err)
	}
}
