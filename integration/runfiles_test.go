package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"hookbox.dev/hookbox/launcher"
)

// TestRunfilesStoreTamper edits a store object of a real run's store in
// place, as stealthily as user space can (same size, mode restored, mtime
// set back to the seal): the next run's quick check finds it and replaces
// it before the container exists. With the object's seal forged as well,
// the quick check is fooled (shown by `render --runfiles`, which assembles
// without running anything), and `run --verify-runfiles` is not.
func TestRunfilesStoreTamper(t *testing.T) {
	e := newEnv(t)
	spec := e.spec("tamper", `
		- hook: greet
		- exit: 0`,
		"  hooks: [{name: greet, event: SessionStart, argv: [/usr/bin/printf, '%s', hook-ran]}]")
	engine, err := filepath.EvalSymlinks(engineBin)
	if err != nil {
		t.Fatal(err)
	}
	sha := fileSHA256(t, engine)
	obj := filepath.Join(e.state, "runfiles", "sha256", sha)

	first := e.completedRun(spec)
	if rf := first.Runfiles; rf == nil || rf.Verify != launcher.RunfilesVerifyQuick || len(rf.Repaired) != 0 || rf.Files == 0 {
		t.Fatalf("first run's runfiles: %+v", rf)
	}
	if got := fileSHA256(t, obj); got != sha {
		t.Fatalf("the engine's store object %s holds %s, want %s", obj, got, sha)
	}

	tamperInPlace(t, obj)
	second := e.completedRun(spec)
	rf := second.Runfiles
	if rf == nil || len(rf.Repaired) != 1 || rf.Repaired[0].Object != obj || rf.Repaired[0].Path != engine ||
		!strings.HasPrefix(rf.Repaired[0].Reason, "content hashes to ") {
		t.Fatalf("the quick check missed an object edited in place: %+v", rf)
	}
	// Only the tampered object was read: the first run sealed the others
	// again after linking them into its tree.
	if rf.Rehashed != 1 {
		t.Errorf("%d objects re-hashed, want the tampered one only", rf.Rehashed)
	}
	if got := fileSHA256(t, obj); got != sha {
		t.Errorf("the object was not replaced: %s", got)
	}
	if first.Trace.Status == "confirmed" && second.Trace.Status != "confirmed" {
		t.Errorf("trace after the repair: %+v", second.Trace)
	}

	tamperInPlace(t, obj)
	if n := forgeSeals(t, e.state, sha, obj); n == 0 {
		t.Fatal("no stat-cache entry names the engine's object: the store's layout changed")
	}
	if out, err := e.command(t.Context(), "render", "--state-dir", e.state, "--runfiles", spec).CombinedOutput(); err != nil {
		t.Fatalf("render --runfiles: %v\n%s", err, out)
	}
	if fileSHA256(t, obj) == sha {
		t.Fatal("the quick check saw through the forged seal: this test no longer forges it as well as it could")
	}
	third := e.completedRun(spec, "--verify-runfiles")
	rf = third.Runfiles
	if rf == nil || rf.Verify != launcher.RunfilesVerifyFull || rf.Rehashed != rf.Files || len(rf.Repaired) != 1 ||
		rf.Repaired[0].Object != obj || !strings.Contains(rf.Repaired[0].Reason, "seal matches") {
		t.Fatalf("--verify-runfiles missed a tamper under a forged seal: %+v", rf)
	}
	if got := fileSHA256(t, obj); got != sha {
		t.Errorf("the object was not replaced: %s", got)
	}
	e.assertNothingLeft(third.RunID)
}

// completedRun runs spec and fails the test unless it completed.
func (e *env) completedRun(spec string, args ...string) *launcher.Result {
	e.t.Helper()
	r := e.run(spec, args...)
	res := r.mustResult(e.t)
	if r.code != 0 || res.Status != launcher.StatusCompleted {
		e.t.Fatalf("exit %d, result %+v\nstderr:\n%s", r.code, res, r.stderr)
	}
	return res
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// tamperInPlace flips the last byte of the file at path where it is
// (same inode and size; for an ELF file, a byte of its section headers,
// which executing it does not read), then restores its mode and sets its
// times back to the store's seal mtime, 1970-01-01T00:00:01Z.
func tamperInPlace(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0) // root: the mode does not stop it
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt([]byte{b[len(b)-1] ^ 0xff}, int64(len(b)-1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	seal := time.Unix(1, 0)
	if err := os.Chmod(path, fi.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, seal, seal); err != nil {
		t.Fatal(err)
	}
}

// forgeSeals rewrites every stat-cache entry of the store under state that
// names sha, so that its seal is what obj's stat says now: what whoever can
// write the store can do after tampering. It returns how many it rewrote.
func forgeSeals(t *testing.T, state, sha, obj string) int {
	t.Helper()
	fi, err := os.Lstat(obj)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	seal, err := json.Marshal(map[string]any{
		"dev": st.Dev, "ino": st.Ino, "size": st.Size, "mode": uint32(fi.Mode()),
		"mtime_ns": st.Mtim.Nano(), "ctime_ns": st.Ctim.Nano(),
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(state, "runfiles", "stat")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range ents {
		p := filepath.Join(dir, d.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var entry map[string]json.RawMessage
		if err := json.Unmarshal(b, &entry); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if _, ok := entry["object"]; !ok || string(entry["sha256"]) != `"`+sha+`"` {
			continue
		}
		entry["object"] = seal
		if b, err = json.Marshal(entry); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}
