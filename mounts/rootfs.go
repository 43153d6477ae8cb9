package mounts

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// RootfsOverlayOptions are the overlay options of a read-only rootfs made
// of lower layers, top first (the runfiles tree above the base image). An
// overlay with lower layers only and no upper layer has no writable place.
func RootfsOverlayOptions(lowers []string) ([]string, error) {
	if len(lowers) < 2 {
		return nil, fmt.Errorf("%w: a read-only overlay needs at least two lower layers, got %d", ErrInvalid, len(lowers))
	}
	for _, l := range lowers {
		if strings.ContainsAny(l, ":,\\") {
			return nil, fmt.Errorf("%w: layer path %q contains ':', ',' or '\\', which overlayfs options cannot carry", ErrInvalid, l)
		}
	}
	return []string{"lowerdir=" + strings.Join(lowers, ":")}, nil
}

// MountRootfs mounts the read-only overlay of lowers (top first) at target,
// for runtimes given a rootfs path (runc bundles).
func MountRootfs(target string, lowers []string) error {
	opts, err := RootfsOverlayOptions(lowers)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("overlay", target, "overlay", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, strings.Join(opts, ",")); err != nil {
		return fmt.Errorf("mount rootfs overlay at %s: %w", target, err)
	}
	return nil
}

// UnmountRootfs undoes MountRootfs. It is retry-safe: a target that is not
// mounted, or gone, counts as done.
func UnmountRootfs(target string) error {
	err := unix.Unmount(target, 0)
	switch {
	case err == nil, errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.EBUSY):
		return unix.Unmount(target, unix.MNT_DETACH)
	}
	return fmt.Errorf("unmount rootfs %s: %w", target, err)
}
