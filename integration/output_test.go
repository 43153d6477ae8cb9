package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"hookbox.dev/hookbox/launcher"
)

// shSpec writes an exec spawn running script with /bin/sh -c.
func (e *env) shSpec(name, script string, extra ...string) string {
	e.t.Helper()
	args, err := json.Marshal([]string{"-c", script})
	if err != nil {
		e.t.Fatal(err)
	}
	return e.execSpec(name, "/bin/sh", string(args), extra...)
}

// outputLine is one NDJSON line of 26 bytes: a 1 MiB cap falls inside one.
const outputLine = `{"type":"line","n":12345}`

// TestOutputCap: an engine writing 256 MiB to stdout, or to stderr, with
// limits.output 1Mi runs to its end (never blocked on a full pipe); the
// record keeps at most 1 MiB of whole lines and the result counts the
// rest. Before limits.output, both were recorded whole (1 GiB in 29 s).
func TestOutputCap(t *testing.T) {
	const written, limit = 256 << 20, 1 << 20
	for _, tc := range []struct{ stream, redirect, file string }{
		{"stdout", "", launcher.StdoutFile},
		{"stderr", " >&2", launcher.StderrFile},
	} {
		t.Run(tc.stream, func(t *testing.T) {
			e := newEnv(t)
			spec := e.shSpec("flood-"+tc.stream, fmt.Sprintf("/usr/bin/yes '%s' | /usr/bin/head -c %d%s", outputLine, written, tc.redirect),
				"  tools: [/usr/bin/yes, /usr/bin/head]", "  limits: {output: 1Mi, timeout: 3m}")
			start := time.Now()
			r := e.run(spec)
			took := time.Since(start)
			res := r.mustResult(t)
			t.Logf("%s: %d MiB written, run %d ms, teardown %d ms, whole hookbox run %v", tc.stream, written>>20, res.Timings.Run, res.Timings.Teardown, took)
			if res.Status != launcher.StatusCompleted || res.ExitCode == nil || *res.ExitCode != 0 {
				t.Fatalf("status %s %v exit %v, want completed: the engine must not be blocked or killed by the cap\nstderr:\n%s", res.Status, res.Reasons, res.ExitCode, r.stderr)
			}
			if !slices.Contains(res.Reasons, launcher.ReasonOutputTruncated+":"+tc.stream) {
				t.Errorf("reasons %v lack %s:%s", res.Reasons, launcher.ReasonOutputTruncated, tc.stream)
			}
			out := res.Output
			if out == nil {
				t.Fatal("result.json has no output section")
			}
			got, other := out.Stdout, out.Stderr
			if tc.stream == "stderr" {
				got, other = out.Stderr, out.Stdout
			}
			if out.CapBytes != limit || got.Bytes > limit || got.Bytes+got.DroppedBytes != written || other.DroppedBytes != 0 || got.Error != "" {
				t.Errorf("output %+v: want %s at most %d bytes kept, kept + dropped = %d, the other stream whole", out, tc.stream, limit, written)
			}
			data, err := os.ReadFile(filepath.Join(res.RecordDir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(data)) != got.Bytes || len(data) <= limit-len(outputLine)-1 {
				t.Errorf("record %s is %d bytes, result says %d; want the whole lines of the first MiB", tc.file, len(data), got.Bytes)
			}
			// The cut line is dropped: the record is whole lines only.
			sc := bufio.NewScanner(bytes.NewReader(data))
			lines := 0
			for sc.Scan() {
				if sc.Text() != outputLine {
					t.Fatalf("line %d of the record is %q, want %q", lines+1, sc.Text(), outputLine)
				}
				lines++
			}
			if !bytes.HasSuffix(data, []byte("\n")) || lines != limit/(len(outputLine)+1) {
				t.Errorf("record holds %d lines (ends with a newline: %v), want %d whole lines", lines, bytes.HasSuffix(data, []byte("\n")), limit/(len(outputLine)+1))
			}
			if tc.stream == "stdout" && len(r.output()) > limit {
				t.Errorf("the event stream carried %d bytes of stdout, more than the cap", len(r.output()))
			}
			if took > 90*time.Second {
				t.Errorf("the run took %v", took)
			}
			e.assertNothingLeft(res.RunID)
		})
	}
}

// TestTmpfsInodeLimit: with limits {tmpfs: 1Mi, memory: 64Mi} an engine
// creating 200,000 empty files gets ENOSPC in the container, in the run
// dir and in /tmp, after the default 4096 inodes; the harvest copies what
// exists, completely, and teardown stays fast. Before, all 200,000 were
// created and harvested (7.4 s teardown, +200k host inodes).
func TestTmpfsInodeLimit(t *testing.T) {
	e := newEnv(t)
	// true, not ':': a failed redirection of a special builtin ends the shell.
	script := `n=0; while [ $n -lt 200000 ] && true 2>/dev/null > /tmp/f$n; do n=$((n+1)); done; echo "tmp $n"
cd /run/hookbox/out || exit 9
i=0; while [ $i -lt 200000 ]; do true > f$i || { echo "run dir $i"; exit 7; }; i=$((i+1)); done; echo "run dir $i"`
	spec := e.shSpec("inodes", script, "  limits: {tmpfs: 1Mi, memory: 64Mi, timeout: 3m}")
	r := e.run(spec)
	res := r.mustResult(t)
	t.Logf("engine printed %q; run %d ms, teardown %d ms, harvest %d files %d dirs", strings.TrimSpace(r.output()), res.Timings.Run, res.Timings.Teardown, res.Harvest.Files, res.Harvest.Dirs)
	if res.ExitCode == nil || *res.ExitCode != 7 {
		t.Fatalf("exit %v (%s %v), want 7: creating files in the run dir must fail\nstdout %q\nstderr:\n%s", res.ExitCode, res.Status, res.Reasons, r.output(), r.stderr)
	}
	var tmp, run int
	if _, err := fmt.Sscanf(r.output(), "tmp %d\nrun dir %d\n", &tmp, &run); err != nil {
		t.Fatalf("engine output %q: %v", r.output(), err)
	}
	if tmp >= 4096 || run >= 4096 || tmp < 4000 || run < 4000 {
		t.Errorf("created %d files in /tmp and %d in the run dir, want just under the 4096 inodes each", tmp, run)
	}
	stderr, err := os.ReadFile(filepath.Join(res.RecordDir, launcher.StderrFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(stderr), "No space left on device") {
		t.Errorf("stderr.log %q, want ENOSPC", stderr)
	}
	h := res.Harvest
	if h == nil || h.Files != run || !h.Complete() || h.CapEntries != 4096 {
		t.Errorf("harvest %+v, want the %d files, complete, under the 4096-entry cap", h, run)
	}
	if res.Timings.Teardown > 5000 {
		t.Errorf("teardown took %d ms", res.Timings.Teardown)
	}
	e.assertNothingLeft(res.RunID)
}
