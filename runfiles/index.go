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
	"unsafe"

	"hookbox.dev/hookbox/render"
)

// assemblyIndex is what the last assembly of the same inputs found (see
// the package doc, "Index"): its closure, with the stat key and digest of
// every host file, the manifest digest, and the seal of every entry of
// its tree, taken when the tree was verified. It lets an assembly of an
// unchanged host verify everything with one stat per host file and one
// per tree entry.
type assemblyIndex struct {
	digest string   // hex manifest digest: the tree is TreePath(digest)
	root   treeSeal // the tree's root directory
	plan   []plannedEntry
	// seals are those of the manifest's entries, in its order. The
	// manifest is not stored: it is the plan laid out as Assemble lays it
	// out (relocation, from the inputs the index is named by).
	seals []treeSeal
}

// treeSeal is what the kernel said of a tree entry's inode when the tree
// was verified: any change to the inode (a write, chmod, link or unlink)
// or to a directory's entries moves its ctime, which user space cannot set
// back. A file's inode is its store object's, so its seal covers the
// object too. A zero seal (nothing to trust) matches nothing.
type treeSeal struct {
	Dev, Ino         uint64
	Mode             uint32 // st_mode: type and permission bits
	Size             int64
	MtimeNS, CtimeNS int64
}

// plannedEntry is one entry of the closure (host paths, sorted) as the
// indexed assembly found it; a file also has the stat key it had, when
// its content was read (the stat cache's racy-window rule applies), and
// its digest. The manifest is a function of these and of the inputs the
// index is named by, so a closure with the same entries has the indexed
// manifest, digest included.
type plannedEntry struct {
	path   string
	typ    entryType
	mode   uint32
	target string
	key    statKey
	readNS int64
	sha    string // lowercase hex
}

// entryType is a manifest entry type as the index writes it.
type entryType byte

var entryTypes = []string{render.RunfileFile, render.RunfileDir, render.RunfileSymlink}

func (t entryType) String() string {
	if int(t) < len(entryTypes) {
		return entryTypes[t]
	}
	return ""
}

func (r *plannedEntry) trusted() bool {
	return r.key.usable() && r.key.CtimeNS <= r.readNS-int64(RacyWindow)
}

// matches reports whether e, an entry of a closure, is r.
func (r *plannedEntry) matches(e render.Runfile) bool {
	return e.Path == r.path && e.Type == r.typ.String() && e.Mode == r.mode && e.Target == r.target
}

// plannedEntryOf is the index's entry for e, an entry of the closure with
// its digest (for a file: with the stat key it had and when its content
// was read).
func plannedEntryOf(e render.Runfile, key statKey, readNS int64) (plannedEntry, error) {
	t := slices.Index(entryTypes, e.Type)
	if t < 0 {
		return plannedEntry{}, fmt.Errorf("%w: entry %s has type %q", ErrUnsupported, e.Path, e.Type)
	}
	p := plannedEntry{path: e.Path, typ: entryType(t), mode: e.Mode, target: e.Target}
	if e.Type == render.RunfileFile {
		p.key, p.readNS, p.sha = key, readNS, e.SHA256
		if !validSHA256(p.sha) {
			p.readNS = 0 // never trusted (decodeIndex, behind the CRC, takes what was written)
		}
	}
	return p, nil
}

// manifestOf is the manifest of the indexed assembly: the closure's
// entries with their digests, laid out as opts lays them out.
func (idx *assemblyIndex) manifestOf(opts Options) []render.Runfile {
	m := make([]render.Runfile, len(idx.plan))
	for i, r := range idx.plan {
		m[i] = render.Runfile{Path: r.path, Type: r.typ.String(), Mode: r.mode, Target: r.target}
		if r.typ.String() == render.RunfileFile {
			m[i].Size, m[i].SHA256 = r.key.Size, r.sha
		}
	}
	if opts.ContainerPaths {
		m = relocate(m, map[string]struct{}(nil), opts.Dirs, opts.Placed)
	}
	return m
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
	idx, err := decodeIndex(s.readIndex(key))
	if err != nil {
		return nil
	}
	return idx
}

// readIndex returns the bytes of the index stored under key; nil when
// there is none.
func (s *Store) readIndex(key string) []byte {
	b, err := os.ReadFile(filepath.Join(s.indexDir(), key))
	if err != nil {
		return nil
	}
	return b
}

