//go:build linux

package runfiles

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
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
