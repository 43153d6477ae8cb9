package integration

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hookbox.dev/hookbox/egress"
	"hookbox.dev/hookbox/internal/testapi/anthropic"
	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/launcher"
)

// testCA is a certificate authority for one test, and a leaf certificate
// for an IP address signed by it.
type testCA struct {
	pemFile string // the CA certificate, for SSL_CERT_FILE
	leaf    tls.Certificate
}

func newTestCA(t *testing.T, ip netip.Addr) *testCA {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hookbox test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: ip.String()},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{ip.AsSlice()}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	return &testCA{pemFile: file, leaf: tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}
}

// TestGatewayKeepsTheKeyOutOfTheBox: the real Claude Code reaches its
// (scripted, TLS) model API only through hookbox's gateway. The engine
// gets a placeholder; the API receives the real key, which is a sentinel
// here: it must not appear in the container's environment (every
// process's /proc/PID/environ, read from inside by the model's command),
// in any file of the run record, or in containerd's files. The task still
// completes, confirmed.
func TestGatewayKeepsTheKeyOutOfTheBox(t *testing.T) {
	testenv.RequireIntegration(t, anthropic.ClaudeInstalled)
	e, h := newEngineEnv(t)
	ca := newTestCA(t, h.Addr())
	api, _ := anthropic.Start(t, tls.NewListener(h.Listen(t, 8443), &tls.Config{Certificates: []tls.Certificate{ca.leaf}}), anthropic.Script{
		{ToolUse: &anthropic.ToolUse{Name: "Bash", Input: map[string]string{
			"command":     "for f in /proc/[0-9]*/environ; do cat \"$f\"; echo; done > /run/hookbox/out/environ.txt; git -C /workspace log -1 --format=%s",
			"description": "look around",
		}}},
		{Text: "Writing it down.", ToolUse: &anthropic.ToolUse{Name: "Write", Input: map[string]string{"file_path": "/run/hookbox/out/answer.md", "content": "# Last commit\n"}}},
		{Text: "Done."},
	})
	sentinel := "sk-ant-sentinel-" + hex.EncodeToString(randomBytes(t, 12))
	upstream := fmt.Sprintf("https://%s:8443", h.Addr())
	spec := fmt.Sprintf(`apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: gateway-claude}
spec:
  engine:
    kind: claude
    path: %s
    args: [--allowedTools, "Bash,Write", --max-turns, "6"]
  prompt: Look around and write the last commit's subject to /run/hookbox/out/answer.md.
  workspace: ./ws
  tools: [/usr/bin/git, /usr/bin/cat]
  hooks:
    - {name: pre-bash, event: PreToolUse, matcher: Bash, argv: [/usr/bin/touch, /run/hookbox/out/pre-bash], required: true}
  env:
    set: {GIT_CONFIG_COUNT: "1", GIT_CONFIG_KEY_0: safe.directory, GIT_CONFIG_VALUE_0: "*", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1"}
  secrets: [{name: ANTHROPIC_API_KEY, gateway: anthropic, upstream: %q}]
  limits: {timeout: 2m, memory: 2Gi}
  artifacts: [answer.md, pre-bash, environ.txt]
`, anthropic.ClaudeEngine, upstream)
	file := filepath.Join(e.specDir, "gateway.yaml")
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	// The gateway verifies the upstream's certificate against the system
	// roots, which SSL_CERT_FILE replaces for hookbox's process.
	e.extraEnv = append(e.extraEnv, "ANTHROPIC_API_KEY="+sentinel, "SSL_CERT_FILE="+ca.pemFile)
	r := e.run(file)
	res := r.mustResult(t)
	if res.Status != launcher.StatusCompleted || r.code != 0 {
		t.Fatalf("status %s exit %d (%v), verdict %s %v %+v\n%s", res.Status, r.code, res.Reasons, res.Trace.Status, res.Trace.Reasons, res.Trace.Diffs, tail(r.stderr+readRecordFile(res, "stderr.log"), 3000))
	}
	if res.Trace.Status != "confirmed" {
		t.Errorf("verdict %s %v %+v", res.Trace.Status, res.Trace.Reasons, res.Trace.Diffs)
	}
	for _, a := range res.Artifacts {
		if a.Status != "found" {
			t.Errorf("artifact %s: %s", a.Declared, a.Status)
		}
	}

	// The API got the real key, in x-api-key only, on every model request.
	want := sha256.Sum256([]byte(sentinel))
	reqs := api.Requests()
	if len(api.ModelRequests()) < 3 {
		t.Fatalf("%d model requests through the gateway, want the 3 scripted turns", len(api.ModelRequests()))
	}
	for _, rq := range reqs {
		if rq.APIKeySHA256 != hex.EncodeToString(want[:]) || rq.Authorization {
			t.Errorf("%s %s reached the API without exactly the real key in x-api-key (authorization header: %v)", rq.Method, rq.Path, rq.Authorization)
		}
	}

	// Inside: the placeholder, never the key.
	environ := artifactText(t, res, "environ.txt")
	if !strings.Contains(environ, "ANTHROPIC_API_KEY=hookbox-gateway-placeholder") {
		t.Errorf("the engine's environment does not hold the placeholder:\n%s", environ)
	}
	// Outside: not one byte of it anywhere hookbox or containerd wrote.
	for _, root := range []string{res.RecordDir, e.state, "/run/containerd", "/var/lib/containerd/io.containerd.metadata.v1.bolt"} {
		if hit := fileContaining(t, root, []byte(sentinel)); hit != "" {
			t.Errorf("the key is in %s", hit)
		}
	}
	if strings.Contains(r.stdout+r.stderr, sentinel) {
		t.Errorf("the key is in hookbox's output")
	}

	// network.jsonl: each gateway request, path and status, no header.
	var gateway int
	for _, a := range readNetwork(t, res) {
		if a.Gateway == "" {
			continue
		}
		gateway++
		if a.Decision != egress.DecisionAllowed || a.Status != 200 || !strings.HasPrefix(a.Path, "/v1/") {
			t.Errorf("gateway record %+v", a)
		}
	}
	if gateway < 3 {
		t.Errorf("%d gateway requests in network.jsonl, want one per model request", gateway)
	}
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// fileContaining returns the first regular file under root holding needle
// ("" if none); a root that does not exist holds nothing. Files are read
// in chunks, so a daemon's large blobs are searched too.
func fileContaining(t *testing.T, root string, needle []byte) string {
	t.Helper()
	var hit string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || hit != "" || !d.Type().IsRegular() {
			return nil
		}
		if holds(p, needle) {
			hit = p
		}
		return nil
	})
	return hit
}

