package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/moby/sys/mountinfo"
)

// cgroupMounts are the mount points of every cgroup hierarchy: on a
// hybrid host each v1 controller and the cgroup2 tree, on a cgroup2 host
// just /sys/fs/cgroup.
func cgroupMounts() ([]string, error) {
	ms, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return m.FSType != "cgroup" && m.FSType != "cgroup2", false
	})
	if err != nil {
		return nil, err
	}
	var points []string
	for _, m := range ms {
		points = append(points, m.Mountpoint)
	}
	slices.Sort(points)
	return slices.Compact(points), nil
}

// cgroupRootDirs are the existing CgroupRoot directories.
func cgroupRootDirs() []string {
	mounts, _ := cgroupMounts()
	var dirs []string
	for _, m := range mounts {
		d := filepath.Join(m, CgroupRoot)
		if _, err := os.Stat(d); err == nil {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// makeCgroupRoot creates CgroupRoot in every hierarchy (the kubelet refuses
// a cgroup root that does not exist). A v1 cpuset cgroup starts with no
// CPUs and no memory nodes: it gets its parent's.
func makeCgroupRoot() error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		d := filepath.Join(m, CgroupRoot)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", d, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			parent, err := os.ReadFile(filepath.Join(m, f))
			if err != nil {
				continue // not the v1 cpuset hierarchy
			}
			if err := os.WriteFile(filepath.Join(d, f), parent, 0o644); err != nil {
				return fmt.Errorf("setting %s of cgroup %s: %w", f, d, err)
			}
		}
	}
	return nil
}

// removeCgroupRoot removes CgroupRoot and every cgroup below it, deepest
// first. A cgroup whose last process just died can refuse removal (EBUSY)
// for a moment; each is retried for a few seconds.
func removeCgroupRoot() error {
	var errs []error
	for _, root := range cgroupRootDirs() {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs) // children after their parent in walk order
		for _, d := range dirs {
			var err error
			for range 50 {
				if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}
