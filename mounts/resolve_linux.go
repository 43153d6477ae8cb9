package mounts

import (
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"
)

// openat2 opens name relative to dirfd with the given resolve flags,
// retrying the transient EAGAIN (a concurrent rename or mount) and EINTR.
func openat2(dirfd int, name string, flags uint64, mode uint32, resolve uint64) (int, error) {
	how := &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: uint64(mode), Resolve: resolve}
	var err error
	for range 16 {
		var fd int
		fd, err = unix.Openat2(dirfd, name, how)
		if err == nil {
			return fd, nil
		}
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if errors.Is(err, unix.ENOSYS) {
		return -1, fmt.Errorf("%w: openat2 needs Linux ≥ 5.6", ErrNotSupported)
	}
	return -1, err
}

// Resolve flags: beneathNoSymlinks never follows a symlink at all;
// beneathOnly follows symlinks only while they stay beneath the dirfd.
const (
	beneathNoSymlinks = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV
	beneathOnly       = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS
)

// kindName names the file type in a stat mode for messages and reports.
func kindName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	}
	return "file of unknown type"
}

// isNotExist reports errors that mean "nothing there".
func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOENT)
}
