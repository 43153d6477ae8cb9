package runfiles

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// sealTime is the modification time of every store object (and so of every
// tree file, which shares its inode). Any write moves it; user space can
// set it back, which is why the quick check compares the object's seal
// (objectSeal) too.
var sealTime = time.Unix(1, 0)

// TreeModTime is the modification time of every file of an assembled tree
// (1970-01-01T00:00:01Z, see the package doc), which the runfiles image
// gives every entry, so a program sees the same times in either.
func TreeModTime() time.Time { return sealTime.UTC() }

// RacyWindow: a stat-cache entry is trusted only when the file's ctime is
// this much older than the moment its content was read. A write within the
// same timestamp tick as an earlier one, leaving the size unchanged, would
// otherwise go unseen on filesystems with coarse timestamps.
const RacyWindow = 2 * time.Second

// copyBufSize is the read size when storing or hashing a file.
const copyBufSize = 1 << 20

// copyBufs recycles copy buffers: allocating one per file would make
// hashing 20,000 small files mostly a matter of zeroing memory.
var copyBufs = sync.Pool{New: func() any { return new([copyBufSize]byte) }}

// maxRecord bounds a stat-cache entry (under 300 bytes with its seal).
const maxRecord = 1024

// Store is a content-addressed store of runfiles and the trees assembled
// from it, under one root directory (see the package doc for the layout).
// A Store is safe for concurrent use, and several processes may share one
// root.
type Store struct {
	root string
}

// storeDirMode is the mode of every directory of the store's layout:
// private to its owner, so no other host user reaches an object or a tree,
// whatever its mode. Containers are not stopped by it: overlayfs looks a
// lower layer up with the credentials of whoever mounted it (root, or the
// rootless user's containerd: the store's owner), not the container's.
const storeDirMode fs.FileMode = 0o700

// OpenStore opens (creating as needed) the store under root, typically
// hookbox's cache directory (config.CacheDir). The runfiles directory and
// every directory of the store's layout are made private (0700): a store
// written by an older hookbox, whose directories were 0755, is tightened
// here; one that cannot be (another user's) is refused.
func OpenStore(root string) (*Store, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("runfiles: %w: store root %q is not an absolute path", ErrUnsupported, root)
	}
	s := &Store{root: filepath.Clean(root)}
	if err := os.MkdirAll(s.root, 0o755); err != nil {
		return nil, fmt.Errorf("runfiles: opening store: %w", err)
	}
	dirs := []string{filepath.Join(s.root, "runfiles"), s.statDir(), s.treesDir(), s.indexDir(), s.tmpDir()}
	for _, mode := range objectModes {
		dirs = append(dirs, s.objectsDir(mode))
	}
	for _, d := range dirs {
		if err := privateDir(d); err != nil {
			return nil, fmt.Errorf("runfiles: opening store: %w", err)
		}
	}
	return s, nil
}

// privateDir makes sure d is a directory (not a symlink) with mode
// storeDirMode, creating it or tightening its mode.
func privateDir(d string) error {
	if err := os.Mkdir(d, storeDirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := os.Lstat(d)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is a %v, not a directory; remove it (the store is a cache, rebuilt on the next run)", ErrUnsupported, d, fi.Mode().Type())
	}
	if fi.Mode().Perm() == storeDirMode {
		return nil
	}
	if err := os.Chmod(d, storeDirMode); err != nil {
		return fmt.Errorf("%s has mode %04o and cannot be made private (%04o), so other users could read what the store copied: %w; "+
			"use the store as its owner%s, or remove it (a cache, rebuilt on the next run)", d, fi.Mode().Perm(), storeDirMode, err, ownerHint(fi))
	}
	return nil
}

// Root is the directory the store was opened at.
func (s *Store) Root() string { return s.root }

// objectsDir is the directory of objects with the given mode (one of
// objectModes): sha256 for 0555, sha256-<mode> (e.g. sha256-0444) for the
// others.
func (s *Store) objectsDir(mode fs.FileMode) string {
	if mode == 0o555 {
		return filepath.Join(s.root, "runfiles", "sha256")
	}
	return filepath.Join(s.root, "runfiles", fmt.Sprintf("sha256-%04o", uint32(mode.Perm())))
}

func (s *Store) statDir() string  { return filepath.Join(s.root, "runfiles", "stat") }
func (s *Store) treesDir() string { return filepath.Join(s.root, "runfiles", "trees") }
func (s *Store) tmpDir() string   { return filepath.Join(s.root, "runfiles", "tmp") }

