package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// containerdConfig is containerd's config (version 4, containerd 2.4):
// every path is the cluster's own, so that the system containerd's socket,
// state, shim sockets, runc state and NRI socket are never touched, and no
// drop-in of /etc/containerd/conf.d is read. NRI is on, with its socket
// under the cluster's run directory: a node agent connects there to learn
// of each container before it starts; containerd launches no plugin itself.
func containerdConfig(l Layout) string {
	q := strconv.Quote
	return `version = 4
root = ` + q(l.ContainerdRoot()) + `
state = ` + q(l.ContainerdState()) + `
imports = []
# The other snapshotters are not used.
disabled_plugins = [
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.snapshotter.v1.zfs",
]

[plugins."io.containerd.server.v1.grpc"]
  address = ` + q(l.ContainerdSocket()) + `

[plugins."io.containerd.server.v1.ttrpc"]
  address = ` + q(l.ContainerdSocket()+".ttrpc") + `

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = ` + q(l.NRISocket()) + `
  plugin_path = ` + q(filepath.Join(l.State, "nri", "plugins")) + `
  plugin_config_path = ` + q(filepath.Join(l.State, "nri", "conf.d")) + `

[plugins."io.containerd.server.v1.debug"]
  address = ""

[plugins."io.containerd.server.v1.metrics"]
  address = ""

[plugins."io.containerd.shim.v1.manager"]
  socket_dir = ` + q(filepath.Join(l.Run, "s")) + `

[plugins."io.containerd.internal.v1.opt"]
  path = ` + q(filepath.Join(l.State, "opt")) + `

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  # No registry is reachable: up imports the sandbox image.
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = ` + q(PauseImage) + `

[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  # Root may lack CAP_SYS_RESOURCE (CI VMs do): then no process can lower
  # its oom_score_adj, and runc fails to start the sandbox's -998.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = []
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [` + q(l.CNIBin()) + `]
    conf_dir = ` + q(l.CNIConf()) + `
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = ` + q(runcPath) + `
        Root = ` + q(l.RuncRoot()) + `
        SystemdCgroup = false
`
}

// runcPath is Debian's runc (apt), the one the system containerd uses.
const runcPath = "/usr/sbin/runc"

// cniConfig is the pod network: one host-only bridge. No gateway: a gateway
// address would make the bridge plugin turn on the host's IP forwarding
// (net.ipv4.ip_forward), a host-wide change; pods need no route out here
// (hookbox's Jobs have none, or reach their egress proxy on the pod's
// loopback).
func cniConfig(l Layout) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       cniNetwork,
		"plugins": []any{map[string]any{
			"type":      "bridge",
			"bridge":    Bridge,
			"isGateway": false,
			"ipMasq":    false,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": PodSubnet}}},
				"dataDir": l.CNIIPAM(),
			},
		}},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// cniNetwork is the pod network's name; libcni names its cached results
// after it.
const cniNetwork = "hookbox-cluster"

// kubeletConfig is the kubelet's configuration file.
func kubeletConfig(l Layout) ([]byte, error) {
	c := kubeletv1beta1.KubeletConfiguration{
		TypeMeta:           metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		Address:            Host,
		Port:               KubeletPort,
		ReadOnlyPort:       0,
		HealthzBindAddress: Host,
		HealthzPort:        ptr.To[int32](KubeletHealthzPort),
		TLSCertFile:        l.pkiFile("kubelet-serving.crt"),
		TLSPrivateKeyFile:  l.pkiFile("kubelet-serving.key"),
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: l.pkiFile("ca.crt")},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
		},
		Authorization:            kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		ContainerRuntimeEndpoint: l.CRIEndpoint(),
		ImageServiceEndpoint:     l.CRIEndpoint(),
		// Hosts here have hybrid cgroups (v1 controllers); kubelet 1.35+
		// refuses cgroup v1 unless told otherwise.
		FailCgroupV1:        ptr.To(false),
		CgroupDriver:        "cgroupfs",
		CgroupRoot:          CgroupRoot,
		CgroupsPerQOS:       ptr.To(true),
		FailSwapOn:          ptr.To(false),
		PodLogsDir:          l.PodLogs(),
		StaticPodPath:       "",
		RegisterNode:        ptr.To(true),
		MaxPods:             32,
		PodPidsLimit:        ptr.To[int64](4096),
		SerializeImagePulls: ptr.To(false),
		// Images are imported, never pulled: the kubelet must not collect
		// them, and the shared disk of a CI host must not evict pods.
		ImageGCHighThresholdPercent: ptr.To[int32](100),
		ImageGCLowThresholdPercent:  ptr.To[int32](99),
		EvictionHard:                map[string]string{"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
		NodeStatusReportFrequency:   metav1.Duration{Duration: 10 * time.Second},
		ResolverConfig:              ptr.To("/etc/resolv.conf"),
		ShutdownGracePeriod:         metav1.Duration{},
	}
	return yaml.Marshal(c)
}

func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
