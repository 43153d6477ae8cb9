package runfiles

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"hookbox.dev/hookbox/render"
)

// Result is what Assemble produced.
type Result struct {
	// Manifest is every entry of the tree, sorted by path: what goes into
	// render.Render.Runfiles.
	Manifest []render.Runfile
	// ManifestDigest is render.RunfilesDigest(Manifest): "sha256:<hex>".
	ManifestDigest string
	// TreeDir is the assembled read-only tree, laid out like the host's
	// "/": mount it (as the top lower layer) at the container's root.
	TreeDir string
	Stats   Stats
	// Repairs are the store objects found damaged and replaced from their
	// host files (tampering, or a failing disk): what the caller reports.
	Repairs []Repair
}

// Repair is one damaged store object replaced from its host file.
type Repair struct {
	Path   string `json:"path"`   // the host file read again
	Object string `json:"object"` // the store object replaced
	Reason string `json:"reason"` // what was wrong with it
}

// Stats count the work Assemble did, for progress output and benchmarks.
type Stats struct {
	Entries int // manifest entries
	Files   int // file entries
	// FilesHashed and BytesHashed count host files read and hashed: new or
	// changed files, files written less than two seconds before they were
	// last read (see the stat cache), and repairs.
	FilesHashed int
	BytesHashed int64
	// BytesCopied counts bytes written into new store objects.
	BytesCopied int64
	// BytesReused counts file bytes served by objects already in the store.
	BytesReused int64
	// ObjectsRehashed and BytesRehashed count existing store objects read
	// to check them: every one with VerifyFull, otherwise those whose seal
	// differs (see the package doc).
	ObjectsRehashed int
	BytesRehashed   int64
	// Repaired counts store objects found damaged and replaced from the
	// host file (len(Result.Repairs)); TreeReplaced, an existing tree
	// found damaged and rebuilt.
	Repaired     int
	TreeBuilt    bool
	TreeReplaced bool
	// Indexed: nothing changed since the last assembly of the same inputs,
	// as its index and the seals of its tree showed (one stat per host
	// file and per tree entry, see the package doc); no stat-cache entry,
	// store object or tree directory was read.
	Indexed  bool
	Duration time.Duration
}

// Progress reports one file of an assembly.
type Progress struct {
	Path        string // host path
	Bytes       int64  // its size
	Hashed      bool   // read and hashed (false: known from the stat cache)
	Done, Total int    // files handled so far, files in the closure
}

// maxAttempts bounds how often Assemble starts over when a host file
// changes under it.
const maxAttempts = 3

// Assemble computes the closure of programs, puts every file in the store
// and returns the manifest and the tree assembled from it. It is
// idempotent: an unchanged host costs the closure (a stat of each host
// file, the ELF headers of programs) and a stat of each entry of the
// existing tree, checked against the assembly index (see the package
// doc); nothing is read from the store but the index. When a host file
// changes during the assembly it starts over, up to three times (then
// ErrSourceChanged).
//
// Guarantee: every file in TreeDir has exactly the content its manifest
// entry names, as verified by the read that stored it (and, with
// VerifyFull, re-read now). Not guaranteed: that the tree stays so while
// in use; the store's owner (root) can still change it.
func Assemble(ctx context.Context, s *Store, programs []string, opts Options) (*Result, error) {
	start := time.Now()
	var err error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		var res *Result
		res, err = s.assembleOnce(ctx, programs, opts)
		if err == nil {
			res.Stats.Duration = time.Since(start)
			return res, nil
		}
		if !errors.Is(err, ErrSourceChanged) {
			break
		}
	}
	return nil, fmt.Errorf("runfiles: %w", err)
}

