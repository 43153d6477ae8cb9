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
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"hookbox.dev/hookbox/internal/host"
)

// sealTime is the modification time of every store object (and so of every
// tree file, which shares its inode). Any write moves it, so the quick check
// notices a modified object with one lstat.
var sealTime = time.Unix(1, 0)

// racyWindow: a stat-cache entry is trusted only when the file's ctime is
// this much older than the moment its content was read. A write within the
// same timestamp tick as an earlier one, leaving the size unchanged, would
// otherwise go unseen on filesystems with coarse timestamps.
const racyWindow = 2 * time.Second

// copyBufSize is the read size when storing a file.
const copyBufSize = 1 << 20

// DefaultStateDir is hookbox's state directory: /var/lib/hookbox for root,
// else $XDG_DATA_HOME/hookbox, else ~/.local/share/hookbox. It is "" when
// none of these can be determined (no home directory).
func DefaultStateDir() string {
	if host.RealRoot() {
		return "/var/lib/hookbox"
	}
	if x := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "hookbox")
	}
	home, err := os.UserHomeDir()
	if err != nil || !filepath.IsAbs(home) {
		return ""
	}
	return filepath.Join(home, ".local", "share", "hookbox")
}

// Store is a content-addressed store of runfiles and the trees assembled
// from it, under one root directory (see the package doc for the layout).
// A Store is safe for concurrent use, and several processes may share one
// root.
type Store struct {
	root string
}

// OpenStore opens (creating as needed) the store under root, typically
// DefaultStateDir().
func OpenStore(root string) (*Store, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("runfiles: %w: store root %q is not an absolute path", ErrUnsupported, root)
	}
	s := &Store{root: filepath.Clean(root)}
	for _, d := range []string{s.objectsDir(0o555), s.objectsDir(0o444), s.statDir(), s.treesDir(), s.tmpDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("runfiles: opening store: %w", err)
		}
	}
	return s, nil
}

// Root is the directory the store was opened at.
func (s *Store) Root() string { return s.root }

// objectsDir is the directory of objects with the given mode: sha256 for
// executables (0555), sha256-0444 for the rest.
func (s *Store) objectsDir(mode fs.FileMode) string {
	if mode == 0o555 {
		return filepath.Join(s.root, "runfiles", "sha256")
	}
	return filepath.Join(s.root, "runfiles", "sha256-0444")
}

func (s *Store) statDir() string  { return filepath.Join(s.root, "runfiles", "stat") }
func (s *Store) treesDir() string { return filepath.Join(s.root, "runfiles", "trees") }
func (s *Store) tmpDir() string   { return filepath.Join(s.root, "runfiles", "tmp") }

// ObjectPath is where the store keeps content sha256Hex (lowercase hex) for
// a file with host mode hostMode. Every object is named by its digest alone;
// executables (any x bit in hostMode) and other files live in separate
// directories because a tree's hard link shares its object's mode.
func (s *Store) ObjectPath(sha256Hex string, hostMode uint32) string {
	return filepath.Join(s.objectsDir(objectMode(hostMode)), sha256Hex)
}

// TreePath is where the tree of the manifest with digest manifestDigest
// ("sha256:<hex>" or "<hex>") is, once assembled.
func (s *Store) TreePath(manifestDigest string) string {
	return filepath.Join(s.treesDir(), strings.TrimPrefix(manifestDigest, "sha256:"))
}

// objectMode is the mode of a store object (and tree file) for a host mode.
func objectMode(hostMode uint32) fs.FileMode {
	if hostMode&0o111 != 0 {
		return 0o555
	}
	return 0o444
}

// statRecord is one stat-cache entry.
type statRecord struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// ReadNS is when the read that produced SHA256 started.
	ReadNS int64 `json:"read_ns"`
}

// lookupStat returns the digest recorded for key, if it can be trusted.
func (s *Store) lookupStat(key statKey) (statRecord, bool) {
	if !key.usable() {
		return statRecord{}, false
	}
	b, err := os.ReadFile(filepath.Join(s.statDir(), key.String()))
	if err != nil {
		return statRecord{}, false
	}
	var r statRecord
	if json.Unmarshal(b, &r) != nil || len(r.SHA256) != 64 || r.Size != key.Size {
		return statRecord{}, false
	}
	if _, err := hex.DecodeString(r.SHA256); err != nil {
		return statRecord{}, false
	}
	if key.CtimeNS > r.ReadNS-int64(racyWindow) {
		return statRecord{}, false // racily clean: read again
	}
	return r, true
}

