package mounts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/render"
)

// CreateWorkspaceStore mounts the workspace store at path: a tmpfs of
// size (bytes and inodes, as Create), mode 0700 and owned by root (only overlayfs, with the
// runtime's credentials, works in it), nosuid, nodev, noexec, holding the
// overlay's work directory and its upper directory. The upper directory's
// owner and mode are what /workspace itself shows in the container, so it
// is owned by uid:gid, mode 0755: the engine may add files at the top of
// the workspace; below, the host tree's own permissions apply. path must
// not exist or be an empty directory; a failure after the mount unmounts
// again. Unmount removes the store.
func CreateWorkspaceStore(path string, size TmpfsSize, uid, gid int) error {
	if err := size.check("workspace store at " + path); err != nil {
		return err
	}
	if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating the workspace store mountpoint: %w", err)
	}
	if fi, err := os.Lstat(path); err != nil {
		return fmt.Errorf("workspace store mountpoint: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("%w: workspace store mountpoint %s is a %s, not a directory", ErrMountConflict, path, fi.Mode().Type())
	}
	if e, err := mountAt(path); err != nil {
		return err
	} else if e != nil {
		return fmt.Errorf("%w: %s is already mounted (%s); Unmount it first", ErrMountConflict, path, e.FSType)
	}
	if err := requireEmptyDir(path); err != nil {
		return err
	}
	data := fmt.Sprintf("%s,mode=%04o,uid=0,gid=0", size.options(), runDirMode)
	if err := unix.Mount("tmpfs", path, "tmpfs", tmpfsFlags, data); err != nil {
		return fmt.Errorf("mounting the workspace store tmpfs at %s: %w", path, err)
	}
	err := errors.Join(
		mkdirMode(filepath.Join(path, storeWork), 0o700, 0, 0),
		mkdirMode(filepath.Join(path, storeUpper), 0o755, uid, gid),
	)
	if err != nil {
		if uerr := Unmount(path); uerr != nil {
			return errors.Join(err, fmt.Errorf("undoing the workspace store mount: %w", uerr))
		}
		return fmt.Errorf("preparing the workspace store %s: %w", path, err)
	}
	return nil
}

func mkdirMode(p string, mode os.FileMode, uid, gid int) error {
	if err := os.Mkdir(p, mode); err != nil {
		return err
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		return err
	}
	return os.Lchown(p, uid, gid)
}

// WorkspaceChanges are the changes of an overlay workspace, relative to
// the host workspace, as slash-separated paths (workspace.changes.json).
// Files and symlinks are listed; directories only through what they hold.
type WorkspaceChanges struct {
	Added    []string `json:"added"`
	Modified []string `json:"modified"`
	Deleted  []string `json:"deleted"`
	// Skipped are entries a patch cannot carry (fifos, sockets, devices),
	// with what they are.
	Skipped []SkippedChange `json:"skipped,omitempty"`
}

// SkippedChange is an entry of the upper layer left out of the patch.
type SkippedChange struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
}

// Empty reports whether nothing changed.
func (c WorkspaceChanges) Empty() bool {
	return len(c.Added)+len(c.Modified)+len(c.Deleted)+len(c.Skipped) == 0
}

// opaqueXattr marks an upper directory that hides the lower one.
const opaqueXattr = "trusted.overlay.opaque"

