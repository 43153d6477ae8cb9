package runfiles

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"hookbox.dev/hookbox/render"
)

// TreeMode is the mode an entry has in an assembled tree: files the mode
// of their store object (objectMode of the host mode e.Mode: read-only,
// never more for group and others than the host file gives others),
// directories 0555, symlinks 0777.
func TreeMode(e render.Runfile) fs.FileMode {
	switch e.Type {
	case render.RunfileDir:
		return fs.ModeDir | 0o555
	case render.RunfileSymlink:
		return fs.ModeSymlink | 0o777
	}
	return objectMode(e.Mode)
}

// errTreeMismatch: an existing tree does not match its manifest.
var errTreeMismatch = errors.New("tree does not match its manifest")

// ensureTree returns the directory of the tree for manifest (digest hex),
// reusing a complete, verified one or building it. objects maps each file
// path to its store object as checked. built reports a new tree;
// replaced, that a damaged one was moved aside first. seals are what the
// verification of the tree found (see verifyTree).
func (s *Store) ensureTree(ctx context.Context, hexDigest string, manifest []render.Runfile, objects map[string]objectUse) (dir string, seals *verifiedTree, built, replaced bool, err error) {
	dir = s.TreePath(hexDigest)
	for attempt := 0; attempt < 3; attempt++ {
		seals, err := verifyTree(dir, manifest, objects)
		if err == nil {
			return dir, seals, built, replaced, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			if !errors.Is(err, errTreeMismatch) {
				return "", nil, false, false, err
			}
			if err := s.discard(dir); err != nil {
				return "", nil, false, false, err
			}
			replaced = true
		}
		ok, err := s.buildTree(ctx, dir, manifest)
		if err != nil {
			return "", nil, false, false, err
		}
		built = built || ok
	}
	return "", nil, false, false, fmt.Errorf("tree %s keeps failing verification", dir)
}

// verifiedTree is what the verification of a tree saw: the seal of every
// entry (manifest order; zero where nothing can be trusted) and of its
// root, which the assembly index records, and the new seals of store
// objects whose ctime alone moved since they were checked.
type verifiedTree struct {
	root    treeSeal
	entries []treeSeal
	// resealed maps manifest indexes of file entries to the seal their
	// object has now.
	resealed map[int]objectSeal
}

// verifyTree walks dir and checks it holds exactly the manifest's entries.
// fs.ErrNotExist when there is no tree; errTreeMismatch when it differs.
// Each entry's seal is taken from the stat the walk checked, before a
// directory's entries are read, so a change after it moves a ctime past
// the seal.
//
// A file linked to its store object is sealed only when nothing but the
// ctime moved, forward, since the object was checked: a hard link changes
// its inode's ctime, and without a new seal the next assembly would hash
// every object of every new tree. Such an object gets its new seal in the
// stat cache too (resealed); an object that changed otherwise is left for
// the next check to hash.
func verifyTree(dir string, manifest []render.Runfile, objects map[string]objectUse) (*verifiedTree, error) {
	rootInfo, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	want := make(map[string]int, len(manifest))
	for i, e := range manifest {
		want[e.Path] = i
	}
	v := &verifiedTree{root: treeSealOf(rootInfo), entries: make([]treeSeal, len(manifest)), resealed: make(map[int]objectSeal)}
	mismatch := func(p, why string) error { return fmt.Errorf("%w: %s: %s", errTreeMismatch, p, why) }
	count := 0
	err = walkTree(dir, "", func(p string, w walkEntry) error {
		rel := p[len(dir):]
		i, ok := want[rel]
		if !ok {
			return mismatch(rel, "not in the manifest")
		}
		e := manifest[i]
		count++
		if w.mode != TreeMode(e) {
			return mismatch(rel, fmt.Sprintf("mode %v, want %v", w.mode, TreeMode(e)))
		}
		switch e.Type {
		case render.RunfileSymlink:
			if w.target != e.Target {
				return mismatch(rel, "link text "+w.target)
			}
		case render.RunfileFile:
			if w.key.Size != e.Size || w.key.MtimeNS != sealTime.UnixNano() {
				return mismatch(rel, "size or seal time changed")
			}
			if obj := objects[rel].fi; obj != nil && w.key.Ino != 0 {
				if was := sealOf(obj); was.Dev == w.key.Dev && was.Ino == w.key.Ino {
					now := w.objectSeal()
					if now.CtimeNS >= was.CtimeNS {
						if was.CtimeNS = now.CtimeNS; was == now {
							v.entries[i] = w.seal()
							if now != sealOf(obj) {
								v.resealed[i] = now
							}
						}
					}
					return nil
				}
			}
			// Not the store object's inode: a copy (cross-device or link
			// limit), or a tree linked to an object since replaced. Trust
			// only its content.
			got, err := hashFile(p)
			if err != nil {
				return err
			}
			if got != e.SHA256 {
				return mismatch(rel, "content differs")
			}
		}
		v.entries[i] = w.seal()
		return nil
	})
	if err != nil {
		return nil, err
	}
	if count != len(manifest) {
		return nil, fmt.Errorf("%w: %d entries, manifest has %d", errTreeMismatch, count, len(manifest))
	}
	return v, nil
}

