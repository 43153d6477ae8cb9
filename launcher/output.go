package launcher

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// cappedOutput is one of the engine's output streams as the run keeps it
// (limits.output, docs/contracts.md 5.9): the first limit bytes go to the
// record file as they come; every byte after that is still read, so the
// engine never blocks on a full pipe, but dropped and counted. When the
// cap cuts a line, close trims the record back to the end of its last
// whole line, so a line-oriented stream (Claude Code's NDJSON) parses to
// its last record line; a stream with no newline within the cap keeps all
// limit bytes.
type cappedOutput struct {
	mu    sync.Mutex
	file  *os.File
	limit int64 // 0: no cap (a render from before limits.output)
	// kept bytes are in the file; lineEnd is the offset just after the
	// last newline among them.
	kept, lineEnd int64
	dropped       int64
	// cutAtNewline: the first dropped byte was a newline, so the kept
	// bytes end with a whole line (without its newline).
	cutAtNewline bool
	writeErr     error
	// onCap runs once, when the stream first drops bytes.
	onCap func()
}

func newCappedOutput(file *os.File, limit int64, onCap func()) *cappedOutput {
	return &cappedOutput{file: file, limit: limit, onCap: onCap}
}

// take writes the part of p within the cap to the record and returns it
// (what may also be streamed); the rest of p is counted as dropped.
func (c *cappedOutput) take(p []byte) []byte {
	c.mu.Lock()
	keep := p
	if c.limit > 0 {
		keep = p[:min(int64(len(p)), max(c.limit-c.kept, 0))]
	}
	if c.writeErr != nil {
		keep = nil
	}
	if len(keep) > 0 {
		n, err := c.file.Write(keep)
		keep = keep[:n]
		if err != nil {
			c.writeErr = err
		}
		if i := bytes.LastIndexByte(keep, '\n'); i >= 0 {
			c.lineEnd = c.kept + int64(i) + 1
		}
		c.kept += int64(n)
	}
	first := c.dropped == 0 && len(keep) < len(p)
	if first {
		c.cutAtNewline = p[len(keep)] == '\n'
	}
	c.dropped += int64(len(p) - len(keep))
	c.mu.Unlock()
	if first && c.onCap != nil {
		c.onCap()
	}
	return keep
}

// Write is take for a copier (containerd's stderr copy): it never fails,
// so the copy never stops reading the engine's pipe.
func (c *cappedOutput) Write(p []byte) (int, error) {
	c.take(p)
	return len(p), nil
}

// close trims a line the cap cut, closes the record file and returns the
// stream's account.
func (c *cappedOutput) close() StreamResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	if c.writeErr != nil {
		errs = append(errs, fmt.Errorf("writing the record: %w (later output dropped)", c.writeErr))
	}
	if c.dropped > 0 && !c.cutAtNewline && c.lineEnd > 0 && c.lineEnd < c.kept {
		if err := c.file.Truncate(c.lineEnd); err != nil {
			errs = append(errs, fmt.Errorf("trimming the line the cap cut: %w", err))
		} else {
			c.dropped += c.kept - c.lineEnd
			c.kept = c.lineEnd
		}
	}
	if err := c.file.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		errs = append(errs, err)
	}
	res := StreamResult{Bytes: c.kept, DroppedBytes: c.dropped}
	if err := errors.Join(errs...); err != nil {
		res.Error = err.Error()
	}
	return res
}

// openOutput opens a record file of the engine's output, capped at the
// render's limits.output.
func (x *execution) openOutput(name, stream string, mode os.FileMode) (*cappedOutput, error) {
	f, err := os.OpenFile(filepath.Join(x.dir, name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return nil, err
	}
	limit := x.r.Limits.OutputBytes
	return newCappedOutput(f, limit, func() {
		x.progress("output", "%s reached its cap of %s (limits.output): the rest is read and dropped", stream, humanBytes(limit))
	}), nil
}

// recordOutput closes the engine's output streams, once nothing writes to
// them, into result.json's output section.
func (x *execution) recordOutput() {
	if x.stdout == nil && x.stderr == nil {
		return
	}
	out := &OutputResult{CapBytes: x.r.Limits.OutputBytes}
	for _, s := range []struct {
		stream string
		c      *cappedOutput
		res    *StreamResult
	}{{"stdout", x.stdout, &out.Stdout}, {"stderr", x.stderr, &out.Stderr}} {
		if s.c == nil {
			continue
		}
		*s.res = s.c.close()
		if s.res.DroppedBytes > 0 {
			x.result.Reasons = append(x.result.Reasons, ReasonOutputTruncated+":"+s.stream)
		}
	}
	x.result.Output = out
}
