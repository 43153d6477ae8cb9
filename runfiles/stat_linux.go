//go:build linux

package runfiles

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
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

// changedSeals compares every entry of the tree at dir with its seal in
// idx, stating each relative to the tree's root directory (a path walk of
// its own components only) on GOMAXPROCS goroutines, and returns the
// indexes of the entries that differ, sorted. ok is false when the root
// itself is missing or not the directory sealed.
func changedSeals(ctx context.Context, dir string, idx *assemblyIndex) (changed []int, ok bool) {
	fd, err := retryEINTR(func() (int, error) {
		return unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || idx.root.Ino == 0 || treeSealOfStat(&st) != idx.root {
		return nil, false
	}
	var (
		mu   sync.Mutex
		next atomic.Int64
	)
	const chunk = 256
	err = parallel(ctx, runtime.GOMAXPROCS(0), func(ctx context.Context, _ int) error {
		var mine []int
		var st unix.Stat_t
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			start := int(next.Add(chunk)) - chunk
			if start >= len(idx.tree) {
				break
			}
			for i := start; i < min(start+chunk, len(idx.tree)); i++ {
				e := idx.tree[i]
				err := unix.Fstatat(fd, strings.TrimPrefix(e.path, "/"), &st, unix.AT_SYMLINK_NOFOLLOW)
				if err != nil || e.seal.Ino == 0 || treeSealOfStat(&st) != e.seal {
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
