package k8s

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/render"
)

var goldenProxyImage = "registry.example/hookbox/proxy@sha256:" + strings.Repeat("4", 64)

func proxyOptions(cilium bool) Options {
	o := goldenOptions()
	o.ProxyImage, o.Cilium = goldenProxyImage, cilium
	return o
}

// allowlistRender is testRender with an allowlist and the proxy variables
// the compiler sets for one.
func allowlistRender(allow ...render.Destination) *render.Render {
	r := testRender()
	r.Network = render.NetworkAllowlist
	r.Egress = render.NewEgress(allow)
	r.Process.Env = append(r.Process.Env,
		render.EnvVar{Name: "HTTPS_PROXY", Source: render.EnvHookbox, Value: render.ProxyURL},
		render.EnvVar{Name: "NO_PROXY", Source: render.EnvHookbox, Value: "127.0.0.1,localhost,::1"})
	r.SortLists()
	return r
}

func dest(host string, port int, kind string) render.Destination {
	return render.Destination{Host: host, Port: port, Kind: kind, Source: render.SourceSpec}
}

// TestProxySidecar: the proxy is the last init container, a native
// sidecar with a startup probe, reading render.json read-only, as
// restricted as the engine; the engine container is what it would be
// without an allowlist.
func TestProxySidecar(t *testing.T) {
	r := allowlistRender(dest("api.anthropic.com", 443, render.DestName))
	o, err := Build(r, proxyOptions(false))
	if err != nil {
		t.Fatal(err)
	}
	pod := o.Job.Spec.Template.Spec
	init := pod.InitContainers
	proxy := init[len(init)-1]
	if proxy.Name != ProxyContainer || proxy.Image != goldenProxyImage || proxy.RestartPolicy == nil || *proxy.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Fatalf("last init container %s (%s), restart policy %v", proxy.Name, proxy.Image, proxy.RestartPolicy)
	}
	if want := []string{"hookbox", "egress", "serve", "--listen", "127.0.0.1:3128", "--render", "/hookbox/render/render.json"}; !slices.Equal(proxy.Command, want) {
		t.Errorf("command %q", proxy.Command)
	}
	if p := proxy.StartupProbe; p == nil || p.Exec == nil || !slices.Equal(p.Exec.Command, []string{"hookbox", "egress", "probe", "--address", "127.0.0.1:3128"}) {
		t.Errorf("startup probe %+v", proxy.StartupProbe)
	}
	if want := []corev1.VolumeMount{{Name: volRender, MountPath: ProxyRenderDir, ReadOnly: true}}; !reflect.DeepEqual(proxy.VolumeMounts, want) {
		t.Errorf("mounts %+v", proxy.VolumeMounts)
	}
	if !reflect.DeepEqual(proxy.SecurityContext, containerSecurity(ProxyUID, ProxyUID)) {
		t.Errorf("security context %+v", proxy.SecurityContext)
	}
	var vol *corev1.Volume
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == volRender {
			vol = &pod.Volumes[i]
		}
	}
	if vol == nil || vol.ConfigMap == nil || vol.ConfigMap.Name != o.ConfigMap.Name || len(vol.ConfigMap.Items) != 1 || vol.ConfigMap.Items[0].Key != RenderKey {
		t.Errorf("render volume %+v", vol)
	}

	none := *r
	none.Network = render.NetworkNone
	plain, err := Build(&none, goldenOptions())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pod.Containers, plain.Job.Spec.Template.Spec.Containers) {
		t.Errorf("engine container differs from the one without an allowlist")
	}
	env := map[string]string{}
	for _, e := range engineContainer(t, o.Job).Env {
		env[e.Name] = e.Value
	}
	if env["HTTPS_PROXY"] != render.ProxyURL {
		t.Errorf("engine HTTPS_PROXY %q", env["HTTPS_PROXY"])
	}
	if !reflect.DeepEqual(init[:len(init)-1], plain.Job.Spec.Template.Spec.InitContainers) {
		t.Errorf("seed containers differ")
	}
}

