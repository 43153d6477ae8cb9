package images

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"
)

// streamEntry is one entry of a layer streamed from files rather than held in
// a Definition: the runfiles tree and the program images. Owner 0:0 and
// the layer's modification time are not fields: nothing may vary them.
type streamEntry struct {
	path string // absolute and clean
	typ  EntryType
	mode fs.FileMode // permission bits only
	// target is a symlink's link text.
	target string
	// size and sha256 (lowercase hex) are a file's content, which open
	// returns; the content read must have both, or the layer is refused.
	size   int64
	sha256 string
	open   func() (io.ReadCloser, error)
}

// Symlink is an entry type of the runfiles image only: the base image has
// none (Definition.Validate refuses it).
const Symlink EntryType = File + 1

// errContentChanged: a file's content is not what its entry says.
var errContentChanged = errors.New("content differs from its manifest entry")

// writeLayer writes entries as an uncompressed layer tar: names relative to
// / with a trailing slash on directories, owner 0:0 with empty user and group
// names, modification time mtime, no access or change times, entries in the
// order given (each parent directory before its children). A header is USTAR
// when it fits, else PAX (a name over 100 bytes, a file over 8 GiB), the
// first of the formats archive/tar documents choosing. progress, when set,
// gets the content bytes written so far after each file. A cancelled ctx
// stops it before the next file.
func writeLayer(ctx context.Context, w io.Writer, entries []streamEntry, mtime time.Time, progress func(int64)) error {
	tw := tar.NewWriter(w)
	dirs := map[string]bool{"/": true}
	var written int64
	for _, e := range entries {
		if !path.IsAbs(e.path) || path.Clean(e.path) != e.path || e.path == "/" {
			return fmt.Errorf("images: layer entry %q is not a clean absolute path below /", e.path)
		}
		if !dirs[path.Dir(e.path)] {
			return fmt.Errorf("images: layer entry %s comes before (or without) its parent directory", e.path)
		}
		if e.mode&^fs.ModePerm != 0 {
			return fmt.Errorf("images: layer entry %s has mode %v: only permission bits allowed", e.path, e.mode)
		}
		hdr := &tar.Header{Name: strings.TrimPrefix(e.path, "/"), Mode: int64(e.mode), ModTime: mtime}
		switch e.typ {
		case Dir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
			dirs[e.path] = true
		case Symlink:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.target
		case File:
			hdr.Typeflag, hdr.Size = tar.TypeReg, e.size
		default:
			return fmt.Errorf("images: layer entry %s has type %v", e.path, e.typ)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("images: tar header for %s: %w", e.path, err)
		}
		if e.typ != File {
			continue
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("images: writing the layer: %w", err)
		}
		if err := copyChecked(tw, e); err != nil {
			return err
		}
		written += e.size
		if progress != nil {
			progress(written)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("images: writing the layer: %w", err)
	}
	return nil
}

// copyChecked copies e's content into tw, checking its size and digest.
// The tar header already promised e.size bytes, so a shorter or longer
// file fails here rather than producing a malformed archive.
func copyChecked(tw *tar.Writer, e streamEntry) error {
	rc, err := e.open()
	if err != nil {
		return fmt.Errorf("images: %s: %w", e.path, err)
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tw, h), io.LimitReader(rc, e.size+1))
	if errors.Is(err, tar.ErrWriteTooLong) {
		return fmt.Errorf("images: %s: %w (longer than %d bytes)", e.path, errContentChanged, e.size)
	}
	if err != nil {
		return fmt.Errorf("images: %s: %w", e.path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != e.size || got != e.sha256 {
		return fmt.Errorf("images: %s: %w (want %d bytes sha256:%s, read %d bytes sha256:%s)", e.path, errContentChanged, e.size, e.sha256, n, got)
	}
	return nil
}
