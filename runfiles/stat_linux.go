//go:build linux

package runfiles

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/render"
)

// statKeyOf returns the identity of a file's current content as the kernel
// reports it. Any write changes mtime and ctime; chmod, chown and link
// changes change ctime; ctime cannot be set from user space.
func statKeyOf(fi fs.FileInfo) statKey {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return statKey{Size: fi.Size(), MtimeNS: fi.ModTime().UnixNano()}
	}
	return statKey{
		Dev:     uint64(st.Dev),
		Ino:     uint64(st.Ino),
		Size:    st.Size,
		MtimeNS: st.Mtim.Nano(),
		CtimeNS: st.Ctim.Nano(),
	}
}

// readRecord reads a small store record (a stat-cache entry, a seal) with
// three system calls. os.ReadFile adds fcntl, epoll and fstat calls to
// each open, which on a cached 20,000-file assembly cost more than the
// reads themselves.
func readRecord(path string) ([]byte, error) {
	fd, err := retryEINTR(func() (int, error) {
		return syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	buf := make([]byte, maxRecord+1)
	n, err := retryEINTR(func() (int, error) { return syscall.Read(fd, buf) })
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if n > maxRecord {
		return nil, fmt.Errorf("%s: more than %d bytes: not a store record", path, maxRecord)
	}
	return buf[:n], nil
}

// writeNew creates the file path, which must not exist (fs.ErrExist
// otherwise), with content b, mode 0600: three system calls, as
// readRecord.
func writeNew(path string, b []byte) error {
	fd, err := retryEINTR(func() (int, error) {
		return syscall.Open(path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	})
	if err != nil {
		return &fs.PathError{Op: "create", Path: path, Err: err}
	}
	n, err := retryEINTR(func() (int, error) { return syscall.Write(fd, b) })
	if cerr := syscall.Close(fd); err == nil {
		err = cerr
	}
	if err == nil && n != len(b) {
		err = syscall.EIO
	}
	if err != nil {
		syscall.Unlink(path)
		return &fs.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// openNoFollow opens the file path for reading, never through a symlink
// at its last component. os.OpenFile would also try to make the file
// pollable, four fcntl calls and an epoll_ctl that fails for every
// regular file: a tenth of the system calls of a first assembly.
func openNoFollow(path string) (*os.File, error) {
	fd, err := retryEINTR(func() (int, error) {
		return syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// createTemp creates a new file in dir, named prefix and a random number,
// for reading and writing, mode 0600: os.CreateTemp without the poller
// setup of os.OpenFile (see openNoFollow), which a first assembly paid
// for every object it stored.
func createTemp(dir, prefix string) (*os.File, error) {
	for try := 0; ; try++ {
		name := filepath.Join(dir, prefix+strconv.FormatUint(uint64(rand.Uint32()), 10))
		fd, err := retryEINTR(func() (int, error) {
			return syscall.Open(name, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
		})
		if err == nil {
			return os.NewFile(uintptr(fd), name), nil
		}
		if !errors.Is(err, syscall.EEXIST) || try == 100 {
			return nil, &fs.PathError{Op: "createtemp", Path: name, Err: err}
		}
	}
}

// syncFilesystem makes the files (all in dir's filesystem) durable: one
// syncfs of that filesystem, whose journal commits them together.
func syncFilesystem(dir string, _ iter.Seq[string]) error {
	fd, err := retryEINTR(func() (int, error) {
		return unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	if err := ignoringEINTR(func() error { return unix.Syncfs(fd) }); err != nil {
		return &fs.PathError{Op: "syncfs", Path: dir, Err: err}
	}
	return nil
}

func retryEINTR(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if !errors.Is(err, syscall.EINTR) {
			return n, err
		}
	}
}

// ownerHint names the owner of a file for an error message: " (uid N)".
func ownerHint(fi fs.FileInfo) string {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf(" (uid %d)", st.Uid)
	}
	return ""
}

// treeSealOf is the seal of the tree entry whose lstat is fi.
func treeSealOf(fi fs.FileInfo) treeSeal {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return treeSeal{}
	}
	return treeSeal{Dev: st.Dev, Ino: st.Ino, Mode: st.Mode, Size: st.Size, MtimeNS: st.Mtim.Nano(), CtimeNS: st.Ctim.Nano()}
}

func treeSealOfStat(st *unix.Stat_t) treeSeal {
	return treeSeal{Dev: st.Dev, Ino: st.Ino, Mode: st.Mode, Size: st.Size, MtimeNS: st.Mtim.Nano(), CtimeNS: st.Ctim.Nano()}
}

// changedSeals compares the tree at dir with the seals of the index: its
// root with root, each entry of manifest with seals (same order). Each
// entry is stated by name in its directory (fstatat on a descriptor of the
// directory, which its neighbours in the sorted manifest share: a lookup
// of one component instead of the whole path), on GOMAXPROCS goroutines.
// It returns the indexes of the entries that differ, sorted; ok is false
// when the root itself is missing or not the directory sealed.
func changedSeals(ctx context.Context, dir string, root treeSeal, manifest []render.Runfile, seals []treeSeal) (changed []int, ok bool) {
	fd, err := retryEINTR(func() (int, error) {
		return unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || root.Ino == 0 || treeSealOfStat(&st) != root {
		return nil, false
	}
	var (
		mu   sync.Mutex
		next atomic.Int64
	)
	const chunk = 512
	err = parallel(ctx, runtime.GOMAXPROCS(0), func(ctx context.Context, _ int) error {
		var mine []int
		dirs := dirCache{root: fd}
		defer dirs.close()
		var st unix.Stat_t
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			start := int(next.Add(chunk)) - chunk
			if start >= len(manifest) {
				break
			}
			for i := start; i < min(start+chunk, len(manifest)); i++ {
				p := manifest[i].Path
				slash := strings.LastIndexByte(p, '/')
				dfd, err := dirs.open(p[:slash])
				if err == nil {
					err = unix.Fstatat(dfd, p[slash+1:], &st, unix.AT_SYMLINK_NOFOLLOW)
				}
				if err != nil || seals[i].Ino == 0 || treeSealOfStat(&st) != seals[i] {
					mine = append(mine, i)
				}
			}
		}
		mu.Lock()
		changed = append(changed, mine...)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, false
	}
	slices.Sort(changed)
	return changed, true
}

// dirCache holds descriptors (O_PATH) of the few directories of a tree
// last looked in, below root.
type dirCache struct {
	root int
	dirs [8]struct {
		path string
		fd   int
	}
	n, next int
}

// open returns a descriptor of the directory at path ("" is the root),
// never through a symlink at its last component.
func (c *dirCache) open(path string) (int, error) {
	if path == "" {
		return c.root, nil
	}
	for i := range c.n {
		if c.dirs[i].path == path {
			return c.dirs[i].fd, nil
		}
	}
	fd, err := retryEINTR(func() (int, error) {
		return unix.Openat(c.root, path[1:], unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return -1, err
	}
	slot := &c.dirs[c.next]
	if c.next < c.n {
		unix.Close(slot.fd)
	} else {
		c.n++
	}
	slot.path, slot.fd = path, fd
	c.next = (c.next + 1) % len(c.dirs)
	return fd, nil
}

func (c *dirCache) close() {
	for i := range c.n {
		unix.Close(c.dirs[i].fd)
	}
}
