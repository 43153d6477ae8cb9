package mounts

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// ArtifactStatus is the outcome of resolving one declared artifact.
type ArtifactStatus string

// Artifact statuses. Missing is reported only when the search ran to the
// end; a search that could not read something it needed is unchecked
// (docs/contracts.md §5: a check that failed is never "found nothing").
const (
	ArtifactFound     ArtifactStatus = "found"
	ArtifactMissing   ArtifactStatus = "missing"
	ArtifactUnchecked ArtifactStatus = "unchecked"
)

// ArtifactMatch is the resolution of one declared artifact.
type ArtifactMatch struct {
	Declared string         `json:"declared"`
	Status   ArtifactStatus `json:"status"`
	// Path is the match, slash-separated and relative to the root.
	Path string `json:"path,omitempty"`
	// Reason says why nothing matched, or why the search could not finish.
	Reason string `json:"reason,omitempty"`
}

// ResolveArtifacts matches declared artifacts against root, a harvested run
// dir, by the rules of docs/contracts.md §5, one match per declared entry
// in order:
//
//   - an entry ending in "/" names a directory and matches exactly;
//   - a bare filename matches a regular file at the root first, then in the
//     immediate subdirectories, searched in byte-wise sorted order so the
//     same one wins every run;
//   - any other path (it has a slash) matches exactly a regular file.
//
// Entries are cleaned first (keeping a trailing "/"); an empty, absolute or
// ".."-escaping entry never matches. Symlinks are never followed nor
// matched (a harvest holds none). It only reads root.
func ResolveArtifacts(root string, declared []string) []ArtifactMatch {
	out := make([]ArtifactMatch, 0, len(declared))
	rootErr := checkArtifactRoot(root)
	for _, d := range declared {
		if rootErr != nil {
			out = append(out, ArtifactMatch{Declared: d, Status: ArtifactUnchecked, Reason: rootErr.Error()})
			continue
		}
		out = append(out, resolveArtifact(root, d))
	}
	return out
}

func checkArtifactRoot(root string) error {
	fi, err := os.Lstat(root)
	switch {
	case err != nil:
		return fmt.Errorf("harvested run dir unreadable: %v", err)
	case !fi.IsDir():
		return fmt.Errorf("harvested run dir %s is a %s, not a directory", root, typeName(fi.Mode()))
	}
	return nil
}

func resolveArtifact(root, declared string) ArtifactMatch {
	m := ArtifactMatch{Declared: declared}
	wantDir := strings.HasSuffix(declared, "/")
	clean := path.Clean(declared)
	if declared == "" || path.IsAbs(declared) || clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		m.Status, m.Reason = ArtifactMissing, "invalid entry: name a path relative to the run dir, without .."
		return m
	}
	if wantDir || strings.Contains(clean, "/") {
		fi, err := lstatBeneath(root, clean)
		switch {
		case err == nil && wantDir == fi.IsDir() && (wantDir || fi.Mode().IsRegular()):
			m.Status, m.Path = ArtifactFound, clean
		case err == nil:
			m.Status, m.Reason = ArtifactMissing, fmt.Sprintf("%s is a %s", clean, typeName(fi.Mode()))
		case errors.Is(err, fs.ErrNotExist):
			m.Status, m.Reason = ArtifactMissing, err.Error()
		default:
			m.Status, m.Reason = ArtifactUnchecked, err.Error()
		}
		return m
	}
	// A bare filename: the root first, then each immediate subdirectory.
	found, err := regularAt(filepath.Join(root, clean))
	if err != nil {
		m.Status, m.Reason = ArtifactUnchecked, err.Error()
		return m
	}
	if found {
		m.Status, m.Path = ArtifactFound, clean
		return m
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		m.Status, m.Reason = ArtifactUnchecked, "listing the run dir: "+err.Error()
		return m
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.IsDir() { // the type from the listing: a symlink is not a directory
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	for _, sub := range names {
		found, err := regularAt(filepath.Join(root, sub, clean))
		if err != nil {
			// An earlier subdirectory could not be searched: whatever a
			// later one holds might not be the one that wins every run.
			m.Status, m.Reason = ArtifactUnchecked, err.Error()
			return m
		}
		if found {
			m.Status, m.Path = ArtifactFound, sub+"/"+clean
			return m
		}
	}
	m.Status, m.Reason = ArtifactMissing, fmt.Sprintf("no regular file %s at the run dir's root or in an immediate subdirectory", clean)
	return m
}

// regularAt reports whether p is a regular file (not a symlink). Absence,
// or another kind of file, is false with no error.
func regularAt(p string) (bool, error) {
	fi, err := os.Lstat(p)
	switch {
	case err == nil:
		return fi.Mode().IsRegular(), nil
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return false, nil
	}
	return false, err
}

// lstatBeneath lstats the slash path rel under root component by
// component, so no symlink on the way is followed: a symlink or file where
// a directory should be reads as not existing.
func lstatBeneath(root, rel string) (fs.FileInfo, error) {
	cur := root
	parts := strings.Split(rel, "/")
	for i, part := range parts {
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if err != nil {
			return nil, err
		}
		if i < len(parts)-1 && !fi.IsDir() {
			return nil, fmt.Errorf("%s: %w (%s is a %s)", rel, fs.ErrNotExist, strings.Join(parts[:i+1], "/"), typeName(fi.Mode()))
		}
		if i == len(parts)-1 {
			return fi, nil
		}
	}
	return nil, fs.ErrNotExist
}

// typeName names a file mode's type for messages.
func typeName(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "file of unknown type"
}
