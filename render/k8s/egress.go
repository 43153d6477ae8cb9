package k8s

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"hookbox.dev/hookbox/internal/addrclass"
	"hookbox.dev/hookbox/render"
)

// The egress proxy sidecar of an allowlist render.
const (
	// ProxyContainer runs `hookbox egress serve` beside the engine. The
	// pod's containers share one network namespace, so the engine's proxy
	// variables (render.ProxyURL) reach it on loopback.
	ProxyContainer = "egress-proxy"
	// ProxyRenderDir is where the sidecar sees the ConfigMap's render.json.
	ProxyRenderDir = "/hookbox/render"
	// ProxyUID runs the sidecar: unprivileged, as the engine.
	ProxyUID  = 65532
	volRender = "render"
)

// Cluster DNS, which the sidecar resolves allowed names with.
var (
	dnsNamespace = map[string]string{"kubernetes.io/metadata.name": "kube-system"}
	dnsPods      = map[string]string{"k8s-app": "kube-dns"}
)

// proxyContainer is the native sidecar (an init container that keeps
// running): it starts before the engine, which waits for its startup
// probe, and the kubelet stops it once the engine has exited.
func (b *builder) proxyContainer() (corev1.Container, error) {
	address := b.r.Egress.ProxyAddress
	if _, _, err := net.SplitHostPort(address); err != nil {
		return corev1.Container{}, fmt.Errorf("%w: proxy address %q: %v; recompile the spec", ErrUnsupported, address, err)
	}
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("128Mi")}
	return corev1.Container{
		Name:            ProxyContainer,
		Image:           b.opts.ProxyImage,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command: escapeAll([]string{"hookbox", "egress", "serve",
			"--listen", address, "--render", ProxyRenderDir + "/" + RenderKey}),
		RestartPolicy: ptr(corev1.ContainerRestartPolicyAlways),
		// The kubelet probes from the node, and a tcpSocket probe of the
		// pod's loopback would reach the node's own: the probe runs in the
		// pod's network namespace instead.
		StartupProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
				Command: []string{"hookbox", "egress", "probe", "--address", address},
			}},
			PeriodSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 30,
		},
		Resources:       corev1.ResourceRequirements{Limits: small, Requests: small.DeepCopy()},
		Env:             b.gatewaySecrets(),
		VolumeMounts:    []corev1.VolumeMount{{Name: volRender, MountPath: ProxyRenderDir, ReadOnly: true}},
		SecurityContext: containerSecurity(ProxyUID, ProxyUID),
	}, nil
}

// renderVolume holds the render's canonical JSON, for the sidecar.
func (b *builder) renderVolume() corev1.Volume {
	return corev1.Volume{Name: volRender, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: b.name},
			Items:                []corev1.KeyToPath{{Key: RenderKey, Path: RenderKey, Mode: ptr(int32(0o444))}},
		},
	}}
}

// allowlist splits the render's destinations: IP entries, and the ports of
// name and wildcard entries (sorted, once each).
func allowlist(e *render.Egress) (ips []render.Destination, namePorts []int, names []render.Destination) {
	for _, d := range e.Allow {
		if d.Kind == render.DestIP {
			ips = append(ips, d)
			continue
		}
		names = append(names, d)
		namePorts = append(namePorts, d.Port)
	}
	slices.Sort(namePorts)
	return ips, slices.Compact(namePorts), names
}

func tcpPorts(ports ...int) []networkingv1.NetworkPolicyPort {
	out := make([]networkingv1.NetworkPolicyPort, len(ports))
	for i, p := range ports {
		out[i] = networkingv1.NetworkPolicyPort{Protocol: ptr(corev1.ProtocolTCP), Port: ptr(intstr.FromInt32(int32(p)))}
	}
	return out
}

// hostPrefix is an address as a one-address CIDR.
func hostPrefix(host string) (string, error) {
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return "", fmt.Errorf("%w: destination %s is not an IP address: %v; recompile the spec", ErrUnsupported, host, err)
	}
	return netip.PrefixFrom(ip, ip.BitLen()).String(), nil
}

// publicAddresses is every address the proxy may reach for a name: all of
// IPv4 and IPv6 except the internal ranges it refuses (addrclass.Prefixes).
func publicAddresses() []networkingv1.NetworkPolicyPeer {
	v4 := &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}
	v6 := &networkingv1.IPBlock{CIDR: "::/0"}
	for _, p := range addrclass.Prefixes() {
		if p.Addr().Is4() {
			v4.Except = append(v4.Except, p.String())
		} else if p.Bits() > 0 {
			v6.Except = append(v6.Except, p.String())
		}
	}
	return []networkingv1.NetworkPolicyPeer{{IPBlock: v4}, {IPBlock: v6}}
}

// egressRules are what the NetworkPolicy lets out of an allowlist pod: each
// IP entry's address and port; the ports of name entries to every public
// address (a NetworkPolicy cannot name hosts), unless Cilium's policy
// allows the names; and DNS to the cluster's resolver when there are names.
func egressRules(e *render.Egress, cilium bool) ([]networkingv1.NetworkPolicyEgressRule, error) {
	ips, namePorts, _ := allowlist(e)
	var rules []networkingv1.NetworkPolicyEgressRule
	for _, d := range ips {
		cidr, err := hostPrefix(d.Host)
		if err != nil {
			return nil, err
		}
		rules = append(rules, networkingv1.NetworkPolicyEgressRule{
			To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: cidr}}}, Ports: tcpPorts(d.Port),
		})
	}
	// Under Cilium both policies apply and their allows add up: opening
	// the name ports here would undo the FQDN rules.
	if len(namePorts) > 0 && !cilium {
		rules = append(rules,
			networkingv1.NetworkPolicyEgressRule{To: publicAddresses(), Ports: tcpPorts(namePorts...)},
			networkingv1.NetworkPolicyEgressRule{
				To: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: clone(dnsNamespace)},
					PodSelector:       &metav1.LabelSelector{MatchLabels: clone(dnsPods)},
				}},
				Ports: []networkingv1.NetworkPolicyPort{
					{Protocol: ptr(corev1.ProtocolUDP), Port: ptr(intstr.FromInt32(53))},
					{Protocol: ptr(corev1.ProtocolTCP), Port: ptr(intstr.FromInt32(53))},
				},
			})
	}
	return rules, nil
}

