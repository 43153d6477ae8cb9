package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// binaries up needs in Layout.Bin (make cluster-build puts them there).
var binaries = []string{
	"hookbox-cluster", "pause", "containerd", "containerd-shim-runc-v2", "ctr",
	"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl",
	"cni/bridge", "cni/host-local", "cni/loopback",
}

// Up starts the cluster and returns once its node is Ready and the default
// namespace has its service account (pods can be created). progress gets
// one line per step, with the time since Up began.
func Up(ctx context.Context, l Layout, timeout time.Duration, progress io.Writer) error {
	begin := time.Now()
	step := func(format string, args ...any) {
		fmt.Fprintf(progress, "%6.1fs  %s\n", time.Since(begin).Seconds(), fmt.Sprintf(format, args...))
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	for _, b := range binaries {
		if _, err := os.Stat(l.BinPath(b)); err != nil {
			return fmt.Errorf("%s is missing: build the cluster first (make cluster-build): %w", l.BinPath(b), err)
		}
	}
	if _, err := os.Stat(runcPath); err != nil {
		return fmt.Errorf("runc is missing at %s (apt-get install runc): %w", runcPath, err)
	}
	running, err := Running(l)
	if err != nil {
		return err
	}
	if len(running) > 0 {
		return fmt.Errorf("a cluster is already running (%s): stop it with make cluster-down", strings.Join(running, ", "))
	}
	if leftovers(l) {
		step("removing what an earlier cluster left")
		if err := Down(l, progress); err != nil {
			return err
		}
	}

	for _, d := range []string{l.State, l.Run, l.Logs(), l.PodLogs(), l.KubeletRoot(), l.CNIConf()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := recordHostPaths(l); err != nil {
		return err
	}
	if err := writePKI(l); err != nil {
		return err
	}
	if err := writeFile(l.ContainerdConfig(), []byte(containerdConfig(l)), 0o644); err != nil {
		return err
	}
	cni, err := cniConfig(l)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(l.CNIConf(), "10-hookbox-cluster.conflist"), cni, 0o644); err != nil {
		return err
	}
	kc, err := kubeletConfig(l)
	if err != nil {
		return err
	}
	if err := writeFile(l.KubeletConfig(), kc, 0o644); err != nil {
		return err
	}
	if err := makeCgroupRoot(); err != nil {
		return err
	}
	step("certificates and configs written to %s", l.State)

	if _, err := startDaemon(l, "etcd", nil, l.BinPath("hookbox-cluster"), "-bin", l.Bin, "-state", l.State, "-run", l.Run, "etcd"); err != nil {
		return err
	}
	// containerd finds its shim on PATH: ours first.
	if _, err := startDaemon(l, "containerd", []string{"PATH=" + l.Bin + ":" + os.Getenv("PATH")},
		l.BinPath("containerd"), "--config", l.ContainerdConfig()); err != nil {
		return err
	}
	if err := waitFor(ctx, l, "etcd", func() error { return httpOK(EtcdURL() + "/health") }); err != nil {
		return err
	}
	step("etcd ready on %s", EtcdURL())

	if _, err := startDaemon(l, "kube-apiserver", nil, apiserverArgs(l)...); err != nil {
		return err
	}
	if err := waitFor(ctx, l, "containerd", func() error { _, err := l.Ctr("version"); return err }); err != nil {
		return err
	}
	step("containerd ready on %s", l.ContainerdSocket())
	if err := importPauseImage(l); err != nil {
		return err
	}
	step("sandbox image %s imported", PauseImage)

	client, err := l.Client()
	if err != nil {
		return err
	}
	if err := waitFor(ctx, l, "kube-apiserver", func() error {
		return client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
	}); err != nil {
		return err
	}
	step("kube-apiserver ready on %s", APIServerURL())

	for _, c := range []struct {
		name string
		argv []string
	}{
		{"kube-controller-manager", controllerManagerArgs(l)},
		{"kube-scheduler", schedulerArgs(l)},
		{"kubelet", kubeletArgs(l)},
	} {
		if _, err := startDaemon(l, c.name, nil, c.argv...); err != nil {
			return err
		}
	}
	if err := waitFor(ctx, l, "kubelet", func() error { return nodeReady(ctx, client) }); err != nil {
		return err
	}
	step("node %s Ready", NodeName)
	if err := waitFor(ctx, l, "kube-controller-manager", func() error {
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	step("cluster up: export KUBECONFIG=%s (kubectl: %s)", l.AdminKubeconfig(), l.BinPath("kubectl"))
	return nil
}

// Client is a clientset with the cluster's admin credentials.
func (l Layout) Client() (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.AdminKubeconfig())
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's admin kubeconfig: %w", err)
	}
	cfg.Timeout = 10 * time.Second
	return kubernetes.NewForConfig(cfg)
}

// Ctr runs the cluster's ctr against its containerd, in namespace k8s.io.
func (l Layout) Ctr(args ...string) ([]byte, error) {
	cmd := exec.Command(l.BinPath("ctr"), append([]string{"--address", l.ContainerdSocket(), "--namespace", Namespace}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// ImportImage imports img into the cluster's containerd (namespace k8s.io,
// unpacked for overlayfs), where the kubelet finds it without a pull.
func (l Layout) ImportImage(img *Image) error {
	_, err := l.Ctr("images", "import", "--local", "--snapshotter", "overlayfs", img.LayoutTar)
	if err != nil {
		return fmt.Errorf("importing %s into the cluster's containerd: %w", img.Name, err)
	}
	return nil
}

func importPauseImage(l Layout) error {
	dir, err := os.MkdirTemp("", "hookbox-cluster-pause-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b, err := os.ReadFile(l.BinPath("pause"))
	if err != nil {
		return err
	}
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(rootfs, "pause"), b, 0o755); err != nil {
		return err
	}
	img, err := ImageFromDir(rootfs, PauseImage, ocispec.ImageConfig{Entrypoint: []string{"/pause"}, User: "65535:65535"}, dir)
	if err != nil {
		return err
	}
	return l.ImportImage(img)
}

func nodeReady(ctx context.Context, client kubernetes.Interface) error {
	node, err := client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s is not registered yet", NodeName)
	}
	if err != nil {
		return err
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("node %s not Ready: %s: %s", NodeName, c.Reason, c.Message)
		}
	}
	return fmt.Errorf("node %s has no Ready condition yet", NodeName)
}

func httpOK(url string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// waitFor polls check until it succeeds, the component's process exits or
// ctx ends; the error then carries the check's last error and the end of
// the component's log.
func waitFor(ctx context.Context, l Layout, component string, check func() error) error {
	var last error
	for {
		if last = check(); last == nil {
			return nil
		}
		if _, alive, _ := readDaemon(l, component); !alive {
			return fmt.Errorf("%s exited (%v); the end of %s:\n%s", component, last, l.Log(component), logTail(l.Log(component), 30))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %v (%w); the end of %s:\n%s", component, last, ctx.Err(), l.Log(component), logTail(l.Log(component), 30))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func logTail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// Running lists the components whose recorded process still runs.
func Running(l Layout) ([]string, error) {
	var running []string
	var errs []error
	for _, c := range Components {
		_, alive, err := readDaemon(l, c)
		if err != nil {
			errs = append(errs, err)
		}
		if alive {
			running = append(running, c)
		}
	}
	return running, errors.Join(errs...)
}

func leftovers(l Layout) bool {
	for _, d := range []string{l.State, l.Run} {
		if _, err := os.Stat(d); err == nil {
			return true
		}
	}
	return false
}

// Status describes each component: running (with its pid) or not.
func Status(l Layout, w io.Writer) error {
	for _, c := range Components {
		d, alive, err := readDaemon(l, c)
		switch {
		case err != nil:
			fmt.Fprintf(w, "%-24s %v\n", c, err)
		case alive:
			fmt.Fprintf(w, "%-24s running (pid %d)\n", c, d.pid)
		default:
			fmt.Fprintf(w, "%-24s not running\n", c)
		}
	}
	return nil
}
