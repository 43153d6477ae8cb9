package launcher

import (
	"path/filepath"

	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/launcher/daemon"
)

// The signs that containerd is at work on a request hookbox is waiting
// for, which the in-flight fault points (faultpoint.While) stop at. They
// are only evaluated when a test arms one of those points.

// shimStarted: containerd, creating the task, has started its shim.
func (x *execution) shimStarted() bool {
	return runShim(x.id, x.opts.Backend.Address) != nil
}

// shimDeleting returns the sign that containerd, deleting the task, has
// reached its shim: the task's rootfs is unmounted, or the shim is gone.
func (x *execution) shimDeleting() func() bool {
	var shim *daemon.Shim
	looked := false
	return func() bool {
		if !looked {
			looked = true
			if shim = runShim(x.id, x.opts.Backend.Address); shim == nil {
				return true
			}
		}
		if !host.ProcessAlive(shim.PID, shim.StartTime) {
			return true
		}
		mounts, err := host.Mounts()
		return err == nil && host.TopmostAt(mounts, filepath.Join(shim.Bundle, "rootfs")) == nil
	}
}
