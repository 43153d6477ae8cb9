package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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
	for _, p := range clusterCNIResults("/var/lib/cni/results", clusterSandboxes(l)) {
		remove(p)
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

// cniCacheEntry is the part of a libcni result cache file that says whose
// it is.
type cniCacheEntry struct {
	ContainerID string `json:"containerId"`
	NetworkName string `json:"networkName"`
}

// clusterCNIResults lists the result cache files in dir that belong to
// the cluster: those of its pod network, and those of any network (the
// CRI's own loopback, cni-loopback) for a pod sandbox of the cluster —
// one named in sandboxes, or one that has a result on the pod network.
// A cluster whose pods were torn down leaves none; one whose daemons were
// killed leaves both kinds, and a directory up created must end empty.
func clusterCNIResults(dir string, sandboxes map[string]bool) []string {
	entries, _ := os.ReadDir(dir)
	owned := maps.Clone(sandboxes)
	if owned == nil {
		owned = map[string]bool{}
	}
	parsed := map[string]cniCacheEntry{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var c cniCacheEntry
		if json.Unmarshal(b, &c) != nil {
			continue
		}
		parsed[e.Name()] = c
		if c.NetworkName == cniNetwork && c.ContainerID != "" {
			owned[c.ContainerID] = true
		}
	}
	var mine []string
	for _, e := range entries {
		c, ok := parsed[e.Name()]
		if ok && (c.NetworkName == cniNetwork || owned[c.ContainerID]) {
			mine = append(mine, filepath.Join(dir, e.Name()))
		}
	}
	return mine
}

// clusterSandboxes is the set of pod sandbox ids the cluster's containerd
// keeps a directory for, read from its root (still there when down runs
// after the daemons were killed).
func clusterSandboxes(l Layout) map[string]bool {
	entries, _ := os.ReadDir(filepath.Join(l.ContainerdRoot(), "io.containerd.grpc.v1.cri", "sandboxes"))
	ids := map[string]bool{}
	for _, e := range entries {
		ids[e.Name()] = true
	}
	return ids
}
