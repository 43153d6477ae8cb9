package launcher

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"hookbox.dev/hookbox/render"
)

// capped writes chunks through a cappedOutput of limit bytes and returns
// the record file's content and the stream's account.
func capped(t *testing.T, limit int64, chunks ...string) (string, StreamResult) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	c := newCappedOutput(f, limit, nil)
	for _, chunk := range chunks {
		if n, err := c.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write(%d bytes) = %d, %v; a capped stream takes everything", len(chunk), n, err)
		}
	}
	res := c.close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data), res
}

func TestCappedOutput(t *testing.T) {
	for name, tc := range map[string]struct {
		limit   int64
		chunks  []string
		want    string
		dropped int64
	}{
		"under the cap":                   {10, []string{"abc\n", "de"}, "abc\nde", 0},
		"exactly the cap":                 {8, []string{"abc\n", "def\n"}, "abc\ndef\n", 0},
		"a cut line is trimmed":           {10, []string{"aaa\nbbb\n", "cccc\n"}, "aaa\nbbb\n", 5},
		"a line cut in a later write":     {10, []string{"aaa\nb", "bbbbbbbb\n", "more\n"}, "aaa\n", 5 + 6 + 4},
		"cut right before a newline":      {4, []string{"abcd\nef"}, "abcd", 3},
		"no newline within the cap":       {10, []string{strings.Repeat("x", 25)}, strings.Repeat("x", 10), 15},
		"everything after the cap counts": {4, []string{"ab\n", "c\nd", "eeee", "ffff"}, "ab\nc", 2 + 4 + 4},
		"no cap":                          {0, []string{strings.Repeat("y", 1000)}, strings.Repeat("y", 1000), 0},
	} {
		t.Run(name, func(t *testing.T) {
			got, res := capped(t, tc.limit, tc.chunks...)
			if got != tc.want || res.Bytes != int64(len(tc.want)) || res.DroppedBytes != tc.dropped || res.Error != "" {
				t.Errorf("record %q, account %+v; want %q with %d bytes dropped", got, res, tc.want, tc.dropped)
			}
			total := int64(len(strings.Join(tc.chunks, "")))
			if res.Bytes+res.DroppedBytes != total {
				t.Errorf("kept %d + dropped %d != %d written", res.Bytes, res.DroppedBytes, total)
			}
		})
	}
}

// TestCappedOutputDrains: copying 64 MiB through a 1 MiB cap reads all of
// it (a copier never stops on an error, so the engine never blocks on a
// full pipe) and keeps 1 MiB.
func TestCappedOutputDrains(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	c := newCappedOutput(f, 1<<20, func() { calls++ })
	line := bytes.Repeat([]byte("0123456789abcde\n"), 4096) // 64 KiB of 16-byte lines
	r, w := io.Pipe()
	go func() {
		for range 1024 {
			w.Write(line)
		}
		w.Close()
	}()
	n, err := io.Copy(c, r)
	if n != 64<<20 || err != nil {
		t.Fatalf("copied %d bytes, %v; want all 64 MiB read", n, err)
	}
	res := c.close()
	if res.Bytes != 1<<20 || res.DroppedBytes != 63<<20 || calls != 1 {
		t.Errorf("account %+v, onCap called %d times; want 1 MiB kept, 63 MiB dropped, one call", res, calls)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 1<<20 {
		t.Errorf("record file: %v, %v; want 1 MiB", fi, err)
	}
}

// TestCappedOutputWriteError: a record that cannot be written drops the
// output (counted) and says why, without failing the copier.
func TestCappedOutputWriteError(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	c := newCappedOutput(f, 1<<20, nil)
	f.Close()
	if n, err := c.Write([]byte("lost\n")); n != 5 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	res := c.close()
	if res.Bytes != 0 || res.DroppedBytes != 5 || !strings.Contains(res.Error, "writing the record") {
		t.Errorf("account %+v, want 5 bytes dropped and the write error", res)
	}
}

// TestRecordOutput: a stream over the cap is a reason in the result and an
// output section, and the cap is announced once as it is reached.
func TestRecordOutput(t *testing.T) {
	var progress []string
	x := &execution{
		r: &render.Render{Limits: render.Limits{OutputBytes: 8}}, result: &Result{}, dir: t.TempDir(),
		opts: Options{Sink: SinkFunc(func(e Event) {
			if e.Type == EventProgress {
				progress = append(progress, e.Detail)
			}
		})},
	}
	var err error
	if x.stdout, err = x.openOutput(StdoutFile, "stdout", 0o644); err != nil {
		t.Fatal(err)
	}
	if x.stderr, err = x.openOutput(StderrFile, "stderr", 0o600); err != nil {
		t.Fatal(err)
	}
	x.stdout.take([]byte("{\"a\":1}\n{\"b\":"))
	x.stdout.take([]byte("2}\n"))
	x.stderr.take([]byte("warn\n"))
	x.recordOutput()
	out := x.result.Output
	if out == nil || out.CapBytes != 8 || out.Stdout.Bytes != 8 || out.Stdout.DroppedBytes != 8 || out.Stderr.Bytes != 5 || out.Stderr.DroppedBytes != 0 {
		t.Fatalf("output %+v, want stdout 8 kept and 8 dropped, stderr whole", out)
	}
	if !slices.Equal(x.result.Reasons, []string{ReasonOutputTruncated + ":stdout"}) {
		t.Errorf("reasons %v, want only output-truncated:stdout", x.result.Reasons)
	}
	if len(progress) != 1 || !strings.Contains(progress[0], "stdout reached its cap") {
		t.Errorf("progress %q, want one line announcing the stdout cap", progress)
	}
	if data, _ := os.ReadFile(filepath.Join(x.dir, StdoutFile)); string(data) != "{\"a\":1}\n" {
		t.Errorf("stdout record %q, want the whole first line only", data)
	}
}
