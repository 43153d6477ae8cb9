package mounts

import "hookbox.dev/hookbox/internal/mountinfo"

// lastAt returns the topmost mount at mountpoint p, or nil.
func lastAt(mounts []mountinfo.Mount, p string) *mountinfo.Mount {
	for i := len(mounts) - 1; i >= 0; i-- {
		if mounts[i].MountPoint == p {
			return &mounts[i]
		}
	}
	return nil
}