// ObjectPath is where the store keeps content sha256Hex (lowercase hex) for
// a file with host mode hostMode. Every object is named by its digest alone;
// objects of each mode (objectMode) live in a directory of their own
// because a tree's hard link shares its object's mode.
func (s *Store) ObjectPath(sha256Hex string, hostMode uint32) string {
	return s.object(sha256Hex, 0, hostMode).path
}

// TreePath is where the tree of the manifest with digest manifestDigest
// ("sha256:<hex>" or "<hex>") is, once assembled.
func (s *Store) TreePath(manifestDigest string) string {
	return filepath.Join(s.treesDir(), strings.TrimPrefix(manifestDigest, "sha256:"))
}

// objectMode is the mode of a store object (and tree file) for a host
// mode: read-only; its owner (the store's owner, who read the host file)
// may read it, and execute it when the host mode has any execute bit; its
// group and everyone else get what the host file gives others, read and
// execute bits only. 0755 → 0555, 0644 → 0444, 0750 → 0500, 0640 and
// 0600 → 0400. The object's owner and group are the store's, not the host
// file's, so its group is given no more than others: nobody but the
// store's owner gains access the host file did not give them (a
// container's user, always another uid, gets exactly what other users of
// the host get).
func objectMode(hostMode uint32) fs.FileMode {
	others := fs.FileMode(hostMode) & 0o005
	mode := 0o400 | others<<3 | others
	if hostMode&0o111 != 0 {
		mode |= 0o100
	}
	return mode
}

// objectModes are every mode objectMode returns: each has its objects
// directory, because a tree's hard link shares its object's mode.
var objectModes = []fs.FileMode{0o555, 0o444, 0o544, 0o511, 0o500, 0o400}

// statRecord is one stat-cache entry.
type statRecord struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// ReadNS is when the read that produced SHA256 started.
	ReadNS int64 `json:"read_ns"`
	// Object is the seal of the store object holding SHA256, as last
	// checked through this entry (zero: unknown, the object is hashed).
	Object objectSeal `json:"object"`
}

// lookupStat returns the entry recorded for key. trusted reports whether
// its digest can be believed without reading the host file; an untrusted
// entry (racily clean) still tells the seal of the object it names.
func (s *Store) lookupStat(key statKey) (r statRecord, found, trusted bool) {
	if !key.usable() {
		return statRecord{}, false, false
	}
	b, err := readRecord(filepath.Join(s.statDir(), key.String()))
	if err != nil {
		return statRecord{}, false, false
	}
	if json.Unmarshal(b, &r) != nil || len(r.SHA256) != 64 || r.Size != key.Size {
		return statRecord{}, false, false
	}
	if _, err := hex.DecodeString(r.SHA256); err != nil {
		return statRecord{}, false, false
	}
	// Racily clean: the file may have changed within its ctime's tick.
	return r, true, key.CtimeNS <= r.ReadNS-int64(RacyWindow)
}

