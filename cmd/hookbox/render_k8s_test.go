//go:build !hookbox_lite

package main

import (
	"strings"
	"testing"
)

// k8sArgs are the flags every --format k8s run needs.
var k8sArgs = []string{"render", "--format", "k8s",
	"--image", "registry.example/hookbox/base@sha256:" + strings.Repeat("1", 64),
	"--runfiles-image", "registry.example/hookbox/runfiles@sha256:" + strings.Repeat("2", 64),
	"--seed-image", "registry.example/hookbox/seed@sha256:" + strings.Repeat("3", 64)}

func k8sRun(t *testing.T, extra ...string) (int, string, string) {
	t.Helper()
	return runCLI(t, append(append([]string(nil), k8sArgs...), extra...)...)
}

func TestRenderK8s(t *testing.T) {
	code, stdout, stderr := k8sRun(t, "--set", "pr=4711", "--set", "ref=refs/pull/4711/head", "--namespace", "reviews", "../../examples/pipeline.yaml")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if n := strings.Count(stdout, "\nkind: Job\n"); n != 3 {
		t.Errorf("%d Jobs for three spawns", n)
	}
	for _, want := range []string{"value: \"4711\"", "value: refs/pull/4711/head", "namespace: reviews", "claimName: hookbox-workspace", "name: hookbox-secrets"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q", want)
		}
	}

	// The default engine image is the base image this host builds.
	args := append([]string{"render", "--format", "k8s"}, k8sArgs[5:]...)
	code, stdout, stderr = runCLI(t, append(args, "../../examples/review.yaml")...)
	if code != exitOK || !strings.Contains(stdout, "image: hookbox.dev/base:") {
		t.Errorf("default image: exit %d %s", code, stderr)
	}

	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"undeclared --set":                {[]string{"--set", "typo=1", "../../examples/pipeline.yaml"}, `--set typo: the spec declares no param "typo"`},
		"malformed --set":                 {[]string{"--set", "pr", "../../examples/pipeline.yaml"}, "write NAME=VALUE"},
		"image not pinned":                {[]string{"--runfiles-image", "runfiles:latest", "../../examples/review.yaml"}, "pinned by digest"},
		"bad secret name":                 {[]string{"--secret-name", "Bad_Name", "../../examples/review.yaml"}, "--secret-name"},
		"unknown format":                  {[]string{"--format", "helm", "../../examples/review.yaml"}, "use json, text, digests, oci, k8s"},
		"allowlist without --proxy-image": {[]string{"../../examples/egress.yaml"}, "give --proxy-image"},
		"proxy image not pinned":          {[]string{"--proxy-image", "hookbox:latest", "../../examples/egress.yaml"}, "--proxy-image"},
	} {
		code, _, stderr := k8sRun(t, tc.args...)
		if code != exitSpec || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q, want %q", name, code, stderr, tc.want)
		}
	}
}

// TestRenderK8sEgress: an allowlist spec gets the proxy sidecar, and with
// --cilium a CiliumNetworkPolicy; both flags are k8s-only.
func TestRenderK8sEgress(t *testing.T) {
	proxy := "registry.example/hookbox/proxy@sha256:" + strings.Repeat("4", 64)
	code, stdout, stderr := k8sRun(t, "--proxy-image", proxy, "../../examples/egress.yaml")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"name: egress-proxy", "image: " + proxy, "restartPolicy: Always", "cidr: 0.0.0.0/0", "k8s-app: kube-dns"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(stdout, "CiliumNetworkPolicy") {
		t.Error("a CiliumNetworkPolicy without --cilium")
	}
	code, stdout, stderr = k8sRun(t, "--proxy-image", proxy, "--cilium", "../../examples/egress.yaml")
	if code != exitOK || !strings.Contains(stdout, "kind: CiliumNetworkPolicy") || !strings.Contains(stdout, "matchName: api.anthropic.com") {
		t.Errorf("--cilium: exit %d %s", code, stderr)
	}
	for _, flag := range [][]string{{"--proxy-image", proxy}, {"--cilium"}} {
		code, _, stderr := runCLI(t, append(append([]string{"render", "--format", "json"}, flag...), "../../examples/egress.yaml")...)
		if code != exitSpec || !strings.Contains(stderr, flag[0]+" applies to --format k8s only") {
			t.Errorf("%s with --format json: exit %d %s", flag[0], code, stderr)
		}
	}
}

// TestRenderK8sSentinel: with a sentinel under every forwarded name, no
// --format k8s output contains it, and the secrets are referenced.
func TestRenderK8sSentinel(t *testing.T) {
	const sentinel = "hbx-sentinel-k8s-cli-9a41"
	for _, name := range []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "LANG"} {
		t.Setenv(name, sentinel)
	}
	for _, example := range []string{"review", "pipeline", "codex", "hello"} {
		code, stdout, stderr := k8sRun(t, "../../examples/"+example+".yaml")
		if code != exitOK {
			t.Fatalf("%s: exit %d: %s", example, code, stderr)
		}
		if strings.Contains(stdout, sentinel) || strings.Contains(stderr, sentinel) {
			t.Errorf("%s: printed the secret sentinel", example)
		}
		if example != "hello" && !strings.Contains(stdout, "secretKeyRef:") {
			t.Errorf("%s: no secretKeyRef", example)
		}
	}
}
