package runfiles

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
)

// assemblyIndex is what the last assembly of the same inputs found (see
// the package doc, "Index"): the stat key and digest of every host file,
// the manifest digest, and the seal of every entry of its tree, taken when
// the tree was verified. It lets an assembly of an unchanged host verify
// everything with one stat per host file and one per tree entry.
type assemblyIndex struct {
	digest string   // hex manifest digest: the tree is TreePath(digest)
	root   treeSeal // the tree's root directory
	tree   []sealedEntry
	host   []hostRecord
}

// sealedEntry is one manifest entry's tree path and the seal of what was
// there when the tree was verified; a zero seal (nothing to trust) matches
// nothing.
type sealedEntry struct {
	path string
	seal treeSeal
}

// treeSeal is what the kernel said of a tree entry's inode when the tree
// was verified: any change to the inode (a write, chmod, link or unlink)
// or to a directory's entries moves its ctime, which user space cannot set
// back. A file's inode is its store object's, so its seal covers the
// object too.
type treeSeal struct {
	Dev, Ino         uint64
	Mode             uint32 // st_mode: type and permission bits
	Size             int64
	MtimeNS, CtimeNS int64
}

// hostRecord is one file entry of the closure (in path order): the stat key
// it had, when its content was read (the stat cache's racy-window rule
// applies), and its digest.
type hostRecord struct {
	path   string
	key    statKey
	readNS int64
	sha    [sha256.Size]byte
}

func (r hostRecord) trusted() bool {
	return r.key.usable() && r.key.CtimeNS <= r.readNS-int64(racyWindow)
}

// indexMagic starts every index file; a format change changes it, and a
// file of another format is ignored (the next assembly rewrites it).
const indexMagic = "hookbox runfiles index 1\n"

// indexKey names the index of an assembly: the sha256 of every input that
// shapes its closure and manifest.
func indexKey(programs []string, opts Options) string {
	sorted := slices.Clone(programs)
	slices.Sort(sorted)
	packages := slices.Clone(opts.Packages)
	slices.Sort(packages)
	b, _ := json.Marshal(struct {
		Programs, Packages, Dirs []string
		Path                     string
		TreeELF, ContainerPaths  bool
		Placed                   map[string]string
	}{slices.Compact(sorted), slices.Compact(packages), opts.Dirs, opts.Path, opts.TreeELF, opts.ContainerPaths, opts.Placed})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func (s *Store) indexDir() string { return filepath.Join(s.root, "runfiles", "index") }

// loadIndex returns the index stored under key, or nil when there is none
// or it cannot be read: the assembly then does without it.
func (s *Store) loadIndex(key string) *assemblyIndex {
	b, err := os.ReadFile(filepath.Join(s.indexDir(), key))
	if err != nil {
		return nil
	}
	idx, err := decodeIndex(b)
	if err != nil {
		return nil
	}
	return idx
}

// saveIndex writes idx under key (temporary file, then rename; not
// fsynced: an index lost in a crash costs one assembly without it).
func (s *Store) saveIndex(key string, idx *assemblyIndex) error {
	f, err := os.CreateTemp(s.tmpDir(), "index-*")
	if err != nil {
		return err
	}
	_, err = f.Write(idx.encode())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(s.indexDir(), key))
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing the assembly index: %w", err)
	}
	return nil
}

