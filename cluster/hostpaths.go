package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// hostPaths are the directories outside State and Run that the components
// write to, whatever they are told: the kubelet's container log symlinks
// (/var/log/containers) and device plugin socket
// (/var/lib/kubelet/device-plugins/kubelet.sock), and libcni's result cache
// (/var/lib/cni/results), which containerd's CRI does not let one move.
// Parents come before their children.
var hostPaths = []string{
	"/var/log/containers",
	"/var/lib/kubelet", "/var/lib/kubelet/device-plugins",
	"/var/lib/cni", "/var/lib/cni/results",
}

// createdHostPaths is the file where up records which hostPaths did not
// exist before the cluster started, so that down removes those and only
// those.
func (l Layout) createdHostPaths() string { return filepath.Join(l.State, "host-paths-created") }

func recordHostPaths(l Layout) error {
	var created []string
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			created = append(created, p)
		}
	}
	return writeFile(l.createdHostPaths(), []byte(strings.Join(created, "\n")), 0o644)
}

// removeHostPaths removes what the cluster put in hostPaths — the log
// symlinks into PodLogs, the kubelet's device plugin socket, CNI results
// of the cluster's network — and then the directories up recorded as
// created, if they are empty.
func removeHostPaths(l Layout) error {
	var errs []error
	remove := func(p string) {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	links, _ := os.ReadDir("/var/log/containers")
	for _, e := range links {
		p := filepath.Join("/var/log/containers", e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, l.PodLogs()+"/") {
			remove(p)
		}
	}
	results, _ := os.ReadDir("/var/lib/cni/results")
	for _, e := range results {
		if strings.HasPrefix(e.Name(), cniNetwork+"-") {
			remove(filepath.Join("/var/lib/cni/results", e.Name()))
		}
	}
	b, err := os.ReadFile(l.createdHostPaths())
	if errors.Is(err, os.ErrNotExist) {
		return errors.Join(errs...)
	}
	if err != nil {
		return err
	}
	created := strings.Fields(string(b))
	if slices.Contains(created, "/var/lib/kubelet/device-plugins") {
		remove("/var/lib/kubelet/device-plugins/kubelet.sock")
	}
	slices.Reverse(created) // children first
	for _, p := range created {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing %s, which the cluster created: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