// indexEntries is the number of closure entries the index b says it
// holds, read from its header alone (0 when b is not an index): what the
// closure's maps are sized for while the rest is decoded.
func indexEntries(b []byte) int {
	if !bytes.HasPrefix(b, []byte(indexMagic)) || len(b) < len(indexMagic)+sha256.Size {
		return 0
	}
	d := indexDecoder{b: b[len(indexMagic)+sha256.Size:]}
	d.uvarint()
	d.seal()
	if n := d.count(); d.err == nil && n <= uint64(len(b)/4) { // an entry takes 4 bytes at least
		return int(n)
	}
	return 0
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

// encode writes the index: the magic, the digest, the length of all its
// text (paths, link texts, digests), the root's seal, the closure's
// entries (paths front-coded against the previous one: the list is
// sorted), the seals, and a CRC-32C of all of it, so a truncated or
// damaged file is never mistaken for a smaller index.
func (idx *assemblyIndex) encode() []byte {
	text := 0
	for _, r := range idx.plan {
		text += len(r.path) + len(r.target) + len(r.sha)
	}
	b := make([]byte, 0, 64+len(idx.plan)*80+len(idx.seals)*30)
	b = append(b, indexMagic...)
	digest, _ := hex.DecodeString(idx.digest)
	b = append(b, digest...)
	b = binary.AppendUvarint(b, uint64(text))
	b = idx.root.append(b)
	b = binary.AppendUvarint(b, uint64(len(idx.plan)))
	prev := ""
	for _, r := range idx.plan {
		n := 0
		for n < len(prev) && n < len(r.path) && prev[n] == r.path[n] {
			n++
		}
		b = binary.AppendUvarint(b, uint64(n))
		b = binary.AppendUvarint(b, uint64(len(r.path)-n))
		b = append(b, r.path[n:]...)
		prev = r.path
		b = append(b, byte(r.typ))
		b = binary.AppendUvarint(b, uint64(r.mode))
		switch r.typ.String() {
		case render.RunfileSymlink:
			b = binary.AppendUvarint(b, uint64(len(r.target)))
			b = append(b, r.target...)
		case render.RunfileFile:
			b = binary.AppendUvarint(b, r.key.Dev)
			b = binary.AppendUvarint(b, r.key.Ino)
			b = binary.AppendVarint(b, r.key.Size)
			b = binary.AppendVarint(b, r.key.MtimeNS)
			b = binary.AppendVarint(b, r.key.CtimeNS)
			b = binary.AppendVarint(b, r.readNS)
			b = binary.AppendUvarint(b, uint64(len(r.sha)))
			b = append(b, r.sha...)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(idx.seals)))
	for _, seal := range idx.seals {
		b = seal.append(b)
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

var errBadIndex = errors.New("not a runfiles index")

// maxIndexText bounds the text of an index per byte of it (a damaged
// length must not make decoding allocate much more than the file): a
// front-coded path of a few bytes can stand for one of a few hundred.
const maxIndexText = 512

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
	// All text goes into one buffer, made one string at the end: 60,000
	// small strings would cost more than the rest of the decoding.
	n := d.uvarint()
	if n > maxIndexText*uint64(len(b)) {
		return nil, errBadIndex
	}
	text := make([]byte, 0, n)
	idx.root = d.seal()
	type spans struct{ path, target, sha [2]int }
	idx.plan = make([]plannedEntry, d.count())
	at := make([]spans, len(idx.plan))
	var prev [2]int
	for i := range idx.plan {
		r, sp := &idx.plan[i], &at[i]
		keep, rest := d.uvarint(), d.bytes(d.uvarint())
		if keep > uint64(prev[1]-prev[0]) {
			return nil, errBadIndex
		}
		start := len(text)
		text = append(text, text[prev[0]:prev[0]+int(keep)]...)
		text = append(text, rest...)
		sp.path = [2]int{start, len(text)}
		prev = sp.path
		r.typ = entryType(d.byte())
		if mode := d.uvarint(); mode <= 1<<32-1 {
			r.mode = uint32(mode)
		} else {
			d.fail()
		}
		switch r.typ.String() {
		case render.RunfileSymlink:
			start := len(text)
			text = append(text, d.bytes(d.uvarint())...)
			sp.target = [2]int{start, len(text)}
		case render.RunfileFile:
			r.key = statKey{Dev: d.uvarint(), Ino: d.uvarint(), Size: d.varint(), MtimeNS: d.varint(), CtimeNS: d.varint()}
			r.readNS = d.varint()
			start := len(text)
			text = append(text, d.bytes(d.uvarint())...)
			sp.sha = [2]int{start, len(text)}
		case render.RunfileDir:
		default:
			d.fail()
		}
	}
	idx.seals = make([]treeSeal, d.count())
	for i := range idx.seals {
		idx.seals[i] = d.seal()
	}
	if d.err != nil || len(d.b) != 0 || uint64(len(text)) != n {
		return nil, errBadIndex
	}
	// text is not written again: the string can share its bytes.
	all := unsafe.String(unsafe.SliceData(text), len(text))
	for i, sp := range at {
		r := &idx.plan[i]
		r.path, r.target, r.sha = all[sp.path[0]:sp.path[1]], all[sp.target[0]:sp.target[1]], all[sp.sha[0]:sp.sha[1]]
	}
	return idx, nil
}

// validSHA256 reports whether s is a sha256 as the manifest writes it: 64
// lowercase hex digits.
func validSHA256(s string) bool {
	if len(s) != hex.EncodedLen(sha256.Size) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// indexDecoder reads an index body; the first error sticks and every later
// read returns zero values.
type indexDecoder struct {
	b   []byte
	err error
}

func (d *indexDecoder) fail() { d.err, d.b = errBadIndex, nil }

func (d *indexDecoder) byte() byte {
	if len(d.b) == 0 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

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

func (d *indexDecoder) seal() treeSeal {
	s := treeSeal{Dev: d.uvarint(), Ino: d.uvarint()}
	if mode := d.uvarint(); mode <= 1<<32-1 {
		s.Mode = uint32(mode)
	} else {
		d.fail()
	}
	s.Size, s.MtimeNS, s.CtimeNS = d.varint(), d.varint(), d.varint()
	return s
}