// ciliumPolicy is a cilium.io/v2 CiliumNetworkPolicy selecting the pod:
// names and wildcards by FQDN (learnt from the pod's DNS answers, which
// Cilium's DNS proxy sees and limits to those names), IP entries by CIDR.
// It is a plain map: no Cilium module for one document.
func ciliumPolicy(meta metav1.ObjectMeta, selector map[string]string, e *render.Egress) (map[string]any, error) {
	ips, _, names := allowlist(e)
	var egressRules, dnsNames []any
	for _, d := range names {
		fqdn := map[string]any{"matchName": d.Host}
		if d.Kind == render.DestWildcard {
			// "**." is Cilium's one-or-more labels, as the proxy's "*."
			// (Cilium's "*." would match one label only).
			fqdn = map[string]any{"matchPattern": "*" + d.Host}
		}
		dnsNames = append(dnsNames, fqdn)
		egressRules = append(egressRules, map[string]any{
			"toFQDNs": []any{fqdn},
			"toPorts": []any{map[string]any{"ports": []any{map[string]any{"port": strconv.Itoa(d.Port), "protocol": "TCP"}}}},
		})
	}
	for _, d := range ips {
		cidr, err := hostPrefix(d.Host)
		if err != nil {
			return nil, err
		}
		egressRules = append(egressRules, map[string]any{
			"toCIDR":  []any{cidr},
			"toPorts": []any{map[string]any{"ports": []any{map[string]any{"port": strconv.Itoa(d.Port), "protocol": "TCP"}}}},
		})
	}
	if len(dnsNames) > 0 {
		dns := map[string]any{
			"toEndpoints": []any{map[string]any{"matchLabels": map[string]any{
				"k8s:io.kubernetes.pod.namespace": dnsNamespace["kubernetes.io/metadata.name"],
				"k8s:k8s-app":                     dnsPods["k8s-app"],
			}}},
			"toPorts": []any{map[string]any{
				"ports": []any{map[string]any{"port": "53", "protocol": "ANY"}},
				"rules": map[string]any{"dns": dnsNames},
			}},
		}
		egressRules = append([]any{dns}, egressRules...)
	}
	labels := map[string]any{}
	for k, v := range selector {
		labels[k] = v
	}
	metadata := map[string]any{"name": meta.Name, "labels": stringMap(meta.Labels), "annotations": stringMap(meta.Annotations)}
	if meta.Namespace != "" {
		metadata["namespace"] = meta.Namespace
	}
	return map[string]any{
		"apiVersion": "cilium.io/v2",
		"kind":       "CiliumNetworkPolicy",
		"metadata":   metadata,
		"spec": map[string]any{
			"endpointSelector": map[string]any{"matchLabels": labels},
			// Any egress rule makes everything else denied; no ingress
			// rule is given: the NetworkPolicy already denies ingress.
			"egress": egressRules,
		},
	}, nil
}

func stringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// egressNotes say what the cluster does not reproduce of an allowlist.
func egressNotes(e *render.Egress, cilium bool) []string {
	ips, namePorts, names := allowlist(e)
	ports := make([]string, len(namePorts))
	for i, p := range namePorts {
		ports[i] = strconv.Itoa(p)
	}
	var notes []string
	switch {
	case cilium:
		note := "egress allowlist under Cilium: the engine can reach the allowed destinations without the proxy (unrecorded, no SNI check), but no other address"
		if len(names) > 0 {
			note += "; its DNS queries are limited to the allowed names"
		}
		notes = append(notes, note)
	case len(names) > 0:
		notes = append(notes, "egress allowlist by name: a NetworkPolicy cannot name hosts, so TCP port "+strings.Join(ports, ", ")+
			" is open to every public address (0.0.0.0/0 and ::/0 except the internal ranges the proxy refuses) and the pod's containers share one network namespace:"+
			" the engine can bypass the proxy to any such address on those ports, unrecorded, with no name or SNI check;"+
			" DNS to kube-dns is open to every container for any name (a channel out through the cluster's resolver)")
	}
	if len(ips) > 0 && !cilium {
		notes = append(notes, "egress to IP entries: the engine can connect to them without the proxy (unrecorded, no SNI check)")
	}
	if cilium {
		notes = append(notes, "egress only where Cilium enforces the CiliumNetworkPolicy (the NetworkPolicy alone lets no name out)")
	} else {
		notes = append(notes, "egress only where the CNI enforces NetworkPolicy")
	}
	return notes
}

// gatewaySecrets are the sidecar's variables: each gateway's secret from
// the Secret, which the engine container never references (its variable
// holds the render's placeholder).
func (b *builder) gatewaySecrets() []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, g := range b.r.Gateways {
		out = append(out, corev1.EnvVar{Name: g.Secret, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: b.opts.SecretName}, Key: g.Secret,
		}}})
	}
	return out
}
