package mounts

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"

	"golang.org/x/sys/unix"
)

// SkipReason says why Harvest did not copy an entry.
type SkipReason string

// Skip reasons.
const (
	SkipSymlink SkipReason = "symlink"  // turned into a symlink while harvested (a listed symlink is in Report.Symlinks)
	SkipFIFO    SkipReason = "fifo"     // never opened
	SkipDevice  SkipReason = "device"   // character or block device
	SkipSocket  SkipReason = "socket"   // never connected
	SkipOverCap SkipReason = "over-cap" // the size cap was reached
	// SkipOverEntryCap: the entry cap was reached (HarvestCap.Entries).
	SkipOverEntryCap SkipReason = "over-entry-cap"
	SkipUnreadable   SkipReason = "unreadable" // open, stat or read failed
	SkipTooDeep      SkipReason = "too-deep"   // nested deeper than MaxHarvestDepth
)

// MaxHarvestDepth bounds how deep Harvest descends (each level holds one
// open directory).
const MaxHarvestDepth = 128

// MaxSkippedListed bounds Report.Skipped: later skipped entries are only
// counted (Report.SkippedUnlisted), so a tree of a million fifos, or one
// past a cap, cannot make the report itself unbounded.
const MaxSkippedListed = 1000

// HarvestCap bounds what Harvest copies: Bytes of file content and Entries
// (files, directories and symlinks; the root is not one). The run dir's
// harvest uses its tmpfs's size and inode limit (RunDirSize).
type HarvestCap struct {
	Bytes   int64
	Entries int64
}

// Skipped is one entry Harvest did not copy.
type Skipped struct {
	// Path is slash-separated and relative to the harvested root.
	Path   string     `json:"path"`
	Reason SkipReason `json:"reason"`
	// Detail: a symlink's target text, a file's size, or the error.
	Detail string `json:"detail,omitempty"`
}

// Report is what Harvest copied and what it skipped. It is written into
// the run record; a partial harvest is always visible in it.
type Report struct {
	Files    int   `json:"files"`
	Dirs     int   `json:"dirs"`
	Bytes    int64 `json:"bytes"`
	CapBytes int64 `json:"cap_bytes"`
	// CapReached: a file did not fit under CapBytes; it and every entry
	// after it (in sorted walk order) are skipped as over-cap.
	CapReached bool  `json:"cap_reached"`
	CapEntries int64 `json:"cap_entries,omitempty"`
	// EntryCapReached: CapEntries entries were harvested (Files + Dirs +
	// Symlinks); every entry after them is skipped as over-entry-cap.
	EntryCapReached bool      `json:"entry_cap_reached,omitempty"`
	Skipped         []Skipped `json:"skipped,omitempty"`
	// SkippedUnlisted counts the skipped entries after the first
	// MaxSkippedListed, which Skipped does not list.
	SkippedUnlisted int `json:"skipped_unlisted,omitempty"`
	// Symlinks are recorded by their target text, never followed nor
	// recreated in the copy (a link the engine wrote must not point the
	// host's reader of the harvest anywhere). Their whole content is the
	// target, so they do not make a harvest partial: engines write them as
	// a matter of course (Codex's arg0 links under $CODEX_HOME/tmp).
	Symlinks []Symlink `json:"symlinks,omitempty"`
}

// Symlink is one symlink of the harvested tree.
type Symlink struct {
	Path   string `json:"path"` // slash-separated, relative to the harvested root
	Target string `json:"target"`
}

// Complete reports whether every entry was copied or recorded: nothing
// skipped, listed or not, and neither cap reached.
func (r Report) Complete() bool {
	return len(r.Skipped) == 0 && r.SkippedUnlisted == 0 && !r.CapReached && !r.EntryCapReached
}

// entries counts what the harvest recorded, the entry cap's unit.
func (r Report) entries() int64 { return int64(r.Files + r.Dirs + len(r.Symlinks)) }

