package daemon

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"time"

	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/oci"
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

// ServesGroup reports whether s is the shim of group, whichever task it
// was started for: the group's anchor or, when that was gone as a task of
// the group was created, that task. Such a shim may serve other tasks:
// it is not ended as one task's lost shim.
func (s Shim) ServesGroup(group string) bool {
	return s.ID == group || s.listensAt(ShimSocket(s.Address, s.Namespace, group))
}

// listensAt: s holds the socket listening at path.
func (s Shim) listensAt(path string) bool {
	inode, ok, err := host.UnixListener(path)
	return err == nil && ok && host.HoldsSocket(s.PID, inode)
}

// BundleGroup is the shim group the task of bundle was created in (its
// config.json's oci.AnnotationShimGroup), "" for a task with a shim of its
// own or a bundle without a spec.
func BundleGroup(bundle string) string {
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return ""
	}
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if json.Unmarshal(data, &spec) != nil {
		return ""
	}
	return spec.Annotations[oci.AnnotationShimGroup]
}
