package cluster

import "strconv"

func apiserverArgs(l Layout) []string {
	p := l.pkiFile
	return []string{
		l.BinPath("kube-apiserver"),
		"--etcd-servers=" + EtcdURL(),
		"--bind-address=" + Host,
		"--advertise-address=" + Host,
		// The reconciler refuses a loopback address for the kubernetes
		// service's endpoints; no pod here talks to the API server.
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(APIServerPort),
		"--tls-cert-file=" + p("apiserver.crt"),
		"--tls-private-key-file=" + p("apiserver.key"),
		"--client-ca-file=" + p("ca.crt"),
		"--kubelet-client-certificate=" + p("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + p("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority=" + p("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p("sa.pub"),
		"--service-account-signing-key-file=" + p("sa.key"),
		"--service-cluster-ip-range=" + ServiceSubnet,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--anonymous-auth=false",
		"--profiling=false",
	}
}

func controllerManagerArgs(l Layout) []string {
	kc := l.Kubeconfig("kube-controller-manager")
	return []string{
		l.BinPath("kube-controller-manager"),
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=" + Host,
		"--secure-port=" + strconv.Itoa(ControllerManagerPort),
		"--client-ca-file=" + l.pkiFile("ca.crt"),
		"--root-ca-file=" + l.pkiFile("ca.crt"),
		"--service-account-private-key-file=" + l.pkiFile("sa.key"),
		"--service-cluster-ip-range=" + ServiceSubnet,
		"--use-service-account-credentials=true",
		"--leader-elect=false",
		"--profiling=false",
	}
}

func schedulerArgs(l Layout) []string {
	kc := l.Kubeconfig("kube-scheduler")
	return []string{
		l.BinPath("kube-scheduler"),
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=" + Host,
		"--secure-port=" + strconv.Itoa(SchedulerPort),
		"--leader-elect=false",
		"--profiling=false",
	}
}

func kubeletArgs(l Layout) []string {
	return []string{
		l.BinPath("kubelet"),
		"--config=" + l.KubeletConfig(),
		"--kubeconfig=" + l.Kubeconfig("kubelet"),
		"--hostname-override=" + NodeName,
		"--root-dir=" + l.KubeletRoot(),
		"--cert-dir=" + l.KubeletRoot() + "/pki",
		"--v=2",
	}
}
