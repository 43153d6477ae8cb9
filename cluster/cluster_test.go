package cluster

import (
	"archive/tar"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	kubeletvalidation "k8s.io/kubernetes/pkg/kubelet/apis/config/validation"
	"k8s.io/kubernetes/pkg/kubelet/kubeletconfig/configfiles"
	utilfs "k8s.io/kubernetes/pkg/util/filesystem"
)

func testLayout(t *testing.T) Layout {
	dir := t.TempDir()
	return Layout{Bin: filepath.Join(dir, "bin"), State: filepath.Join(dir, "state"), Run: filepath.Join(dir, "run")}
}

// The kubelet's configuration file goes through the kubelet's own loader
// and validation, on this host: on a cgroup v1 (hybrid) host the kubelet's
// default failCgroupV1 would refuse to start.
func TestKubeletConfigPassesTheKubeletsValidation(t *testing.T) {
	l := testLayout(t)
	b, err := kubeletConfig(l)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFile(l.KubeletConfig(), b, 0o644); err != nil {
		t.Fatal(err)
	}
	loader, err := configfiles.NewFsLoader(&utilfs.DefaultFs{}, l.KubeletConfig())
	if err != nil {
		t.Fatal(err)
	}
	kc, err := loader.Load(t.Context())
	if err != nil {
		t.Fatalf("the kubelet cannot load its configuration: %v", err)
	}
	if err := kubeletvalidation.ValidateKubeletConfiguration(kc, utilfeature.DefaultFeatureGate); err != nil {
		t.Errorf("the kubelet refuses its configuration: %v", err)
	}
	if kc.Address != Host || kc.HealthzBindAddress != Host || kc.ReadOnlyPort != 0 {
		t.Errorf("the kubelet listens on %s (healthz %s, read-only port %d), want %s only", kc.Address, kc.HealthzBindAddress, kc.ReadOnlyPort, Host)
	}
}

// Every absolute path containerd's config names is the cluster's own
// (State, Run, Bin) or runc: never the system containerd's socket, state,
// root or drop-in directory.
func TestContainerdConfigNamesOnlyTheClustersPaths(t *testing.T) {
	l := testLayout(t)
	conf := containerdConfig(l)
	paths := regexp.MustCompile(`"(/[^"]*)"`).FindAllStringSubmatch(conf, -1)
	if len(paths) < 5 {
		t.Fatalf("found %d paths in the config:\n%s", len(paths), conf)
	}
	for _, m := range paths {
		p := m[1]
		if p == runcPath || strings.HasPrefix(p, l.State+"/") || strings.HasPrefix(p, l.Run+"/") || p == l.CNIBin() || p == l.State || p == l.Run {
			continue
		}
		t.Errorf("containerd's config names %s, outside the cluster's directories", p)
	}
	for _, want := range []string{"imports = []", "restrict_oom_score_adj = true", `[plugins."io.containerd.nri.v1.nri"]`, "socket_path = " + strconv.Quote(l.NRISocket())} {
		if !strings.Contains(conf, want) {
			t.Errorf("containerd's config lacks %s", want)
		}
	}
}