// recordStat writes a stat-cache entry: a new one in place (one write of
// a few hundred bytes: a reader sees all of it or an empty or cut file,
// which does not parse, as does one a crash left: a miss), one replacing
// another through a temporary file and a rename. Not fsynced: an entry
// lost in a crash only costs a read.
func (s *Store) recordStat(key statKey, r statRecord) error {
	if !key.usable() {
		return nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	path := filepath.Join(s.statDir(), key.String())
	if err := writeNew(path, b); !errors.Is(err, fs.ErrExist) {
		return err
	}
	f, err := os.CreateTemp(s.tmpDir(), "stat-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// objectState is the outcome of checking a store object.
type objectState int

const (
	objectOK objectState = iota
	objectMissing
	objectDamaged
)

// storeObject is a store object as a manifest entry expects it.
type storeObject struct {
	path string // in objectsDir(mode)
	sha  string
	size int64
	mode fs.FileMode
}

// object is where the store keeps content sha of size bytes for a file
// with host mode hostMode.
func (s *Store) object(sha string, size int64, hostMode uint32) storeObject {
	mode := objectMode(hostMode)
	return storeObject{path: filepath.Join(s.objectsDir(mode), sha), sha: sha, size: size, mode: mode}
}

// statMismatch says what in fi, the object's stat, no intact object can
// have; "" when nothing.
func (o storeObject) statMismatch(fi fs.FileInfo) string {
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Sprintf("not a regular file (%v)", fi.Mode().Type())
	case fi.Mode() != o.mode:
		return fmt.Sprintf("mode %v, want %v", fi.Mode(), o.mode)
	case fi.Size() != o.size:
		return fmt.Sprintf("size %d, want %d", fi.Size(), o.size)
	case !fi.ModTime().Equal(sealTime):
		return fmt.Sprintf("mtime %s, not the seal time", fi.ModTime().UTC().Format(time.RFC3339Nano))
	}
	return ""
}

// objectSeal is what the kernel said about an object's inode when its
// content was last known to match its name: just stored from a verified
// read, re-hashed and found intact, or linked into a tree Assemble built
// (a link changes the ctime, so the seal is taken again after it). It is
// kept in the stat-cache entry of each host file the object holds. Any
// write moves the ctime, and user space cannot set a ctime back, so an
// object edited in place and given back its size, mode and seal mtime no
// longer matches its seal. Its owner can still rewrite the seal itself:
// only VerifyFull, which re-hashes, holds against that.
type objectSeal struct {
	Dev     uint64      `json:"dev"`
	Ino     uint64      `json:"ino"`
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"mode"`
	MtimeNS int64       `json:"mtime_ns"`
	CtimeNS int64       `json:"ctime_ns"`
}

func sealOf(fi fs.FileInfo) objectSeal {
	k := statKeyOf(fi)
	return objectSeal{Dev: k.Dev, Ino: k.Ino, Size: k.Size, Mode: fi.Mode(), MtimeNS: k.MtimeNS, CtimeNS: k.CtimeNS}
}

// matches reports whether fi, an object's stat now, is this seal. A seal
// without an inode or a ctime (unknown, or not Linux) matches nothing.
func (seal objectSeal) matches(fi fs.FileInfo) bool {
	return seal.Ino != 0 && seal.CtimeNS != 0 && sealOf(fi) == seal
}

// objectCheck is the outcome of checking a store object.
type objectCheck struct {
	state    objectState
	fi       fs.FileInfo // the object's stat, when present: its seal if intact
	rehashed bool        // its content was read and hashed
	why      string      // what is wrong with a damaged object
}

// checkObject checks the store object o: its stat against what every
// intact object has, then against seal; when the seal differs (or with
// full) its content is hashed. The caller records fi of an intact object
// as its seal.
func checkObject(o storeObject, seal objectSeal, full bool) (objectCheck, error) {
	fi, err := os.Lstat(o.path)
	if errors.Is(err, fs.ErrNotExist) {
		return objectCheck{state: objectMissing}, nil
	}
	if err != nil {
		return objectCheck{}, err
	}
	if why := o.statMismatch(fi); why != "" {
		return objectCheck{state: objectDamaged, fi: fi, why: why}, nil
	}
	sealed := seal.matches(fi)
	if sealed && !full {
		return objectCheck{state: objectOK, fi: fi}, nil
	}
	// Hash the inode that is open, and judge (and seal) its stat from
	// before the read: a write during the read moves the ctime past it.
	f, err := openNoFollow(o.path)
	if errors.Is(err, fs.ErrNotExist) {
		return objectCheck{state: objectMissing}, nil
	}
	if err != nil {
		return objectCheck{}, err
	}
	defer f.Close()
	opened, err := f.Stat()
	if err != nil {
		return objectCheck{}, err
	}
	c := objectCheck{fi: opened, rehashed: true}
	if why := o.statMismatch(opened); why != "" {
		c.state, c.why = objectDamaged, why
		return c, nil
	}
	got, err := hashOf(f)
	if err != nil {
		return objectCheck{}, err
	}
	if got != o.sha {
		c.state, c.why = objectDamaged, "content hashes to "+got
		if sealed {
			c.why += ", although its seal matches (rewritten too)"
		}
	}
	return c, nil
}

// hashFile returns the lowercase hex sha256 of the file at path.
func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return hashOf(f)
}

// onlyReader hides a source's WriterTo (os.File has one), which
// io.CopyBuffer would use instead of the buffer it is given.
type onlyReader struct{ io.Reader }

// hashOf returns the lowercase hex sha256 of what r holds.
func hashOf(r io.Reader) (string, error) {
	buf := copyBufs.Get().(*[copyBufSize]byte)
	defer copyBufs.Put(buf)
	h := sha256.New()
	if _, err := io.CopyBuffer(h, onlyReader{r}, buf[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// stored is the outcome of putting one host file in the store.
type stored struct {
	sha      string
	size     int64
	object   fs.FileInfo // lstat of the object used: its seal
	record   statRecord  // the stat-cache entry for the host file
	dirty    bool        // record differs from what the stat cache holds
	hashed   bool        // the host file was read
	copied   int64       // bytes that became a new object
	reused   int64       // bytes served by an object already present
	rehashed bool        // an existing object was read to check it
	repair   *Repair     // a damaged object was replaced
}

// put makes sure the store holds the host file path, whose stat must
// still be key (what the closure analysed), and returns its digest and
// the stat-cache entry to record for it (when dirty: statWrites). A file
// whose object must be written comes back staged instead: read into a
// temporary file, waiting for the store to be synced (syncStaged) and for
// its name (commit).
func (s *Store) put(ctx context.Context, path string, key statKey, hostMode uint32, verify Verify) (stored, *staged, error) {
	full := verify == VerifyFull
	r, found, trusted := s.lookupStat(key)
	var repair *Repair
	rehashed := false
	if trusted {
		o := s.object(r.SHA256, r.Size, hostMode)
		c, err := checkObject(o, r.Object, full)
		if err != nil {
			return stored{}, nil, err
		}
		rehashed = c.rehashed
		if c.state == objectOK {
			st := stored{sha: r.SHA256, size: r.Size, object: c.fi, record: r, reused: r.Size, rehashed: rehashed}
			st.dirty = st.record.seal(c.fi)
			return st, nil, nil
		}
		if c.state == objectDamaged {
			repair = &Repair{Path: path, Object: o.path, Reason: c.why}
		}
		found = false // its seal is of the damaged object
	}
	stg, err := s.stage(ctx, path, key, hostMode)
	if err != nil {
		return stored{}, nil, err
	}
	if found {
		stg.hint = r.Object
	}
	stg.full, stg.repair, stg.rehashed = full, repair, rehashed
	return stored{}, stg, nil
}

// seal sets fi, the stat of an intact object, as the seal of r, and
// reports whether that changed r.
func (r *statRecord) seal(fi fs.FileInfo) bool { return r.setSeal(sealOf(fi)) }

func (r *statRecord) setSeal(seal objectSeal) bool {
	if r.Object == seal {
		return false
	}
	r.Object = seal
	return true
}

// statWrites are the stat-cache entries an assembly changes. They are
// written once, at its end (writeStats), with the seal each object has
// by then: a new tree's links move every object's ctime, and writing each
// entry when its file is stored and again when it is sealed after the
// links was a third of the system time of a first assembly.
type statWrites struct {
	mu sync.Mutex
	m  map[statKey]statRecord
}

func (w *statWrites) set(key statKey, r statRecord) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = make(map[statKey]statRecord)
	}
	w.m[key] = r
}

// writeStats writes the entries of w.
func (s *Store) writeStats(ctx context.Context, w *statWrites) error {
	keys := slices.Collect(maps.Keys(w.m))
	return parallel(ctx, len(keys), func(_ context.Context, i int) error {
		r := w.m[keys[i]]
		if err := s.recordStat(keys[i], r); err != nil {
			return fmt.Errorf("recording the digest of %s in the stat cache: %w", r.SHA256, err)
		}
		return nil
	})
}

// staged is a host file read once into a temporary file of the store,
// every byte read going both into sha256 and into the file, which has its
// object's mode and the seal mtime: an object waiting for its name.
type staged struct {
	path     string // the host file
	tmp      string // the temporary file, until commit removes the name
	tmpStat  fs.FileInfo
	hostMode uint32
	sha      string
	size     int64
	readNS   int64
	hint     objectSeal // what the stat cache knew of an existing object's seal
	full     bool       // VerifyFull: an existing object is re-hashed
	repair   *Repair    // what put's first look found wrong with the object
	rehashed bool       // put's first look read the object
}

// stage reads the host file path (whose stat must still be key) into a
// temporary file of the store. What is stored is exactly what was hashed.
// The file is not synced: syncStaged syncs every staged file at once, a
// single journal commit instead of one per file (which was half of the
// time of a first assembly of 20,000 files).
func (s *Store) stage(ctx context.Context, path string, key statKey, hostMode uint32) (*staged, error) {
	src, err := openNoFollow(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return nil, err
	}
	if statKeyOf(fi) != key {
		return nil, fmt.Errorf("%w: %s", ErrSourceChanged, path)
	}
	readStart := time.Now()
	tmp, err := createTemp(s.tmpDir(), "obj-")
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	n, err := copyHashed(ctx, tmp, src, h)
	if err == nil {
		err = tmp.Chmod(objectMode(hostMode))
	}
	if err == nil {
		err = os.Chtimes(tmp.Name(), sealTime, sealTime)
	}
	var tmpStat fs.FileInfo
	if err == nil {
		tmpStat, err = tmp.Stat()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if after, serr := src.Stat(); serr != nil || statKeyOf(after) != key || n != key.Size {
			err = fmt.Errorf("%w: %s changed while it was read", ErrSourceChanged, path)
		}
	}
	if err != nil {
		os.Remove(tmp.Name())
		if errors.Is(err, ErrSourceChanged) {
			return nil, err
		}
		return nil, fmt.Errorf("storing %s: %w", path, err)
	}
	return &staged{path: path, tmp: tmp.Name(), tmpStat: tmpStat, hostMode: hostMode, sha: hex.EncodeToString(h.Sum(nil)),
		size: n, readNS: readStart.UnixNano()}, nil
}

// syncStaged makes the staged files durable (their data, mode and seal
// mtime) before any of them has its object's name.
func (s *Store) syncStaged(files []*staged) error {
	if err := syncFilesystem(s.tmpDir(), func(yield func(string) bool) {
		for _, f := range files {
			if !yield(f.tmp) {
				return
			}
		}
	}); err != nil {
		return fmt.Errorf("syncing the objects stored: %w", err)
	}
	return nil
}

// commit gives the staged file st its object's name (linked; when an
// object of that name exists, it is checked and kept if intact, replaced
// if damaged) and removes its temporary name.
func (s *Store) commit(st *staged) (stored, error) {
	tmpGone := false
	defer func() {
		if !tmpGone {
			os.Remove(st.tmp)
		}
	}()
	o := s.object(st.sha, st.size, st.hostMode)
	res := stored{sha: st.sha, size: st.size, hashed: true, rehashed: st.rehashed, dirty: true,
		record: statRecord{SHA256: st.sha, Size: st.size, ReadNS: st.readNS}}
	placed := false
	switch err := os.Link(st.tmp, o.path); {
	case err == nil:
		res.copied, placed = st.size, true
		os.Remove(st.tmp) // before sealing: an unlink changes the ctime
		tmpGone = true
	case errors.Is(err, fs.ErrExist):
		c, err := checkObject(o, st.hint, st.full)
		if err != nil {
			return stored{}, err
		}
		res.rehashed = res.rehashed || c.rehashed
		if c.state == objectOK {
			res.reused, res.object = st.size, c.fi
			break
		}
		// Damaged: replace it atomically with what was just verified.
		if err := os.Rename(st.tmp, o.path); err != nil {
			return stored{}, err
		}
		tmpGone = true
		res.copied, placed = st.size, true
		if c.state == objectDamaged {
			res.repair = &Repair{Path: st.path, Object: o.path, Reason: c.why}
			if st.repair != nil { // say what the first look found
				res.repair = st.repair
			}
		}
	default:
		return stored{}, fmt.Errorf("storing %s: %w", st.path, err)
	}
	if placed {
		var err error
		if res.object, err = os.Lstat(o.path); err != nil {
			return stored{}, err
		}
		if os.SameFile(st.tmpStat, res.object) {
			res.record.Object = sealOf(res.object)
		} // else another assembler replaced it since: the next check hashes it
	} else {
		res.record.Object = sealOf(res.object)
	}
	return res, nil
}

// copyHashed copies src to dst through h: each buffer read is hashed and
// written, so the copy and the digest come from the same read.
func copyHashed(ctx context.Context, dst io.Writer, src io.Reader, h hash.Hash) (int64, error) {
	pooled := copyBufs.Get().(*[copyBufSize]byte)
	defer copyBufs.Put(pooled)
	buf := pooled[:]
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		m, rerr := src.Read(buf)
		if m > 0 {
			h.Write(buf[:m])
			if _, err := dst.Write(buf[:m]); err != nil {
				return n, err
			}
			n += int64(m)
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// syncDir fsyncs a directory, so names linked into it survive a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