func TestEgressNetworkPolicy(t *testing.T) {
	public := publicAddresses()
	dns := networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: selector(dnsNamespace), PodSelector: selector(dnsPods)}},
		Ports: []networkingv1.NetworkPolicyPort{
			{Protocol: ptr(corev1.ProtocolUDP), Port: intPort(53)}, {Protocol: ptr(corev1.ProtocolTCP), Port: intPort(53)},
		},
	}
	ipRule := func(cidr string, port int) networkingv1.NetworkPolicyEgressRule {
		return networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: cidr}}}, Ports: tcpPorts(port)}
	}
	for name, tc := range map[string]struct {
		allow  []render.Destination
		cilium bool
		want   []networkingv1.NetworkPolicyEgressRule
		notes  []string // substrings of the not-reproduced annotation
	}{
		"ip only": {
			allow: []render.Destination{dest("192.0.2.7", 8443, render.DestIP), dest("2001:db8::1", 443, render.DestIP)},
			want:  []networkingv1.NetworkPolicyEgressRule{ipRule("192.0.2.7/32", 8443), ipRule("2001:db8::1/128", 443)},
			notes: []string{"egress to IP entries: the engine can connect to them without the proxy", "egress only where the CNI enforces NetworkPolicy"},
		},
		"names, wildcards and an ip": {
			allow: []render.Destination{dest("api.anthropic.com", 443, render.DestName), dest("*.example.com", 8443, render.DestWildcard),
				dest("mcp.example.org", 443, render.DestName), dest("10.1.2.3", 443, render.DestIP)},
			want: []networkingv1.NetworkPolicyEgressRule{ipRule("10.1.2.3/32", 443), {To: public, Ports: tcpPorts(443, 8443)}, dns},
			notes: []string{"TCP port 443, 8443 is open to every public address", "the engine can bypass the proxy to any such address on those ports",
				"DNS to kube-dns is open to every container for any name", "egress to IP entries"},
		},
		"cilium": {
			allow:  []render.Destination{dest("api.anthropic.com", 443, render.DestName), dest("10.1.2.3", 443, render.DestIP)},
			cilium: true,
			want:   []networkingv1.NetworkPolicyEgressRule{ipRule("10.1.2.3/32", 443)},
			notes:  []string{"under Cilium: the engine can reach the allowed destinations without the proxy (unrecorded, no SNI check), but no other address; its DNS queries are limited", "where Cilium enforces"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			o, err := Build(allowlistRender(tc.allow...), proxyOptions(tc.cilium))
			if err != nil {
				t.Fatal(err)
			}
			if got := o.NetworkPolicy.Spec.Egress; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("egress rules\n got %+v\nwant %+v", got, tc.want)
			}
			if len(o.NetworkPolicy.Spec.Ingress) != 0 {
				t.Errorf("ingress %+v", o.NetworkPolicy.Spec.Ingress)
			}
			if (o.CiliumNetworkPolicy != nil) != tc.cilium {
				t.Errorf("cilium policy %v", o.CiliumNetworkPolicy)
			}
			note := o.Job.Annotations[AnnotationNotReproduced]
			for _, want := range tc.notes {
				if !strings.Contains(note, want) {
					t.Errorf("annotation lacks %q:\n%s", want, note)
				}
			}
			if strings.Contains(note, "network none") {
				t.Errorf("annotation speaks of network none: %s", note)
			}
		})
	}
	// The public ranges leave out what the proxy refuses for a name.
	if v4 := public[0].IPBlock; v4.CIDR != "0.0.0.0/0" || !slices.Contains(v4.Except, "169.254.0.0/16") || !slices.Contains(v4.Except, "10.0.0.0/8") {
		t.Errorf("IPv4 block %+v", v4)
	}
	if v6 := public[1].IPBlock; v6.CIDR != "::/0" || !slices.Contains(v6.Except, "fc00::/7") || slices.Contains(v6.Except, "::/0") {
		t.Errorf("IPv6 block %+v", v6)
	}
}