// recordStat writes a stat-cache entry (temporary file, then rename).
func (s *Store) recordStat(key statKey, r statRecord) error {
	if !key.usable() {
		return nil
	}
	b, err := json.Marshal(r)
	if err != nil {
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
		err = os.Rename(f.Name(), filepath.Join(s.statDir(), key.String()))
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

// checkObject checks the store object at path against the expected size,
// mode and, with full, content.
func checkObject(path string, size int64, mode fs.FileMode, sha string, full bool) (objectState, fs.FileInfo, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return objectMissing, nil, nil
	}
	if err != nil {
		return 0, nil, err
	}
	if !fi.Mode().IsRegular() || fi.Mode() != mode || fi.Size() != size || !fi.ModTime().Equal(sealTime) {
		return objectDamaged, fi, nil
	}
	if full {
		got, err := hashFile(path)
		if err != nil {
			return 0, nil, err
		}
		if got != sha {
			return objectDamaged, fi, nil
		}
	}
	return objectOK, fi, nil
}

// hashFile returns the lowercase hex sha256 of the file at path.
func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, f, make([]byte, copyBufSize)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// stored is the outcome of putting one host file in the store.
type stored struct {
	sha    string
	size   int64
	object fs.FileInfo // lstat of the object used
	hashed bool        // the host file was read
	copied int64       // bytes that became a new object
	reused int64       // bytes served by an object already present
	repair bool        // a damaged object was replaced
}

// put makes sure the store holds the host file path, whose stat must
// still be key (what the closure analysed), and returns its digest.
func (s *Store) put(ctx context.Context, path string, key statKey, hostMode uint32, verify Verify) (stored, error) {
	mode := objectMode(hostMode)
	repair := false
	if r, ok := s.lookupStat(key); ok {
		state, fi, err := checkObject(s.ObjectPath(r.SHA256, hostMode), r.Size, mode, r.SHA256, verify == VerifyFull)
		if err != nil {
			return stored{}, err
		}
		if state == objectOK {
			return stored{sha: r.SHA256, size: r.Size, object: fi, reused: r.Size}, nil
		}
		repair = state == objectDamaged
	}
	st, err := s.ingest(ctx, path, key, hostMode, verify)
	st.repair = st.repair || repair
	return st, err
}

// ingest reads the host file once, sending every byte both into sha256 and
// into a temporary file in the store, and links that file to its digest
// name. What is stored is exactly what was hashed.
func (s *Store) ingest(ctx context.Context, path string, key statKey, hostMode uint32, verify Verify) (stored, error) {
	mode := objectMode(hostMode)
	src, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return stored{}, err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return stored{}, err
	}
	if statKeyOf(fi) != key {
		return stored{}, fmt.Errorf("%w: %s", ErrSourceChanged, path)
	}
	readStart := time.Now()
	tmp, err := os.CreateTemp(s.tmpDir(), "obj-*")
	if err != nil {
		return stored{}, err
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // after a successful link or rename it is gone or a second name
	h := sha256.New()
	n, err := copyHashed(ctx, tmp, src, h)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil {
		err = os.Chtimes(tmpName, sealTime, sealTime)
	}
	if err == nil {
		err = tmp.Sync() // data, mode and seal are durable before the object has its name
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return stored{}, fmt.Errorf("storing %s: %w", path, err)
	}
	if after, err := src.Stat(); err != nil || statKeyOf(after) != key || n != key.Size {
		return stored{}, fmt.Errorf("%w: %s changed while it was read", ErrSourceChanged, path)
	}
	sha := hex.EncodeToString(h.Sum(nil))
	obj := s.ObjectPath(sha, hostMode)
	st := stored{sha: sha, size: n, hashed: true}
	switch err := os.Link(tmpName, obj); {
	case err == nil:
		st.copied = n
	case errors.Is(err, fs.ErrExist):
		state, _, err := checkObject(obj, n, mode, sha, verify == VerifyFull)
		if err != nil {
			return stored{}, err
		}
		if state == objectOK {
			st.reused = n
			break
		}
		// Damaged: replace it atomically with what was just verified.
		if err := os.Rename(tmpName, obj); err != nil {
			return stored{}, err
		}
		st.copied, st.repair = n, true
	default:
		return stored{}, fmt.Errorf("storing %s: %w", path, err)
	}
	if st.object, err = os.Lstat(obj); err != nil {
		return stored{}, err
	}
	if err := s.recordStat(key, statRecord{SHA256: sha, Size: n, ReadNS: readStart.UnixNano()}); err != nil {
		return stored{}, fmt.Errorf("recording %s: %w", path, err)
	}
	return st, nil
}

// copyHashed copies src to dst through h: each buffer read is hashed and
// written, so the copy and the digest come from the same read.
func copyHashed(ctx context.Context, dst io.Writer, src io.Reader, h hash.Hash) (int64, error) {
	buf := make([]byte, copyBufSize)
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