// WalkUpper compares an overlay's upper layer with its lower layer and
// returns what changed: a regular file or symlink in the upper layer is
// added, or modified when the lower has one whose content (or executable
// bit, or link text) differs; a whiteout (a 0:0 character device) deletes
// what the lower has there; an opaque directory hides the lower one, so
// every lower entry it does not hold again is deleted. It never follows a
// symlink in either layer. Any entry it cannot read is an error: a walk
// that failed is never "no changes".
func WalkUpper(l OverlayLayers) (WorkspaceChanges, error) {
	w := &upperWalk{l: l}
	if err := w.dir("", true, false); err != nil {
		return WorkspaceChanges{}, err
	}
	c := &w.changes
	for _, list := range [][]string{c.Added, c.Modified, c.Deleted} {
		slices.Sort(list)
	}
	c.Added, c.Modified, c.Deleted = orEmpty(c.Added), orEmpty(c.Modified), orEmpty(c.Deleted)
	return w.changes, nil
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

type upperWalk struct {
	l       OverlayLayers
	changes WorkspaceChanges
}

// dir walks upper directory rel. lowerVisible: the lower has a real
// directory at rel that the merged view shows (it is not hidden by an
// opaque or replacing directory above). replace: the merged directory is
// exactly the upper one (it, or a parent, is opaque), so lower entries it
// does not hold are deleted.
func (w *upperWalk) dir(rel string, lowerVisible, replace bool) error {
	names, err := dirNames(filepath.Join(w.l.Upper, rel))
	if err != nil {
		return err
	}
	held := map[string]bool{}
	for _, name := range names {
		held[name] = true
		if err := w.entry(path.Join(rel, name), lowerVisible, replace); err != nil {
			return err
		}
	}
	if !replace || !lowerVisible {
		return nil
	}
	lowerNames, err := dirNames(filepath.Join(w.l.Lower, rel))
	if err != nil {
		return err
	}
	for _, name := range lowerNames {
		if !held[name] {
			if err := w.deleteLower(path.Join(rel, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *upperWalk) entry(rel string, lowerVisible, replace bool) error {
	up, err := os.Lstat(filepath.Join(w.l.Upper, rel))
	if err != nil {
		return fmt.Errorf("reading the upper layer: %w", err)
	}
	var low fs.FileInfo
	if lowerVisible {
		low, err = os.Lstat(filepath.Join(w.l.Lower, rel))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("reading the workspace: %w", err)
		}
	}
	switch {
	case isWhiteout(up):
		if low != nil {
			return w.deleteLower(rel)
		}
		return nil
	case up.IsDir():
		opaque, err := isOpaque(filepath.Join(w.l.Upper, rel))
		if err != nil {
			return err
		}
		lowerDir := low != nil && low.IsDir()
		if low != nil && !lowerDir {
			if err := w.deleteLower(rel); err != nil {
				return err
			}
		}
		return w.dir(rel, lowerDir, replace || opaque)
	case up.Mode().IsRegular() || up.Mode()&fs.ModeSymlink != 0:
		switch {
		case low == nil:
			w.changes.Added = append(w.changes.Added, rel)
		case low.IsDir():
			if err := w.deleteLower(rel); err != nil {
				return err
			}
			w.changes.Added = append(w.changes.Added, rel)
		default:
			same, err := sameEntry(filepath.Join(w.l.Lower, rel), low, filepath.Join(w.l.Upper, rel), up)
			if err != nil {
				return err
			}
			if !same {
				w.changes.Modified = append(w.changes.Modified, rel)
			}
		}
		return nil
	default:
		w.changes.Skipped = append(w.changes.Skipped, SkippedChange{Path: rel, Kind: up.Mode().Type().String()})
		return nil
	}
}

// deleteLower records the lower entry at rel, and everything below it, as
// deleted.
func (w *upperWalk) deleteLower(rel string) error {
	return filepath.WalkDir(filepath.Join(w.l.Lower, rel), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("reading the workspace: %w", err)
		}
		if !d.IsDir() {
			r, _ := filepath.Rel(w.l.Lower, p)
			w.changes.Deleted = append(w.changes.Deleted, filepath.ToSlash(r))
		}
		return nil
	})
}

func isWhiteout(fi fs.FileInfo) bool {
	if fi.Mode()&fs.ModeCharDevice == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	return st.Rdev == 0
}

func isOpaque(p string) (bool, error) {
	buf := make([]byte, 8)
	n, err := unix.Lgetxattr(p, opaqueXattr, buf)
	switch {
	case errors.Is(err, unix.ENODATA):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading %s of %s: %w", opaqueXattr, p, err)
	}
	return string(buf[:n]) == "y", nil
}

// sameEntry: two non-directories a patch could not tell apart (kind,
// executable bit, content or link text).
func sameEntry(lowPath string, low fs.FileInfo, upPath string, up fs.FileInfo) (bool, error) {
	if low.Mode().Type() != up.Mode().Type() {
		return false, nil
	}
	if low.Mode()&fs.ModeSymlink != 0 {
		a, err := os.Readlink(lowPath)
		if err != nil {
			return false, err
		}
		b, err := os.Readlink(upPath)
		return err == nil && a == b, err
	}
	if !low.Mode().IsRegular() {
		return false, nil
	}
	if low.Size() != up.Size() || (low.Mode()&0o100 == 0) != (up.Mode()&0o100 == 0) {
		return false, nil
	}
	return sameContent(lowPath, upPath)
}

func sameContent(a, b string) (bool, error) {
	fa, err := openNoFollow(a)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := openNoFollow(b)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	bufA, bufB := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, errA := io.ReadFull(fa, bufA)
		nb, errB := io.ReadFull(fb, bufB)
		if !bytes.Equal(bufA[:na], bufB[:nb]) {
			return false, nil
		}
		endA := errors.Is(errA, io.EOF) || errors.Is(errA, io.ErrUnexpectedEOF)
		endB := errors.Is(errB, io.EOF) || errors.Is(errB, io.ErrUnexpectedEOF)
		switch {
		case errA != nil && !endA:
			return false, errA
		case errB != nil && !endB:
			return false, errB
		case endA || endB:
			return endA && endB, nil
		}
	}
}

func openNoFollow(p string) (*os.File, error) {
	return os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
}

func dirNames(p string) ([]string, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("reading directory: %w", err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("reading directory %s: %w", p, err)
	}
	slices.Sort(names)
	return names, nil
}

// WorkspaceDiff is the outcome of HarvestWorkspace.
type WorkspaceDiff struct {
	Changes    WorkspaceChanges
	PatchBytes int64
}

// HarvestWorkspace walks the overlay's upper layer (WalkUpper) and writes,
// into dst (the harvested run dir), render.WorkspaceChanges and, when
// something changed, render.WorkspacePatch: a `git diff --binary` patch
// with a/ and b/ prefixes that `git apply` applies to a copy of the
// workspace. scratch is a directory HarvestWorkspace may create and
// removes again (it holds the before and after copies of the changed
// files). Neither layer is ever written. An error means the changes are
// unknown, never that there are none.
func HarvestWorkspace(l OverlayLayers, dst, scratch string) (WorkspaceDiff, error) {
	changes, err := WalkUpper(l)
	if err != nil {
		return WorkspaceDiff{}, fmt.Errorf("walking the workspace overlay: %w", err)
	}
	out := WorkspaceDiff{Changes: changes}
	data, err := json.MarshalIndent(changes, "", "  ")
	if err != nil {
		return out, err
	}
	if err := replaceFile(filepath.Join(dst, render.WorkspaceChanges), append(data, '\n')); err != nil {
		return out, err
	}
	if len(changes.Added)+len(changes.Modified)+len(changes.Deleted) == 0 {
		return out, nil
	}
	patch, err := diffChanges(l, changes, scratch)
	if err != nil {
		return out, err
	}
	if err := replaceFile(filepath.Join(dst, render.WorkspacePatch), patch); err != nil {
		return out, err
	}
	out.PatchBytes = int64(len(patch))
	return out, nil
}

// replaceFile writes data at p, replacing whatever the harvest put there
// (a file of the same name the engine wrote in its run dir).
func replaceFile(p string, data []byte) error {
	if err := os.RemoveAll(p); err != nil {
		return err
	}
	return os.WriteFile(p, data, 0o644)
}

// diffChanges copies the lower side of every change to scratch/a and the
// upper side to scratch/b and has the host's git diff the two trees
// (argv, no shell, no user or system git config).
func diffChanges(l OverlayLayers, c WorkspaceChanges, scratch string) ([]byte, error) {
	if err := os.RemoveAll(scratch); err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	before, after := filepath.Join(scratch, "a"), filepath.Join(scratch, "b")
	for _, d := range []string{before, after} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	for _, rel := range slices.Concat(c.Modified, c.Deleted) {
		if err := copyEntry(filepath.Join(l.Lower, rel), filepath.Join(before, rel)); err != nil {
			return nil, err
		}
	}
	for _, rel := range slices.Concat(c.Modified, c.Added) {
		if err := copyEntry(filepath.Join(l.Upper, rel), filepath.Join(after, rel)); err != nil {
			return nil, err
		}
	}
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("the workspace patch needs git on the host: %w", err)
	}
	cmd := exec.Command(git, "diff", "--no-index", "--binary", "--no-color", "--no-ext-diff", "--no-textconv",
		"--no-renames", "--src-prefix=", "--dst-prefix=", "--", "a", "b")
	cmd.Dir = scratch
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + scratch, "LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CEILING_DIRECTORIES=" + filepath.Dir(scratch),
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return nil, fmt.Errorf("git diff found no difference in %d changed files; the patch would be wrong", len(c.Added)+len(c.Modified)+len(c.Deleted))
	case errors.As(err, &exit) && exit.ExitCode() == 1 && stdout.Len() > 0: // differences
		return stdout.Bytes(), nil
	default:
		return nil, fmt.Errorf("git diff: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
}

// copyEntry copies a regular file (mode 0644, or 0755 when executable) or
// recreates a symlink, never following one.
func copyEntry(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is a %s, not a file", src, fi.Mode().Type())
	}
	in, err := openNoFollow(src)
	if err != nil {
		return err
	}
	defer in.Close()
	mode := os.FileMode(0o644)
	if fi.Mode()&0o100 != 0 {
		mode = 0o755
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}
