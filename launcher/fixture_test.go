package launcher

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"hookbox.dev/hookbox/ebpf"
	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/mounts"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/verify"
)

// A recorded run built by hand, as the launcher writes one: render.json,
// identities.json, trace.jsonl (events and the stats line), an artifact and
// result.json with the verdict the record gives.

const (
	fixtureEngine = "/usr/bin/engine"
	fixtureGit    = "/usr/bin/git"
)

func fixtureRender(allow ...string) *render.Render {
	r := &render.Render{
		SchemaVersion: 1,
		Spawn:         "fixture",
		Init:          &render.Exec{Path: render.InitPath, Argv: []string{render.InitPath, "--", fixtureEngine, "go"}},
		Engine:        render.Engine{Kind: "exec", Exec: render.Exec{Path: fixtureEngine, Argv: []string{fixtureEngine, "go"}}},
		Programs: []render.Program{
			{Path: fixtureEngine, HostPath: fixtureEngine, Roles: []string{render.RoleEngine}},
			{Path: fixtureGit, HostPath: fixtureGit, Roles: []string{render.RoleTool}},
		},
		Mounts:    []render.Mount{},
		Trace:     render.TracePolicy{Mode: render.TraceVerify, Allow: allow},
		Artifacts: []string{"answer.txt"},
		Runfiles: []render.Runfile{
			{Path: fixtureEngine, Type: render.RunfileFile, Mode: 0o755, Size: 4, SHA256: "88d4266fd4e6338d13b845fcf289579d209c897823b9217da3e161936f031589"},
		},
	}
	r.SortLists()
	return r
}

var fixtureIDs = verify.FileIdentities{
	render.InitPath: {Dev: 50, Ino: 100},
	fixtureEngine:   {Dev: 50, Ino: 101},
	fixtureGit:      {Dev: 50, Ino: 102},
}

func fixtureExec(pid, ppid uint32, path string, argv ...string) ebpf.Event {
	ev := ebpf.Event{Kind: ebpf.KindExec, TGID: pid, TID: pid, PPID: ppid, Time: uint64(pid) * 1000,
		Filename: path, Dev: fixtureIDs[path].Dev, Ino: fixtureIDs[path].Ino}
	for _, a := range argv {
		ev.Argv = append(ev.Argv, []byte(a))
	}
	return ev
}

// fixtureEvents are the init, the engine and, with git, an exec of git
// that the render's allow list may or may not cover.
func fixtureEvents(git bool) []ebpf.Event {
	evs := []ebpf.Event{
		fixtureExec(10, 1, render.InitPath, render.InitPath, "--", fixtureEngine, "go"),
		fixtureExec(11, 10, fixtureEngine, fixtureEngine, "go"),
	}
	if git {
		evs = append(evs, fixtureExec(12, 11, fixtureGit, "git", "status"))
	}
	return evs
}

// traceRecord is trace.jsonl for events, with a stats line that accounts
// for them.
func traceRecord(t testing.TB, events []ebpf.Event) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, ev := range events {
		line, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	n := uint64(len(events))
	stats := ebpf.Stats{Counters: ebpf.Counters{Matched: n}, Delivered: n}
	line, _ := json.Marshal(map[string]any{"kind": "stats", "stats": stats, "incomplete": stats.Incomplete()})
	b.Write(append(line, '\n'))
	return b.Bytes()
}

// writeFixtureRecord writes a finished run's record into a new directory:
// git runs, and allow says whether the render allows it (confirmed) or
// not (mismatch: unexpected-exec).
func writeFixtureRecord(t *testing.T, allowGit bool) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "hbx-fixture")
	var allow []string
	if allowGit {
		allow = []string{fixtureGit}
	}
	r := fixtureRender(allow...)
	digest, canonical, err := r.Digest()
	if err != nil {
		t.Fatal(err)
	}
	write := func(rel string, data []byte) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(RenderFile, append(canonical, '\n'))
	ids, _ := json.Marshal(fixtureIDs)
	write(IdentitiesFile, ids)
	write(TraceFile, traceRecord(t, fixtureEvents(true)))
	write(StdoutFile, []byte("done\n"))
	write(ArtifactDir+"/out/answer.txt", []byte("42\n"))
	v, err := reverify(dir, r, &Result{})
	if err != nil {
		t.Fatal(err)
	}
	code := 0
	res := &Result{
		SchemaVersion: ResultSchemaVersion, RunID: "hbx-fixture", Spawn: r.Spawn, RenderDigest: digest,
		Status: StatusCompleted, ExitCode: &code, RecordDir: dir,
		StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), EndedAt: time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC),
		Artifacts: []mounts.ArtifactMatch{{Declared: "answer.txt", Status: mounts.ArtifactFound, Path: "out/answer.txt"}},
		Trace:     verifyResult(v),
	}
	res.Trace.Mode = r.Trace.Mode
	res.Trace.Events = 3
	if err := writeJSON(filepath.Join(dir, ResultFile), res, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// readFixtureResult reads a record's result.json.
func readFixtureResult(t *testing.T, dir string) *Result {
	t.Helper()
	var res Result
	if err := readJSON(filepath.Join(dir, ResultFile), &res); err != nil {
		t.Fatal(err)
	}
	return &res
}

// rewriteFile replaces a record file's content with edit's.
func rewriteFile(t *testing.T, path string, edit func([]byte) []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := host.WriteFileAtomic(path, edit(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