func (s *Store) assembleOnce(ctx context.Context, programs []string, opts Options) (*Result, error) {
	key := indexKey(programs, opts)
	var seals *sealCheck
	sizeHint := 0
	if opts.Verify == VerifyQuick {
		// The index is decoded and the tree's seals checked while the
		// closure walks the host: both are a stat per entry, on two cores.
		b := s.readIndex(key)
		sizeHint = indexEntries(b)
		seals = startSealCheck(ctx, s.treesDir(), b, opts)
		defer seals.stop()
	}
	p, err := closure(ctx, programs, opts, sizeHint)
	if err != nil {
		return nil, err
	}
	if seals != nil {
		res, err := s.fromIndex(key, seals, p, opts)
		if res != nil || err != nil {
			return res, err
		}
	}
	var writes statWrites
	res, err := s.assembleFull(ctx, key, p, opts, &writes)
	// The entries are right whatever failed after them (a tree not built
	// does not make a stored file's digest wrong): keep them for the retry.
	if werr := s.writeStats(ctx, &writes); err == nil && werr != nil {
		return nil, werr
	}
	return res, err
}

// assembleFull assembles the closure p through the stat cache, checking
// every store object it uses (Verify) and the tree by a walk, and writes
// the index for the next assembly. The stat-cache entries to write are
// left in writes.
func (s *Store) assembleFull(ctx context.Context, key string, p *plan, opts Options, writes *statWrites) (*Result, error) {
	manifest := p.list()
	var files []int // indexes of file entries
	for i, e := range manifest {
		if e.Type == render.RunfileFile {
			files = append(files, i)
		}
	}
	res := &Result{Stats: Stats{Entries: len(manifest), Files: len(files)}}
	objects := make(map[string]objectUse, len(files))
	var (
		mu   sync.Mutex
		done int
		// newIn: the objects directories (by mode) that got a new name.
		newIn = make(map[fs.FileMode]bool)
	)
	// fileDone records what put or commit did for the k-th file.
	fileDone := func(k int, st stored) {
		e := manifest[files[k]]
		mu.Lock()
		defer mu.Unlock()
		if st.dirty {
			writes.set(p.key(e.Path), st.record)
		}
		manifest[files[k]].Size, manifest[files[k]].SHA256 = st.size, st.sha
		objects[e.Path] = objectUse{fi: st.object, key: p.key(e.Path), record: st.record}
		if st.hashed {
			res.Stats.FilesHashed++
			res.Stats.BytesHashed += st.size
		}
		res.Stats.BytesCopied += st.copied
		res.Stats.BytesReused += st.reused
		if st.rehashed {
			res.Stats.ObjectsRehashed++
			res.Stats.BytesRehashed += st.size
		}
		if st.copied > 0 {
			newIn[objectMode(e.Mode)] = true
		}
		if st.repair != nil {
			res.Repairs = append(res.Repairs, *st.repair)
		}
		done++
		if opts.Progress != nil {
			opts.Progress(Progress{Path: e.Path, Bytes: st.size, Hashed: st.hashed, Done: done, Total: len(files)})
		}
	}
	// Files read into the store wait, staged, until all are synced at
	// once; then they get their names.
	type pendingFile struct {
		k         int
		st        *staged
		committed bool
	}
	var pending []pendingFile
	defer func() {
		for _, f := range pending {
			if !f.committed {
				os.Remove(f.st.tmp)
			}
		}
	}()
	err := parallel(ctx, len(files), func(ctx context.Context, k int) error {
		e := manifest[files[k]]
		st, stg, err := s.put(ctx, p.source(e.Path), p.key(e.Path), e.Mode, opts.Verify)
		if err != nil {
			return fmt.Errorf("%s: %w", p.source(e.Path), err)
		}
		if stg != nil {
			mu.Lock()
			pending = append(pending, pendingFile{k: k, st: stg})
			mu.Unlock()
			return nil
		}
		fileDone(k, st)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(pending) > 0 {
		toSync := make([]*staged, len(pending))
		for i, f := range pending {
			toSync[i] = f.st
		}
		if err := s.syncStaged(toSync); err != nil {
			return nil, err
		}
		err := parallel(ctx, len(pending), func(ctx context.Context, i int) error {
			f := &pending[i]
			st, err := s.commit(f.st)
			f.committed = true // commit removes the temporary name, whatever happens
			if err != nil {
				return fmt.Errorf("%s: %w", f.st.path, err)
			}
			fileDone(f.k, st)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(res.Repairs, func(a, b Repair) int { return strings.Compare(a.Object, b.Object) })
	res.Stats.Repaired = len(res.Repairs)
	for _, mode := range objectModes {
		if newIn[mode] {
			if err := syncDir(s.objectsDir(mode)); err != nil {
				return nil, err
			}
		}
	}
	planned := make([]plannedEntry, len(manifest)) // before relocation moves paths
	for i, e := range manifest {
		if planned[i], err = plannedEntryOf(e, p.key(e.Path), objects[e.Path].record.ReadNS); err != nil {
			return nil, err
		}
	}

	if opts.ContainerPaths {
		manifest = relocate(manifest, objects, opts.Dirs, opts.Placed)
	}
	digest, err := render.RunfilesDigest(manifest)
	if err != nil {
		return nil, fmt.Errorf("manifest digest: %w", err)
	}
	hexDigest := strings.TrimPrefix(digest, "sha256:")
	dir, verified, built, replaced, err := s.ensureTree(ctx, hexDigest, manifest, objects)
	if err != nil {
		return nil, err
	}
	for i, seal := range verified.resealed {
		use := objects[manifest[i].Path]
		if r := use.record; r.setSeal(seal) {
			writes.set(use.key, r)
		}
	}
	next := &assemblyIndex{digest: hexDigest, root: verified.root, plan: planned, seals: verified.entries}
	if err := s.saveIndex(key, next); err != nil {
		return nil, err
	}
	res.Manifest, res.ManifestDigest, res.TreeDir = manifest, digest, dir
	res.Stats.Entries = len(manifest) // with the directories relocation added
	res.Stats.TreeBuilt, res.Stats.TreeReplaced = built, replaced
	return res, nil
}

// fromIndex returns the assembly the index describes when it still
// holds, nil when anything differs (the assembly then goes through the
// stat cache and the store objects). It holds when the closure p has
// exactly the indexed entries, every file with the stat key the index
// recorded, read long enough after its ctime (the stat cache's rule): the
// manifest is then the indexed one, digest included. And every tree entry
// must still have its seal: a file whose seal moved is accepted when its
// inode is still what the stat cache's entry sealed (another tree linked
// the object since), and the index is written again with its new seal.
func (s *Store) fromIndex(key string, seals *sealCheck, p *plan, opts Options) (*Result, error) {
	idx, manifest := seals.index()
	if idx == nil || len(p.entries) != len(idx.plan) {
		return nil, nil
	}
	var reused int64
	files := 0
	for i := range idx.plan {
		r := &idx.plan[i]
		e, ok := p.entries[r.path]
		if !ok || !r.matches(e.Runfile) {
			return nil, nil
		}
		if r.typ.String() != render.RunfileFile {
			continue
		}
		if r.key != e.key || !r.trusted() {
			return nil, nil
		}
		reused += r.key.Size
		files++
	}
	changed, ok := seals.result()
	if !ok {
		return nil, nil
	}
	dir := s.TreePath(idx.digest)
	if len(changed) > 0 {
		keys := idx.treeKeys(opts)
		for _, i := range changed {
			e := manifest[i]
			if e.Type != render.RunfileFile {
				return nil, nil // a directory's entries or a symlink changed
			}
			fi, err := os.Lstat(dir + e.Path)
			if err != nil {
				return nil, nil
			}
			r, found, _ := s.lookupStat(keys[e.Path])
			if !found || r.SHA256 != e.SHA256 || !r.Object.matches(fi) {
				return nil, nil
			}
			idx.seals[i] = treeSealOf(fi)
		}
		if err := s.saveIndex(key, idx); err != nil {
			return nil, err
		}
	}
	if opts.Progress != nil {
		done := 0
		for _, r := range idx.plan {
			if r.typ.String() == render.RunfileFile {
				done++
				opts.Progress(Progress{Path: r.path, Bytes: r.key.Size, Done: done, Total: files})
			}
		}
	}
	return &Result{
		Manifest: manifest, ManifestDigest: "sha256:" + idx.digest, TreeDir: dir,
		Stats: Stats{Entries: len(manifest), Files: files, BytesReused: reused, Indexed: true},
	}, nil
}

// treeKeys maps the tree path of every file of the indexed closure to its
// host file's stat key.
func (idx *assemblyIndex) treeKeys(opts Options) map[string]statKey {
	keys := make(map[string]statKey, len(idx.plan))
	m := make([]render.Runfile, len(idx.plan))
	for i, r := range idx.plan {
		m[i] = render.Runfile{Path: r.path, Type: r.typ.String(), Mode: r.mode, Target: r.target}
		if r.typ.String() == render.RunfileFile {
			keys[r.path] = r.key
		}
	}
	if opts.ContainerPaths {
		relocate(m, keys, opts.Dirs, opts.Placed)
	}
	return keys
}

// sealCheck reads an assembly index and checks its tree's seals
// (changedSeals) in the background.
type sealCheck struct {
	cancel   context.CancelFunc
	loaded   chan struct{} // idx and manifest are set
	done     chan struct{} // changed and ok are set
	idx      *assemblyIndex
	manifest []render.Runfile
	changed  []int
	ok       bool
}

// startSealCheck decodes the index b (nil: none) and checks the seals of
// its tree, under trees.
func startSealCheck(ctx context.Context, trees string, b []byte, opts Options) *sealCheck {
	ctx, cancel := context.WithCancel(ctx)
	c := &sealCheck{cancel: cancel, loaded: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		idx, err := decodeIndex(b)
		var manifest []render.Runfile
		if err == nil {
			if manifest = idx.manifestOf(opts); len(manifest) != len(idx.seals) {
				idx = nil // not this manifest's seals
			}
		}
		c.idx, c.manifest = idx, manifest
		close(c.loaded)
		if idx != nil {
			c.changed, c.ok = changedSeals(ctx, filepath.Join(trees, idx.digest), idx.root, manifest, idx.seals)
		}
	}()
	return c
}

// index waits for the index to be read: nil when there is none; and the
// manifest it describes.
func (c *sealCheck) index() (*assemblyIndex, []render.Runfile) {
	<-c.loaded
	return c.idx, c.manifest
}

// result waits for the check: the entries whose seal differs, and false
// when the tree's root is not the one sealed (or the check was stopped).
func (c *sealCheck) result() ([]int, bool) {
	<-c.done
	return c.changed, c.ok
}

// stop ends the check (when its result is not needed) and waits for it.
func (c *sealCheck) stop() {
	c.cancel()
	<-c.done
}

// objectUse is the store object a file entry uses, as it was checked.
type objectUse struct {
	fi     fs.FileInfo // its stat, recorded as its seal
	key    statKey     // the host file's stat-cache key
	record statRecord  // the stat-cache entry written for it
}

// parallel calls fn for 0..n-1 on GOMAXPROCS goroutines and returns the
// first error, after which the indexes not yet started are skipped and
// fn's context is cancelled.
func parallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		once     sync.Once
		firstErr error
		wg       sync.WaitGroup
		next     = make(chan int)
	)
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { firstErr = err; cancel() })
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// RenderOptions are what AssembleRender leaves to its caller; see
// Options for each.
type RenderOptions struct {
	Verify   Verify
	Progress func(Progress)
}

// AssembleRender assembles the runfiles of every program of r at their
// container paths (package trees with the packages they depend on,
// Options.Packages), with the mount points the base image lacks (the
// image's are given) and the placed files (tree path → host file: the
// init), and records the manifest in r.Runfiles.
func AssembleRender(ctx context.Context, s *Store, r *render.Render, imageMountPoints []string, placed map[string]string, opts RenderOptions) (*Result, error) {
	res, err := Assemble(ctx, s, r.ProgramPaths(), Options{
		Packages:       r.PackagePaths(),
		Dirs:           r.ExtraMountPoints(imageMountPoints),
		ContainerPaths: true,
		Placed:         placed,
		Verify:         opts.Verify,
		Progress:       opts.Progress,
	})
	if err != nil {
		return nil, err
	}
	r.Runfiles = res.Manifest
	return res, nil
}
