package launcher

import (
	"os"
	"path/filepath"

	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/launcher/daemon"
	"hookbox.dev/hookbox/oci"
)

// The signs that containerd is at work on a request hookbox is waiting
// for, which the in-flight fault points (faultpoint.While) stop at. They
// are only evaluated when a test arms one of those points.

// shimStarted: containerd, creating the task, has started its shim, or
// (a task in the shim group) the group's shim has taken it: the shim's
// start wrote the socket it serves into the task's bundle.
func (x *execution) shimStarted() bool {
	if x.grouped {
		_, err := os.Stat(filepath.Join(x.bundle(), "address"))
		return err == nil
	}
	return runShim(x.id, x.opts.Backend.Address) != nil
}

// shimDeleting returns the sign that containerd, deleting the task, has
// reached its shim: the task's rootfs is unmounted, or the shim (the
// bundle, for a task in the shim group, whose shim stays) is gone.
func (x *execution) shimDeleting() func() bool {
	if x.grouped {
		return func() bool { return rootfsGone(x.bundle()) }
	}
	var shim *daemon.Shim
	looked := false
	return func() bool {
		if !looked {
			looked = true
			if shim = runShim(x.id, x.opts.Backend.Address); shim == nil {
				return true
			}
		}
		return !host.ProcessAlive(shim.PID, shim.StartTime) || rootfsGone(shim.Bundle)
	}
}

// bundle is the task's bundle in containerd's state directory.
func (x *execution) bundle() string {
	return daemon.TaskBundle(x.opts.Backend.State, oci.Namespace, x.id)
}

// rootfsGone: nothing is mounted at the bundle's rootfs.
func rootfsGone(bundle string) bool {
	mounts, err := host.Mounts()
	return err == nil && host.TopmostAt(mounts, filepath.Join(bundle, "rootfs")) == nil
}
