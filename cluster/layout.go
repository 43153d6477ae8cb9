package cluster

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
)

// Default directories of a cluster: nothing of it lives anywhere else,
// except the kubelet's symlinks in /var/log/containers (a path the kubelet
// hard-codes), which down removes.
const (
	DefaultState = "/var/lib/hookbox-cluster"
	DefaultRun   = "/run/hookbox-cluster"
)

// Every listener is on loopback. The ports are not the components' defaults,
// so that the cluster does not collide with another Kubernetes on the host.
const (
	Host                  = "127.0.0.1"
	EtcdClientPort        = 12379
	EtcdPeerPort          = 12380
	APIServerPort         = 16443
	ControllerManagerPort = 10357
	SchedulerPort         = 10359
	KubeletPort           = 10350
	KubeletHealthzPort    = 10348
)

// NodeName is the node's name and hostname. The kubelet refuses a loopback
// --node-ip, but takes the IP of an IP-shaped hostname override as the
// node's InternalIP, so the API server reaches the kubelet (logs, exec) on
// loopback too.
const NodeName = Host

// Networks of the cluster: pods get addresses on a host-only bridge (no
// uplink, no masquerading); services get cluster IPs that nothing
// implements (no kube-proxy), which only the API server's own service uses.
const (
	PodSubnet     = "10.244.77.0/24"
	ServiceSubnet = "10.96.77.0/24"
	APIServiceIP  = "10.96.77.1"
	Bridge        = "hbxcni0"
)

// CgroupRoot is the kubelet's cgroup root, in every hierarchy: the pods'
// cgroups live under it, apart from hookbox's own (/hookbox/...).
const CgroupRoot = "/hookbox-cluster"

// Namespace is containerd's namespace for Kubernetes (CRI).
const Namespace = "k8s.io"

// PauseImage is the sandbox image, built by hookbox-cluster up from
// Bin/pause and imported before the kubelet starts (no registry is needed).
const PauseImage = "hookbox.dev/cluster/pause:1"

// Layout names every path of a cluster.
type Layout struct {
	Bin   string // the binaries
	State string // DefaultState
	Run   string // DefaultRun
}

func (l Layout) BinPath(name string) string    { return filepath.Join(l.Bin, name) }
func (l Layout) CNIBin() string                { return filepath.Join(l.Bin, "cni") }
func (l Layout) PKI() string                   { return filepath.Join(l.State, "pki") }
func (l Layout) Kubeconfig(user string) string { return filepath.Join(l.State, user+".conf") }
func (l Layout) AdminKubeconfig() string       { return l.Kubeconfig("admin") }
func (l Layout) Logs() string                  { return filepath.Join(l.State, "logs") }
func (l Layout) Log(component string) string   { return filepath.Join(l.Logs(), component+".log") }
func (l Layout) EtcdData() string              { return filepath.Join(l.State, "etcd") }
func (l Layout) ContainerdRoot() string        { return filepath.Join(l.State, "containerd") }
func (l Layout) ContainerdState() string       { return filepath.Join(l.Run, "containerd") }
func (l Layout) ContainerdConfig() string      { return filepath.Join(l.State, "containerd.toml") }
func (l Layout) ContainerdSocket() string      { return filepath.Join(l.Run, "containerd.sock") }
func (l Layout) NRISocket() string             { return filepath.Join(l.Run, "nri.sock") }
func (l Layout) RuncRoot() string              { return filepath.Join(l.Run, "runc") }
func (l Layout) CNIConf() string               { return filepath.Join(l.State, "cni", "net.d") }
func (l Layout) CNIIPAM() string               { return filepath.Join(l.State, "cni", "ipam") }
func (l Layout) KubeletRoot() string           { return filepath.Join(l.State, "kubelet") }
func (l Layout) KubeletConfig() string         { return filepath.Join(l.State, "kubelet.yaml") }
func (l Layout) PodLogs() string               { return filepath.Join(l.State, "pod-logs") }
func (l Layout) PidFile(component string) string {
	return filepath.Join(l.Run, component+".pid")
}

// CRIEndpoint is containerd's socket as the kubelet names it.
func (l Layout) CRIEndpoint() string { return "unix://" + l.ContainerdSocket() }

// APIServerURL is where kubectl and the components reach the API server.
func APIServerURL() string { return "https://" + HostPort(APIServerPort) }

// EtcdURL is etcd's client URL (plain HTTP, loopback).
func EtcdURL() string { return "http://" + HostPort(EtcdClientPort) }

// EtcdPeerURL is etcd's peer URL (a one-member cluster listens on it too).
func EtcdPeerURL() string { return "http://" + HostPort(EtcdPeerPort) }

// HostPort is Host:port.
func HostPort(port int) string { return net.JoinHostPort(Host, strconv.Itoa(port)) }

// Components, in start order; down stops them in reverse.
var Components = []string{"etcd", "containerd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"}

// String describes the layout for messages.
func (l Layout) String() string {
	return fmt.Sprintf("bin %s, state %s, run %s", l.Bin, l.State, l.Run)
}