// encode writes the index: the magic, the digest, the root's seal, the
// tree entries and the host records (paths front-coded against the
// previous one: both lists are sorted), and a CRC-32C of all of it, so a
// truncated or damaged file is never mistaken for a smaller index.
func (idx *assemblyIndex) encode() []byte {
	b := make([]byte, 0, 64+len(idx.tree)*40+len(idx.host)*80)
	b = append(b, indexMagic...)
	digest, _ := hex.DecodeString(idx.digest)
	b = append(b, digest...)
	b = idx.root.append(b)
	b = binary.AppendUvarint(b, uint64(len(idx.tree)))
	prev := ""
	for _, e := range idx.tree {
		b = appendPath(b, prev, e.path)
		b = e.seal.append(b)
		prev = e.path
	}
	b = binary.AppendUvarint(b, uint64(len(idx.host)))
	prev = ""
	for _, r := range idx.host {
		b = appendPath(b, prev, r.path)
		b = binary.AppendUvarint(b, r.key.Dev)
		b = binary.AppendUvarint(b, r.key.Ino)
		b = binary.AppendVarint(b, r.key.Size)
		b = binary.AppendVarint(b, r.key.MtimeNS)
		b = binary.AppendVarint(b, r.key.CtimeNS)
		b = binary.AppendVarint(b, r.readNS)
		b = append(b, r.sha[:]...)
		prev = r.path
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (seal treeSeal) append(b []byte) []byte {
	b = binary.AppendUvarint(b, seal.Dev)
	b = binary.AppendUvarint(b, seal.Ino)
	b = binary.AppendUvarint(b, uint64(seal.Mode))
	b = binary.AppendVarint(b, seal.Size)
	b = binary.AppendVarint(b, seal.MtimeNS)
	return binary.AppendVarint(b, seal.CtimeNS)
}

// appendPath writes p as the length of its common prefix with prev and
// the rest.
func appendPath(b []byte, prev, p string) []byte {
	n := 0
	for n < len(prev) && n < len(p) && prev[n] == p[n] {
		n++
	}
	b = binary.AppendUvarint(b, uint64(n))
	b = binary.AppendUvarint(b, uint64(len(p)-n))
	return append(b, p[n:]...)
}

var errBadIndex = errors.New("not a runfiles index")

// decodeIndex reads what encode wrote; anything else is errBadIndex.
func decodeIndex(b []byte) (*assemblyIndex, error) {
	if len(b) < len(indexMagic)+sha256.Size+4 || !bytes.HasPrefix(b, []byte(indexMagic)) {
		return nil, errBadIndex
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, errBadIndex
	}
	d := indexDecoder{b: body[len(indexMagic):]}
	idx := &assemblyIndex{digest: hex.EncodeToString(d.bytes(sha256.Size))}
	idx.root = d.seal()
	// Every path goes into one buffer, made one string at the end: 40,000
	// small strings would cost more than the rest of the decoding.
	var paths pathArena
	n := d.count()
	idx.tree = make([]sealedEntry, n)
	treePaths := make([]span, n)
	for i := range idx.tree {
		treePaths[i] = d.path(&paths)
		idx.tree[i].seal = d.seal()
	}
	n = d.count()
	idx.host = make([]hostRecord, n)
	hostPaths := make([]span, n)
	paths.prev = span{}
	for i := range idx.host {
		hostPaths[i] = d.path(&paths)
		r := &idx.host[i]
		r.key = statKey{Dev: d.uvarint(), Ino: d.uvarint(), Size: d.varint(), MtimeNS: d.varint(), CtimeNS: d.varint()}
		r.readNS = d.varint()
		copy(r.sha[:], d.bytes(sha256.Size))
	}
	if d.err != nil || len(d.b) != 0 {
		return nil, errBadIndex
	}
	all := string(paths.buf)
	for i, sp := range treePaths {
		idx.tree[i].path = all[sp.start:sp.end]
	}
	for i, sp := range hostPaths {
		idx.host[i].path = all[sp.start:sp.end]
	}
	return idx, nil
}

// pathArena holds decoded paths back to back; prev is the last one, which
// the next is front-coded against.
type pathArena struct {
	buf  []byte
	prev span
}

type span struct{ start, end int }

// indexDecoder reads an index body; the first error sticks and every later
// read returns zero values.
type indexDecoder struct {
	b   []byte
	err error
}

func (d *indexDecoder) fail() { d.err, d.b = errBadIndex, nil }

func (d *indexDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *indexDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *indexDecoder) bytes(n uint64) []byte {
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

// count reads a list length, at most what the rest of the input can hold
// (each element takes at least one byte), so damage cannot make it
// allocate more.
func (d *indexDecoder) count() uint64 {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return 0
	}
	return n
}

// path reads a front-coded path into the arena.
func (d *indexDecoder) path(a *pathArena) span {
	keep, n := d.uvarint(), d.uvarint()
	if keep > uint64(a.prev.end-a.prev.start) {
		d.fail()
		return span{}
	}
	start := len(a.buf)
	a.buf = append(a.buf, a.buf[a.prev.start:a.prev.start+int(keep)]...)
	a.buf = append(a.buf, d.bytes(n)...)
	a.prev = span{start, len(a.buf)}
	return a.prev
}

func (d *indexDecoder) seal() treeSeal {
	s := treeSeal{Dev: d.uvarint(), Ino: d.uvarint()}
	mode := d.uvarint()
	if mode > 1<<32-1 {
		d.fail()
	}
	s.Mode = uint32(mode)
	s.Size, s.MtimeNS, s.CtimeNS = d.varint(), d.varint(), d.varint()
	return s
}

// shaHex is the record's digest as the manifest writes it.
func (r hostRecord) shaHex() string { return hex.EncodeToString(r.sha[:]) }

// hostRecordOf is the host record of the closure's file path, whose digest
// came from the stat-cache entry r.
func hostRecordOf(path string, key statKey, r statRecord) hostRecord {
	h := hostRecord{path: path, key: key, readNS: r.ReadNS}
	if len(r.SHA256) != hex.EncodedLen(sha256.Size) {
		h.readNS = 0 // never trusted
	} else if _, err := hex.Decode(h.sha[:], []byte(r.SHA256)); err != nil {
		h.readNS = 0
	}
	return h
}
