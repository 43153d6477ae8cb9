package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"hookbox.dev/hookbox/compiler"
	"hookbox.dev/hookbox/egress"
)

// writeRenderJSON writes the canonical JSON of the single spawn of spec.
func writeRenderJSON(t *testing.T, spec string) string {
	t.Helper()
	renders, err := compiler.CompileFileWithParams(spec, nil)
	if err != nil || len(renders) != 1 {
		t.Fatalf("compile %s: %d renders, %v", spec, len(renders), err)
	}
	data, err := renders[0].Canonical()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "render.json")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestEgressServe: the render's allowlist is the policy (model-api is
// api.anthropic.com:443), a CONNECT elsewhere is refused with 403, its
// attempt is one JSON line, and a cancelled context ends the proxy cleanly.
func TestEgressServe(t *testing.T) {
	_, policy, err := readEgressPolicy(writeRenderJSON(t, "../../examples/egress.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []egress.Rule{{Host: "api.anthropic.com", Port: 443, Kind: egress.KindName}}; fmt.Sprint(policy.Allow) != fmt.Sprint(want) {
		t.Fatalf("policy %v, want %v", policy.Allow, want)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- serveEgress(ctx, l, policy, nil, nil, &out) }()

	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(egress.RefusedHeader) != egress.ReasonNotAllowed {
		t.Errorf("CONNECT example.com:443: %s, %s %q", resp.Status, egress.RefusedHeader, resp.Header.Get(egress.RefusedHeader))
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serveEgress after cancel: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines, want one:\n%s", len(lines), out.String())
	}
	var a egress.Attempt
	if err := json.Unmarshal([]byte(lines[0]), &a); err != nil {
		t.Fatalf("line %q: %v", lines[0], err)
	}
	if a.Method != http.MethodConnect || a.Host != "example.com" || a.Port != 443 || a.Decision != egress.DecisionRefused || a.Reason != egress.ReasonNotAllowed {
		t.Errorf("attempt %+v", a)
	}
}

// TestEgressServeRefuses: without a render, or with one that has no
// allowlist, there is nothing to serve: a usage error before listening.
func TestEgressServeRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no render":    {nil, "--render FILE is required"},
		"network none": {[]string{"--render", writeRenderJSON(t, "../../examples/hello.yaml")}, `has network "none", no egress allowlist`},
		"not json":     {[]string{"--render", "../../examples/hello.yaml"}, "not one render's JSON"},
	} {
		args := append([]string{"egress", "serve", "--listen", "127.0.0.1:0"}, tc.args...)
		code, _, stderr := runCLI(t, args...)
		if code != exitSpec || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q, want %q", name, code, stderr, tc.want)
		}
	}
}

// TestEgressProbe: 0 while something listens, 1 once nothing does.
func TestEgressProbe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if code, _, stderr := runCLI(t, "egress", "probe", "--address", addr); code != exitOK {
		t.Errorf("listening: exit %d %s", code, stderr)
	}
	l.Close()
	if code, _, _ := runCLI(t, "egress", "probe", "--address", addr); code == exitOK {
		t.Error("closed: exit 0")
	}
}