// holds reads the file at p in chunks that overlap by len(needle)-1 bytes
// and reports whether needle is in it.
func holds(p string, needle []byte) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	buf := make([]byte, 1<<20+len(needle))
	kept := 0
	for {
		n, err := f.Read(buf[kept:])
		if bytes.Contains(buf[:kept+n], needle) {
			return true
		}
		if err != nil {
			return false
		}
		if total := kept + n; total >= len(needle) {
			kept = copy(buf, buf[total-len(needle)+1:total])
		} else {
			kept = total
		}
	}
}

// TestGatewayEngines: each real engine does its task of examples/engines
// with its key behind the gateway (the example's secret turned into a
// gateway secret whose upstream is the scripted API over TLS): the task
// completes confirmed as without the gateway, and the API receives the
// real key, only in its provider's header, on every request.
func TestGatewayEngines(t *testing.T) {
	for _, eng := range realEngines {
		t.Run(eng.name, func(t *testing.T) {
			testenv.RequireIntegration(t, eng.installed)
			e, h := newEngineEnv(t)
			ca := newTestCA(t, h.Addr())
			task := eng.start(t, tls.NewListener(h.Listen(t, 8443), &tls.Config{Certificates: []tls.Certificate{ca.leaf}}))
			task.secretKey = "sentinel-" + hex.EncodeToString(randomBytes(t, 12))
			task.spec = gatewayVariant(t, e, task, eng.gatewayKind, fmt.Sprintf("https://%s:8443", h.Addr()))
			e.extraEnv = append(e.extraEnv, "SSL_CERT_FILE="+ca.pemFile)
			res := runEngineTask(t, e, task, fmt.Sprintf("%s:8443", h.Addr()))
			want := sha256.Sum256([]byte(task.secretKey))
			digests, other := task.keys()
			for i, d := range digests {
				if d != hex.EncodeToString(want[:]) {
					t.Errorf("request %d reached the API without the real key in its provider's header", i)
				}
			}
			if other {
				t.Errorf("a request carried another credential besides the provider's header")
			}
			if hit := fileContaining(t, res.RecordDir, []byte(task.secretKey)); hit != "" {
				t.Errorf("the key is in %s", hit)
			}
		})
	}
}

// gatewayVariant writes the engine's example with its secret behind the
// gateway: no engine.baseURL (the gateway sets it) and no network block
// (the gateway's upstream is then the only destination).
func gatewayVariant(t *testing.T, e *env, task engineTask, kind, upstream string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "examples", "engines", task.example))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for old, repl := range map[string]string{
		"    baseURL: \"{{ base_url }}\"\n":    "",
		"  network:\n    allow: [model-api]\n": "",
		"secrets: [" + task.secret + "]":       fmt.Sprintf("secrets: [{name: %s, gateway: %s, upstream: %q}]", task.secret, kind, upstream),
	} {
		if !strings.Contains(text, old) {
			t.Fatalf("%s no longer has %q: update gatewayVariant", task.example, old)
		}
		text = strings.Replace(text, old, repl, 1)
	}
	file := filepath.Join(e.specDir, "gateway-"+task.example)
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}