// buildTree builds the tree in the store's tmp directory and renames it to
// dir. ok is false when another assembler renamed its own tree there first.
func (s *Store) buildTree(ctx context.Context, dir string, manifest []render.Runfile) (ok bool, err error) {
	tmp, err := os.MkdirTemp(s.tmpDir(), "tree-*")
	if err != nil {
		return false, err
	}
	defer func() {
		if err != nil || !ok {
			removeTree(tmp)
		}
	}()
	// The directories first (sorted by path, so parents come before
	// children), then everything in them, on all cores.
	var others []render.Runfile
	for _, e := range manifest {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		switch e.Type {
		case render.RunfileDir:
			if err := os.Mkdir(filepath.Join(tmp, e.Path), 0o700); err != nil {
				return false, fmt.Errorf("building tree: %w", err)
			}
		case render.RunfileSymlink, render.RunfileFile:
			others = append(others, e)
		default:
			return false, fmt.Errorf("%w: entry %s has type %q", ErrUnsupported, e.Path, e.Type)
		}
	}
	err = parallel(ctx, len(others), func(_ context.Context, i int) error {
		e := others[i]
		p := filepath.Join(tmp, e.Path)
		var err error
		if e.Type == render.RunfileSymlink {
			err = os.Symlink(e.Target, p)
		} else {
			err = s.placeFile(p, e)
		}
		if err != nil {
			return fmt.Errorf("building tree: %w", err)
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	for i := len(manifest) - 1; i >= 0; i-- {
		if e := manifest[i]; e.Type == render.RunfileDir {
			if err := os.Chmod(filepath.Join(tmp, e.Path), 0o555); err != nil {
				return false, err
			}
		}
	}
	// The root stays writable until renamed: renaming a directory to
	// another parent updates its "..", which needs write permission.
	if err := syncDir(tmp); err != nil {
		return false, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTEMPTY) {
			return false, nil // someone else's tree is there: verify that one
		}
		return false, err
	}
	ok = true
	if err := os.Chmod(dir, 0o555); err != nil {
		return true, err
	}
	return true, syncDir(s.treesDir())
}

// placeFile puts the store object of e at p: a hard link, or a verified
// copy when linking is impossible.
func (s *Store) placeFile(p string, e render.Runfile) error {
	obj := s.ObjectPath(e.SHA256, e.Mode)
	err := os.Link(obj, p)
	if err == nil || !(errors.Is(err, syscall.EXDEV) || errors.Is(err, syscall.EMLINK)) {
		return err
	}
	src, err := os.Open(obj)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	h := sha256.New()
	_, err = copyHashed(context.Background(), dst, src, h)
	if err == nil && hex.EncodeToString(h.Sum(nil)) != e.SHA256 {
		err = fmt.Errorf("store object %s changed while copied", obj)
	}
	if err == nil {
		err = dst.Chmod(objectMode(e.Mode))
	}
	if err == nil {
		err = os.Chtimes(p, sealTime, sealTime)
	}
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	return err
}

// discard moves a tree aside (so its name is free at once) and deletes it.
func (s *Store) discard(dir string) error {
	trash, err := os.MkdirTemp(s.tmpDir(), "trash-*")
	if err != nil {
		return err
	}
	os.Chmod(dir, 0o700) // moving a directory updates its "..": it must be writable
	err = os.Rename(dir, filepath.Join(trash, "tree"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		removeTree(trash)
		return fmt.Errorf("moving damaged tree aside: %w", err)
	}
	return removeTree(trash)
}

// removeTree deletes a read-only tree: directories are made writable first
// (root does not need it; everyone else does).
func removeTree(dir string) error {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
