package daemon

import (
	"net"
	"time"

	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/launcher/shimfront"
)

// GroupLive reports whether a shim answers at the socket of group in
// namespace, for the containerd at address (ShimSocket of the group's
// name): a task of the group (oci.AnnotationShimGroup) would join it. A
// shim exits once its last task is deleted.
func GroupLive(address, namespace, group string) bool {
	c, err := net.DialTimeout("unix", ShimSocket(address, namespace, group), 100*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// GroupShim is the shim of group among shims, for the containerd at
// address and namespace, whichever task it was started for: the group's
// anchor or, when that was gone as a task of the group was created, that
// task (the shim holding the listener at the group's socket, which its
// `start` passed it). Such a shim may serve other tasks: it is not ended
// as one task's lost shim. nil when none serves the group.
func GroupShim(shims []Shim, address, namespace, group string) *Shim {
	ours := func(s Shim) bool { return s.Namespace == namespace && SameAddress(s.Address, address) }
	for _, s := range shims {
		if ours(s) && s.ID == group {
			return &s
		}
	}
	inode, ok, err := host.UnixListener(ShimSocket(address, namespace, group))
	if err != nil || !ok {
		return nil
	}
	for _, s := range shims {
		if ours(s) && host.HoldsSocket(s.PID, inode) {
			return &s
		}
	}
	return nil
}

// BundleGroup is the shim group the task of bundle was created in (its
// config.json's oci.AnnotationShimGroup), "" for a task with a shim of its
// own or a bundle without a spec.
func BundleGroup(bundle string) string {
	return shimfront.SpecGroup(bundle)
}
