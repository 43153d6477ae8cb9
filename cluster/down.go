package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Down stops the cluster and removes everything it left on the host: pods
// (through the CRI, so that the CNI plugin releases each pod's interface
// and address), the daemons, any process still running one of the
// cluster's binaries or in its cgroups, mounts under State and Run, the
// pod bridge, the cgroups under CgroupRoot, the kubelet's symlinks in
// /var/log/containers and both directories. It is idempotent, and checks at
// the end that nothing is left, or says what is.
func Down(l Layout, progress io.Writer) error {
	begin := time.Now()
	step := func(format string, args ...any) {
		fmt.Fprintf(progress, "%6.1fs  %s\n", time.Since(begin).Seconds(), fmt.Sprintf(format, args...))
	}
	var errs []error

	// The kubelet first, or it would restart the pods removed next.
	stopComponent(l, "kubelet", step)
	if _, alive, _ := readDaemon(l, "containerd"); alive {
		n, err := removePods(l)
		if err != nil {
			errs = append(errs, err)
		}
		step("removed %d pod sandboxes", n)
	}
	for _, c := range slices.Backward(Components) {
		if c != "kubelet" {
			stopComponent(l, c, step)
		}
	}
	if n := killLeftovers(l); n > 0 {
		step("killed %d leftover processes (shims, pod processes)", n)
	}
	n, err := unmountUnder(l.State, l.Run)
	if err != nil {
		errs = append(errs, err)
	}
	if n > 0 {
		step("unmounted %d mounts", n)
	}
	if linkExists(Bridge) {
		if out, err := exec.Command("ip", "link", "delete", Bridge).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("deleting bridge %s: %w: %s", Bridge, err, out))
		} else {
			step("deleted bridge %s", Bridge)
		}
	}
	if err := removeCgroupRoot(); err != nil {
		errs = append(errs, err)
	}
	if err := removeHostPaths(l); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []string{l.Run, l.State} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", d, err))
		}
	}
	if err := errors.Join(append(errs, checkNothingLeft(l)...)...); err != nil {
		return err
	}
	step("cluster down: no processes, mounts, interfaces or cgroups left")
	return nil
}

func stopComponent(l Layout, c string, step func(string, ...any)) {
	d, alive, _ := readDaemon(l, c)
	if !alive {
		return
	}
	grace := 10 * time.Second
	if c == "containerd" || c == "kubelet" {
		grace = 20 * time.Second
	}
	if d.stop(grace) {
		step("stopped %s (pid %d, killed after %s)", c, d.pid, grace)
	} else {
		step("stopped %s (pid %d)", c, d.pid)
	}
}

// removePods stops and removes every pod sandbox the CRI knows.
func removePods(l Layout) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := grpc.NewClient(l.CRIEndpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return 0, fmt.Errorf("listing pod sandboxes on %s: %w", l.CRIEndpoint(), err)
	}
	var errs []error
	for _, s := range list.Items {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("stopping pod sandbox %s (%s): %w", s.Id, s.Metadata.GetName(), err))
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("removing pod sandbox %s (%s): %w", s.Id, s.Metadata.GetName(), err))
		}
	}
	return len(list.Items), errors.Join(errs...)
}

// clusterPids are the processes the cluster started that still run: those
// executing a binary of Layout.Bin (the shims survive containerd) and those
// in a cgroup under CgroupRoot (pod processes).
func clusterPids(l Layout) []int {
	var pids []int
	seen := map[int]bool{}
	add := func(pid int) {
		if pid > 0 && pid != os.Getpid() && !seen[pid] {
			seen[pid] = true
			pids = append(pids, pid)
		}
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink("/proc/" + e.Name() + "/exe")
		if err == nil && strings.HasPrefix(exe, l.Bin+"/") {
			add(pid)
		}
	}
	for _, dir := range cgroupRootDirs() {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				pid, _ := strconv.Atoi(f)
				add(pid)
			}
			return nil
		})
	}
	return pids
}

// killLeftovers kills clusterPids and returns how many there were.
func killLeftovers(l Layout) int {
	pids := clusterPids(l)
	n := len(pids)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for i := 0; i < 50 && len(pids) > 0; i++ {
		time.Sleep(100 * time.Millisecond)
		pids = slices.DeleteFunc(pids, func(pid int) bool {
			st, err := procState(pid)
			return err != nil || st == "Z"
		})
	}
	return n
}

// mountsUnder lists mount points at or below any of dirs, deepest first.
func mountsUnder(dirs ...string) ([]string, error) {
	var points []string
	for _, d := range dirs {
		ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(d))
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			points = append(points, m.Mountpoint)
		}
	}
	slices.SortFunc(points, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return slices.Compact(points), nil
}

func unmountUnder(dirs ...string) (int, error) {
	n := 0
	for range 5 { // a mount may be stacked, or reappear below a detached one
		points, err := mountsUnder(dirs...)
		if err != nil || len(points) == 0 {
			return n, err
		}
		for _, p := range points {
			if err := unix.Unmount(p, 0); err != nil {
				if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
					return n, fmt.Errorf("unmounting %s: %w", p, err)
				}
			}
			n++
		}
	}
	points, err := mountsUnder(dirs...)
	if err == nil && len(points) > 0 {
		err = fmt.Errorf("still mounted after unmounting: %s", strings.Join(points, ", "))
	}
	return n, err
}

func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

func checkNothingLeft(l Layout) []error {
	var errs []error
	if pids := clusterPids(l); len(pids) > 0 {
		errs = append(errs, fmt.Errorf("processes of the cluster still run: %v", pids))
	}
	if points, err := mountsUnder(l.State, l.Run); err != nil || len(points) > 0 {
		errs = append(errs, fmt.Errorf("mounts left: %v %v", points, err))
	}
	if linkExists(Bridge) {
		errs = append(errs, fmt.Errorf("network interface %s left", Bridge))
	}
	if dirs := cgroupRootDirs(); len(dirs) > 0 {
		errs = append(errs, fmt.Errorf("cgroups left: %s", strings.Join(dirs, ", ")))
	}
	return errs
}