// Harvest copies the regular files and directories under src into dst
// (created 0700 if missing) and reports every entry it skipped and why.
//
// It never follows a symlink: every entry is opened relative to its parent
// directory's fd with openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_XDEV, so nothing outside src (and no other mount inside it)
// is read. Symlinks are recorded with their target (Report.Symlinks);
// fifos, devices and sockets are reported skipped; none is ever opened.
// Entries are visited in sorted order, so the same tree gives the same
// result every time.
//
// Permission bits are preserved; setuid, setgid and sticky bits are
// dropped. Files are created 0600 and get their mode once written;
// directories get theirs once filled. Copies are owned by the caller, not
// the container user. Hard links are copied once per name. Harvesting
// again into the same dst (a retry) replaces the files copied before.
//
// limit.Bytes (required, > 0) caps the bytes copied; a sparse file counts
// at its full size, since its copy is not sparse. The first regular file
// that does not fit stops the copy: it and every later entry are reported
// over-cap (a directory once, without visiting it), and CapReached is set.
// limit.Entries (required, > 0) caps the entries recorded (files,
// directories, symlinks) the same way: the first entry over it and every
// later one are over-entry-cap, and EntryCapReached is set. Only the first
// MaxSkippedListed skipped entries are listed; the rest are counted.
//
// Problems reading src are reported as skipped entries; problems writing
// dst end the harvest with an error, and the report still says what was
// copied until then.
func Harvest(src, dst string, limit HarvestCap) (Report, error) {
	rep := Report{CapBytes: limit.Bytes, CapEntries: limit.Entries}
	if limit.Bytes <= 0 || limit.Entries <= 0 {
		return rep, fmt.Errorf("%w: harvest of %s needs a positive size and entry cap, got %d bytes and %d entries; pass the tmpfs's size and inode limit (RunDirSize)", ErrInvalid, src, limit.Bytes, limit.Entries)
	}
	srcfd, err := openat2(unix.AT_FDCWD, src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		return rep, fmt.Errorf("harvest: opening %s: %w", src, err)
	}
	defer unix.Close(srcfd)
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return rep, fmt.Errorf("harvest: %w", err)
	}
	dstfd, err := openat2(unix.AT_FDCWD, dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		return rep, fmt.Errorf("harvest: opening %s: %w", dst, err)
	}
	defer unix.Close(dstfd)
	h := &harvester{rep: &rep, cap: limit}
	if err := h.dir(srcfd, dstfd, "", 0); err != nil {
		return rep, fmt.Errorf("harvest %s into %s: %w", src, dst, err)
	}
	return rep, nil
}

type harvester struct {
	rep     *Report
	cap     HarvestCap
	copyBuf []byte
}

func (h *harvester) skip(rel string, why SkipReason, detail string) {
	if len(h.rep.Skipped) >= MaxSkippedListed {
		h.rep.SkippedUnlisted++
		return
	}
	h.rep.Skipped = append(h.rep.Skipped, Skipped{Path: rel, Reason: why, Detail: detail})
}

// admit reports whether one more entry fits under the entry cap; the
// first that does not reaches it and is skipped.
func (h *harvester) admit(rel string) bool {
	if !h.rep.EntryCapReached && h.rep.entries() < h.cap.Entries {
		return true
	}
	h.rep.EntryCapReached = true
	h.skip(rel, SkipOverEntryCap, fmt.Sprintf("cap of %d entries reached", h.cap.Entries))
	return false
}

// dir copies the entries of the open source directory srcfd into dstfd.
// rel is srcfd's slash path relative to the root ("" for the root).
func (h *harvester) dir(srcfd, dstfd int, rel string, depth int) error {
	names, err := readNames(srcfd)
	if err != nil {
		h.skip(orDot(rel), SkipUnreadable, "listing: "+err.Error())
		return nil
	}
	for _, name := range names {
		if err := h.entry(srcfd, dstfd, name, path.Join(rel, name), depth); err != nil {
			return err
		}
	}
	return nil
}

func (h *harvester) entry(srcfd, dstfd int, name, rel string, depth int) error {
	if h.rep.EntryCapReached {
		h.skip(rel, SkipOverEntryCap, fmt.Sprintf("cap of %d entries already reached", h.cap.Entries))
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstatat(srcfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		h.skip(rel, SkipUnreadable, err.Error())
		return nil
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		if !h.admit(rel) {
			return nil
		}
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(srcfd, name, buf)
		if err != nil {
			h.skip(rel, SkipUnreadable, "readlink: "+err.Error())
			return nil
		}
		h.rep.Symlinks = append(h.rep.Symlinks, Symlink{Path: orDot(rel), Target: string(buf[:n])})
		return nil
	}
	if why, ok := specialReason(st.Mode); ok {
		h.skip(rel, why, kindName(st.Mode))
		return nil
	}
	if h.rep.CapReached {
		h.skip(rel, SkipOverCap, "cap of "+fmt.Sprint(h.cap.Bytes)+" bytes already reached")
		return nil
	}
	if !h.admit(rel) {
		return nil
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if depth >= MaxHarvestDepth {
			h.skip(rel, SkipTooDeep, fmt.Sprintf("deeper than %d levels", MaxHarvestDepth))
			return nil
		}
		return h.subdir(srcfd, dstfd, name, rel, depth)
	case unix.S_IFREG:
		return h.file(srcfd, dstfd, name, rel)
	}
	h.skip(rel, SkipUnreadable, kindName(st.Mode))
	return nil
}

// specialReason maps a file type that is never opened to its skip reason.
func specialReason(mode uint32) (SkipReason, bool) {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return SkipSymlink, true
	case unix.S_IFIFO:
		return SkipFIFO, true
	case unix.S_IFCHR, unix.S_IFBLK:
		return SkipDevice, true
	case unix.S_IFSOCK:
		return SkipSocket, true
	}
	return "", false
}

