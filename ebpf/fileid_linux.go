//go:build linux

package ebpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/internal/host"
)

// FileIdentity returns the identity the tracer reports for an exec of path
// (symlinks followed, as exec does): the inode number and the device of
// the inode's superblock, which is what mm->exe_file yields.
//
// That device is not always stat(2)'s st_dev: on overlayfs whose layers
// sit on different filesystems, stat reports the layer's device while the
// executed file's inode belongs to the overlay's superblock (measured in
// TestOverlayIdentity); btrfs subvolumes differ the same way. So the
// device is looked up by mount id (statx STATX_MNT_ID) in mountinfo, whose
// major:minor is the superblock's s_dev.
func FileIdentity(path string) (FileID, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return FileID{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	id, err := identityOf(fd, []string{"/proc/self/mountinfo"})
	if err != nil {
		return FileID{}, fmt.Errorf("identity of %s: %w", path, err)
	}
	return id, nil
}

// FileIdentityIn is FileIdentity for a path inside another root, such as a
// container's /proc/<pid>/root: path and every symlink on the way resolve
// as they would for a process whose root is root (openat2
// RESOLVE_IN_ROOT), not against the caller's root as a plain stat of
// root+path would for absolute symlinks. When root is /proc/<pid>/root,
// that process's mountinfo is searched too (the container's mounts are in
// its own mount namespace).
func FileIdentityIn(root, path string) (FileID, error) {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return FileID{}, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(dir)
	fd, err := unix.Openat2(dir, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return FileID{}, fmt.Errorf("resolve %s in root %s: %w", path, root, err)
	}
	defer unix.Close(fd)
	infos := []string{"/proc/self/mountinfo"}
	if pid, ok := procRootPID(root); ok {
		infos = append(infos, "/proc/"+pid+"/mountinfo")
	}
	id, err := identityOf(fd, infos)
	if err != nil {
		return FileID{}, fmt.Errorf("identity of %s in root %s: %w", path, root, err)
	}
	return id, nil
}

// procRootPID returns <pid> when root is /proc/<pid>/root.
func procRootPID(root string) (string, bool) {
	rest, ok := strings.CutPrefix(filepath.Clean(root), "/proc/")
	if !ok {
		return "", false
	}
	pid, tail, _ := strings.Cut(rest, "/")
	if tail != "root" {
		return "", false
	}
	if _, err := strconv.Atoi(pid); err != nil && pid != "self" && pid != "thread-self" {
		return "", false
	}
	return pid, true
}

func identityOf(fd int, mountinfos []string) (FileID, error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_SYNC_AS_STAT, unix.STATX_INO|unix.STATX_MNT_ID, &stx); err != nil {
		return FileID{}, fmt.Errorf("statx: %w", err)
	}
	if stx.Mask&unix.STATX_INO == 0 {
		return FileID{}, errors.New("statx reported no inode number")
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		// Before Linux 5.8 (which cannot run the tracer anyway).
		return FileID{}, fmt.Errorf("%w: statx has no mount id (Linux 5.8+)", ErrNotSupported)
	}
	for _, p := range mountinfos {
		mounts, err := host.ReadMounts(p)
		if err != nil {
			return FileID{}, err
		}
		if m := host.MountByID(mounts, stx.Mnt_id); m != nil {
			return FileID{Dev: mkdev(uint32(m.Major), uint32(m.Minor)), Ino: stx.Ino}, nil
		}
	}
	return FileID{}, fmt.Errorf("mount %d not listed in %s", stx.Mnt_id, strings.Join(mountinfos, ", "))
}