// TestCiliumPolicy: names by matchName, wildcards by "**." (any depth),
// addresses by toCIDR, and the DNS rule that lets Cilium learn the names'
// addresses, limited to those names.
func TestCiliumPolicy(t *testing.T) {
	r := allowlistRender(dest("api.anthropic.com", 443, render.DestName), dest("*.example.com", 8443, render.DestWildcard), dest("192.0.2.7", 443, render.DestIP))
	o, err := Build(r, proxyOptions(true))
	if err != nil {
		t.Fatal(err)
	}
	got, err := yaml.Marshal(o.CiliumNetworkPolicy["spec"])
	if err != nil {
		t.Fatal(err)
	}
	want := `egress:
- toEndpoints:
  - matchLabels:
      k8s:io.kubernetes.pod.namespace: kube-system
      k8s:k8s-app: kube-dns
  toPorts:
  - ports:
    - port: "53"
      protocol: ANY
    rules:
      dns:
      - matchPattern: '**.example.com'
      - matchName: api.anthropic.com
- toFQDNs:
  - matchPattern: '**.example.com'
  toPorts:
  - ports:
    - port: "8443"
      protocol: TCP
- toFQDNs:
  - matchName: api.anthropic.com
  toPorts:
  - ports:
    - port: "443"
      protocol: TCP
- toCIDR:
  - 192.0.2.7/32
  toPorts:
  - ports:
    - port: "443"
      protocol: TCP
endpointSelector:
  matchLabels:
    hookbox.dev/render: ` + o.Job.Labels[LabelRender] + `
    hookbox.dev/spawn: t
`
	if string(got) != want {
		t.Errorf("spec:\n%s", testenv.FirstDiff(string(got), want))
	}
	if o.CiliumNetworkPolicy["apiVersion"] != "cilium.io/v2" || o.CiliumNetworkPolicy["kind"] != "CiliumNetworkPolicy" {
		t.Errorf("type %v %v", o.CiliumNetworkPolicy["apiVersion"], o.CiliumNetworkPolicy["kind"])
	}
	// Without names there is no DNS rule.
	o, err = Build(allowlistRender(dest("192.0.2.7", 443, render.DestIP)), proxyOptions(true))
	if err != nil {
		t.Fatal(err)
	}
	if rules := o.CiliumNetworkPolicy["spec"].(map[string]any)["egress"].([]any); len(rules) != 1 || rules[0].(map[string]any)["toCIDR"] == nil {
		t.Errorf("ip-only rules %v", rules)
	}
}

// TestEgressGolden: examples/egress.yaml as plain Kubernetes and with
// --cilium, byte for byte.
func TestEgressGolden(t *testing.T) {
	for golden, cilium := range map[string]bool{"egress.yaml": false, "egress-cilium.yaml": true} {
		renders := compileExample(t, "egress", nil)
		for i, r := range renders {
			renders[i] = neutralRender(t, r)
		}
		got, err := YAML(renders, proxyOptions(cilium))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", golden)
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./render/k8s -run Golden -update to create it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs (run with -update after checking the change):\n%s", path, testenv.FirstDiff(string(got), string(want)))
		}
		if n := bytes.Count(got, []byte("\n---\n")) + 1; n != 3+btoi(cilium) {
			t.Errorf("%s: %d documents", golden, n)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func selector(m map[string]string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: m}
}

func intPort(p int32) *intstr.IntOrString { return ptr(intstr.FromInt32(p)) }

// TestGatewaySecretOnlyInTheSidecar: a gateway's secret is referenced by
// the proxy sidecar alone; the engine container holds the placeholder.
func TestGatewaySecretOnlyInTheSidecar(t *testing.T) {
	r := allowlistRender(render.Destination{Host: "api.anthropic.com", Port: 443, Kind: render.DestName, Source: render.SourceGateway + "anthropic"})
	r.Gateways = []render.Gateway{{Kind: "anthropic", Listen: "127.0.0.1:3129", Upstream: "https://api.anthropic.com", Header: "x-api-key",
		Paths: []string{"/v1/"}, Secret: "ANTHROPIC_API_KEY", Placeholder: "hookbox-gateway-placeholder"}}
	r.Process.Env = append(r.Process.Env, render.EnvVar{Name: "ANTHROPIC_API_KEY", Source: render.EnvHookbox, Value: "hookbox-gateway-placeholder"})
	r.SortLists()
	o, err := Build(r, proxyOptions(false))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range engineContainer(t, o.Job).Env {
		if e.Name == "ANTHROPIC_API_KEY" && (e.ValueFrom != nil || e.Value != "hookbox-gateway-placeholder") {
			t.Errorf("engine container's ANTHROPIC_API_KEY %+v, want the placeholder", e)
		}
	}
	init := o.Job.Spec.Template.Spec.InitContainers
	proxy := init[len(init)-1]
	if len(proxy.Env) != 1 || proxy.Env[0].Name != "ANTHROPIC_API_KEY" || proxy.Env[0].ValueFrom == nil || proxy.Env[0].ValueFrom.SecretKeyRef == nil ||
		proxy.Env[0].ValueFrom.SecretKeyRef.Name != DefaultSecretName || proxy.Env[0].ValueFrom.SecretKeyRef.Key != "ANTHROPIC_API_KEY" {
		t.Errorf("sidecar env %+v, want the secret by reference", proxy.Env)
	}
	for _, c := range init[:len(init)-1] {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				t.Errorf("init container %s references a secret: %+v", c.Name, e)
			}
		}
	}
}