// openSource opens an entry of srcfd without following any link, and
// checks it is still the type it was when listed (it may have been
// swapped meanwhile). ok=false means it was skipped and reported.
func (h *harvester) openSource(srcfd int, name, rel string, flags uint64, want uint32) (int, unix.Stat_t, bool) {
	var st unix.Stat_t
	fd, err := openat2(srcfd, name, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0, beneathNoSymlinks)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			h.skip(rel, SkipSymlink, "became a symlink while harvesting")
		} else {
			h.skip(rel, SkipUnreadable, err.Error())
		}
		return -1, st, false
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		h.skip(rel, SkipUnreadable, err.Error())
		return -1, st, false
	}
	if st.Mode&unix.S_IFMT != want {
		unix.Close(fd)
		why, ok := specialReason(st.Mode)
		if !ok {
			why = SkipUnreadable
		}
		h.skip(rel, why, "changed to a "+kindName(st.Mode)+" while harvesting")
		return -1, st, false
	}
	return fd, st, true
}

func (h *harvester) subdir(srcfd, dstfd int, name, rel string, depth int) error {
	sub, st, ok := h.openSource(srcfd, name, rel, unix.O_RDONLY|unix.O_DIRECTORY, unix.S_IFDIR)
	if !ok {
		return nil
	}
	defer unix.Close(sub)
	if err := unix.Mkdirat(dstfd, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("creating %s: %w", rel, err)
	}
	out, err := openat2(dstfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, beneathNoSymlinks)
	if err != nil {
		return fmt.Errorf("opening %s in the destination: %w", rel, err)
	}
	defer unix.Close(out)
	// Writable while being filled (it may be left read-only by an earlier
	// harvest); the final mode is set last.
	if err := unix.Fchmod(out, 0o700); err != nil {
		return fmt.Errorf("opening %s in the destination: %w", rel, err)
	}
	h.rep.Dirs++
	if err := h.dir(sub, out, rel, depth+1); err != nil {
		return err
	}
	if err := unix.Fchmod(out, st.Mode&0o777); err != nil {
		return fmt.Errorf("setting the mode of %s: %w", rel, err)
	}
	return nil
}

func (h *harvester) file(srcfd, dstfd int, name, rel string) error {
	in, st, ok := h.openSource(srcfd, name, rel, unix.O_RDONLY, unix.S_IFREG)
	if !ok {
		return nil
	}
	defer unix.Close(in)
	if left := h.cap.Bytes - h.rep.Bytes; st.Size > left {
		h.rep.CapReached = true
		h.skip(rel, SkipOverCap, fmt.Sprintf("%d bytes; %d of the %d-byte cap left", st.Size, left, h.cap.Bytes))
		return nil
	}
	// A copy left by an earlier harvest is replaced, never written through
	// (it may be read-only, or a hard link).
	if err := unix.Unlinkat(dstfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("replacing %s: %w", rel, err)
	}
	out, err := openat2(dstfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o600, beneathNoSymlinks)
	if err != nil {
		return fmt.Errorf("creating %s: %w", rel, err)
	}
	defer unix.Close(out)
	readErr, err := copyFD(out, in, st.Size, h.buf())
	if err != nil {
		return fmt.Errorf("writing %s: %w", rel, err)
	}
	if readErr != nil {
		h.skip(rel, SkipUnreadable, readErr.Error())
		if err := unix.Unlinkat(dstfd, name, 0); err != nil {
			return fmt.Errorf("removing the partial copy of %s: %w", rel, err)
		}
		return nil
	}
	if err := unix.Fchmod(out, st.Mode&0o777); err != nil {
		return fmt.Errorf("setting the mode of %s: %w", rel, err)
	}
	h.rep.Bytes += st.Size
	h.rep.Files++
	return nil
}

func (h *harvester) buf() []byte {
	if h.copyBuf == nil {
		h.copyBuf = make([]byte, 256<<10)
	}
	return h.copyBuf
}

// copyFD copies exactly size bytes from in to out (fewer if in ends
// first, which is then a read error). It tells read errors (the source's
// problem: skip the file) from write errors (the destination's: stop).
func copyFD(out, in int, size int64, buf []byte) (readErr, writeErr error) {
	for size > 0 {
		chunk := buf[:min(int64(len(buf)), size)]
		n, err := unix.Read(in, chunk)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err, nil
		}
		if n == 0 {
			return fmt.Errorf("file shrank: %d bytes short", size), nil
		}
		for w := chunk[:n]; len(w) > 0; {
			m, err := unix.Write(out, w)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return nil, err
			}
			w = w[m:]
		}
		size -= int64(n)
	}
	return nil, nil
}

// readNames lists a directory fd's entries in sorted order. The fd stays
// open and owned by the caller.
func readNames(dirfd int) ([]string, error) {
	dup, err := unix.Dup(dirfd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

func orDot(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}