func TestPKI(t *testing.T) {
	l := testLayout(t)
	if err := writePKI(l); err != nil {
		t.Fatal(err)
	}
	ca, err := certutil.CertsFromFile(l.pkiFile("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca[0])
	cases := []struct {
		name   string
		usage  x509.ExtKeyUsage
		cn     string
		org    string
		ipSANs []string
	}{
		{"apiserver", x509.ExtKeyUsageServerAuth, "kube-apiserver", "", []string{Host, APIServiceIP}},
		{"kubelet-serving", x509.ExtKeyUsageServerAuth, "system:node:" + NodeName, "", []string{Host}},
		{"kubelet", x509.ExtKeyUsageClientAuth, "system:node:" + NodeName, "system:nodes", nil},
		{"admin", x509.ExtKeyUsageClientAuth, "hookbox-cluster-admin", "system:masters", nil},
		{"apiserver-kubelet-client", x509.ExtKeyUsageClientAuth, "kube-apiserver-kubelet-client", "system:masters", nil},
	}
	for _, c := range cases {
		certs, err := certutil.CertsFromFile(l.pkiFile(c.name + ".crt"))
		if err != nil {
			t.Fatal(err)
		}
		cert := certs[0]
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{c.usage}}); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if cert.Subject.CommonName != c.cn || (c.org != "" && (len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != c.org)) {
			t.Errorf("%s: subject %v, want CN %s O %s", c.name, cert.Subject, c.cn, c.org)
		}
		for _, ip := range c.ipSANs {
			if !containsIP(cert.IPAddresses, ip) {
				t.Errorf("%s: IP SANs %v lack %s", c.name, cert.IPAddresses, ip)
			}
		}
	}
	for _, user := range []string{"admin", "kube-controller-manager", "kube-scheduler", "kubelet"} {
		cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig(user))
		if err != nil {
			t.Fatalf("kubeconfig %s: %v", user, err)
		}
		if cfg.Host != APIServerURL() || len(cfg.CertData) == 0 || len(cfg.KeyData) == 0 || len(cfg.CAData) == 0 {
			t.Errorf("kubeconfig %s: host %s, embedded cert/key/CA %d/%d/%d bytes", user, cfg.Host, len(cfg.CertData), len(cfg.KeyData), len(cfg.CAData))
		}
	}
}

func containsIP(ips []net.IP, want string) bool {
	for _, ip := range ips {
		if ip.Equal(net.ParseIP(want)) {
			return true
		}
	}
	return false
}

func TestImageFromDir(t *testing.T) {
	tree := t.TempDir()
	if err := os.MkdirAll(filepath.Join(tree, "usr", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "usr", "bin", "tool"), []byte("#!tool\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("usr/bin", filepath.Join(tree, "bin")); err != nil {
		t.Fatal(err)
	}
	config := ocispec.ImageConfig{Env: []string{"PATH=/usr/bin"}}
	a, err := ImageFromDir(tree, "hookbox.dev/test/tool@", config, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ImageFromDir(tree, "hookbox.dev/test/tool@", config, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if a.ManifestDigest != b.ManifestDigest || a.Name != "hookbox.dev/test/tool@"+a.ManifestDigest.String() {
		t.Errorf("two builds of one tree: %s and %s (name %s)", a.ManifestDigest, b.ManifestDigest, a.Name)
	}

	files := readLayout(t, a.LayoutTar)
	var index ocispec.Index
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 || index.Manifests[0].Digest != a.ManifestDigest || index.Manifests[0].Annotations[imageAnnotationName] != a.Name {
		t.Errorf("index.json %s, want the manifest %s named %s", files["index.json"], a.ManifestDigest, a.Name)
	}
	var manifest ocispec.Manifest
	if err := json.Unmarshal(files[blobPath(a.ManifestDigest)], &manifest); err != nil {
		t.Fatal(err)
	}
	layer := files[blobPath(manifest.Layers[0].Digest)]
	if int64(len(layer)) != manifest.Layers[0].Size {
		t.Fatalf("layer blob of %d bytes, manifest says %d", len(layer), manifest.Layers[0].Size)
	}
	var entries []string
	tr := tar.NewReader(strings.NewReader(string(layer)))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, h.Name+" "+h.Linkname)
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(imageModTime) {
			t.Errorf("%s: owner %d:%d, mtime %s", h.Name, h.Uid, h.Gid, h.ModTime)
		}
	}
	if got, want := strings.Join(entries, ","), "bin usr/bin,usr/ ,usr/bin/ ,usr/bin/tool "; got != want {
		t.Errorf("layer entries %q, want %q", got, want)
	}

	if err := os.Chmod(filepath.Join(tree, "usr", "bin", "tool"), 0o700); err != nil {
		t.Fatal(err)
	}
	c, err := ImageFromDir(tree, "hookbox.dev/test/tool@", config, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if c.ManifestDigest == a.ManifestDigest {
		t.Error("a changed mode left the digest unchanged")
	}

	if _, err := ImageFromDir(tree, "x@", config, filepath.Join(tree, "usr")); err == nil {
		t.Error("an output directory inside the tree was accepted")
	}
	if err := syscall.Mkfifo(filepath.Join(tree, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ImageFromDir(tree, "x@", config, t.TempDir()); err == nil {
		t.Error("a tree holding a FIFO made an image")
	}
}

func readLayout(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
}
