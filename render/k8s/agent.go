package k8s

import (
	"bytes"
	"fmt"
	"path"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// AgentOptions say where the node agent (hookbox tracer serve --node,
// docs/node-agent.md) runs and whose Jobs it may write verdicts for.
type AgentOptions struct {
	// Image holds the static hookbox at AgentProgram (the proxy image of
	// hookbox image build), pinned by digest.
	Image string
	// Namespace is the agent's own (its DaemonSet and service account).
	Namespace string
	// JobNamespaces are the namespaces whose Jobs the agent judges: its
	// role is bound in each, and nowhere else.
	JobNamespaces []string
	// KeySecret is the Secret in Namespace holding the node's signing key
	// (key attestation.key, hookbox key generate's file).
	KeySecret string
	// NRISocket is containerd's NRI socket on the node.
	NRISocket string
}

// Names of the agent's parts.
const (
	AgentName      = "hookbox-node-agent"
	AgentProgram   = "/usr/local/bin/hookbox"
	agentKeyDir    = "/etc/hookbox-node"
	agentKeyFile   = "attestation.key"
	agentStateDir  = "/var/lib/hookbox"
	defaultNRISock = "/var/run/nri/nri.sock"
)

// AgentObjects are the node agent's objects.
type AgentObjects struct {
	ServiceAccount *corev1.ServiceAccount
	ClusterRole    *rbacv1.ClusterRole
	RoleBindings   []*rbacv1.RoleBinding
	DaemonSet      *appsv1.DaemonSet
}

// Agent builds the node agent's DaemonSet and RBAC. Its role allows only
// what it does: read a Job's render ConfigMap, and create or update the
// verdict ConfigMap, bound by a RoleBinding in each of JobNamespaces (a
// ClusterRole so the one definition serves every binding; no
// ClusterRoleBinding).
func Agent(o AgentOptions) (*AgentObjects, error) {
	if o.NRISocket == "" {
		o.NRISocket = defaultNRISock
	}
	if o.KeySecret == "" {
		o.KeySecret = AgentName + "-key"
	}
	var problems []string
	if !pinnedRef(o.Image) {
		problems = append(problems, fmt.Sprintf("--image %q: give the image holding the static hookbox, pinned by digest, NAME@sha256:<64 hex>", o.Image))
	}
	for _, ns := range append([]string{o.Namespace}, o.JobNamespaces...) {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("namespace %q: %v", ns, errs))
		}
	}
	if !path.IsAbs(o.NRISocket) {
		problems = append(problems, fmt.Sprintf("--nri-socket %q: give the socket's absolute path on the node", o.NRISocket))
	}
	if len(o.JobNamespaces) == 0 {
		problems = append(problems, "--job-namespace: name at least one namespace whose Jobs the agent judges (its role is bound there only)")
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %v", ErrOptions, problems)
	}
	labels := map[string]string{LabelManagedBy: "hookbox", "app.kubernetes.io/name": AgentName}
	meta := metav1.ObjectMeta{Name: AgentName, Namespace: o.Namespace, Labels: labels}
	objs := &AgentObjects{
		ServiceAccount: &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: meta},
		ClusterRole: &rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: AgentName, Labels: labels},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
				Verbs: []string{"get", "create", "update"}}},
		},
	}
	jobNamespaces := slices.Clone(o.JobNamespaces)
	slices.Sort(jobNamespaces)
	for _, ns := range slices.Compact(jobNamespaces) {
		objs.RoleBindings = append(objs.RoleBindings, &rbacv1.RoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: AgentName, Namespace: ns, Labels: labels},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: AgentName},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: AgentName, Namespace: o.Namespace}},
		})
	}
	nriDir := path.Dir(o.NRISocket)
	hostDir := corev1.HostPathDirectory
	vol := func(name, path string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &hostDir}}}
	}
	objs.DaemonSet = &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: meta,
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: AgentName,
					// The containers it judges are the node's: their pids,
					// /proc/<pid>/root and pidfds are in the host's pid
					// namespace.
					HostPID:           true,
					PriorityClassName: "system-node-critical",
					Containers: []corev1.Container{{
						Name:            "agent",
						Image:           o.Image,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command: []string{AgentProgram, "tracer", "serve", "--node", "--nri-socket", o.NRISocket,
							"--signing-key", agentKeyDir + "/" + agentKeyFile, "--state-dir", agentStateDir},
						SecurityContext: &corev1.SecurityContext{
							// Root with only what BPF, tracefs and reading other
							// containers' roots need; not privileged. No
							// SYS_RESOURCE: BPF memory is charged to the cgroup
							// since Linux 5.11 (the tracer needs newer), and a
							// capability the node's root lacks fails the start.
							RunAsUser:                ptr(int64(0)),
							Privileged:               ptr(false),
							AllowPrivilegeEscalation: ptr(false),
							ReadOnlyRootFilesystem:   ptr(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"},
								Add: []corev1.Capability{"BPF", "PERFMON", "SYS_ADMIN", "SYS_PTRACE", "DAC_READ_SEARCH"}},
						},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "nri", MountPath: nriDir},
							{Name: "cgroup", MountPath: "/sys/fs/cgroup", ReadOnly: true},
							{Name: "tracing", MountPath: "/sys/kernel/tracing"},
							{Name: "security", MountPath: "/sys/kernel/security", ReadOnly: true},
							{Name: "key", MountPath: agentKeyDir, ReadOnly: true},
							{Name: "state", MountPath: agentStateDir},
						},
					}},
					Volumes: []corev1.Volume{
						vol("nri", nriDir), vol("cgroup", "/sys/fs/cgroup"), vol("tracing", "/sys/kernel/tracing"),
						vol("security", "/sys/kernel/security"),
						{Name: "key", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: o.KeySecret,
							DefaultMode: ptr(int32(0o400)), Items: []corev1.KeyToPath{{Key: agentKeyFile, Path: agentKeyFile}}}}},
						{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					},
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
				},
			},
		},
	}
	return objs, nil
}

// Marshal writes the agent's objects as multi-document YAML.
func (a *AgentObjects) Marshal() ([]byte, error) {
	docs := []any{a.ServiceAccount, a.ClusterRole}
	for _, rb := range a.RoleBindings {
		docs = append(docs, rb)
	}
	docs = append(docs, a.DaemonSet)
	var out bytes.Buffer
	for _, d := range docs {
		doc, err := marshalDocument(d)
		if err != nil {
			return nil, err
		}
		out.WriteString("---\n")
		out.Write(doc)
	}
	return out.Bytes(), nil
}
