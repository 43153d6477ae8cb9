package cluster

import (
	"crypto/x509"
	"fmt"
	"net"
	"path/filepath"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	kubeadmapi "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm"
	"k8s.io/kubernetes/cmd/kubeadm/app/util/kubeconfig"
	"k8s.io/kubernetes/cmd/kubeadm/app/util/pkiutil"
)

// A certificate the cluster needs, signed by its one CA (kubeadm's layout,
// with a single CA instead of kubeadm's three).
type certSpec struct {
	name   string // file name in PKI(), without .crt/.key
	config certutil.Config
	// kubeconfig, when set, is written as Kubeconfig(kubeconfig) with this
	// certificate as its client credentials.
	kubeconfig string
}

var loopbackIPs = []net.IP{net.ParseIP(Host)}

func certSpecs() []certSpec {
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	server := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	return []certSpec{
		{name: "apiserver", config: certutil.Config{
			CommonName: "kube-apiserver",
			AltNames: certutil.AltNames{
				DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
				IPs:      []net.IP{net.ParseIP(Host), net.ParseIP(APIServiceIP)},
			},
			Usages: server,
		}},
		// The API server's client identity towards the kubelet (logs, exec).
		{name: "apiserver-kubelet-client", config: certutil.Config{
			CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}, Usages: client,
		}},
		{name: "kubelet-serving", config: certutil.Config{
			CommonName: "system:node:" + NodeName,
			AltNames:   certutil.AltNames{DNSNames: []string{"localhost"}, IPs: loopbackIPs},
			Usages:     server,
		}},
		{name: "admin", kubeconfig: "admin", config: certutil.Config{
			CommonName: "hookbox-cluster-admin", Organization: []string{"system:masters"}, Usages: client,
		}},
		{name: "kube-controller-manager", kubeconfig: "kube-controller-manager", config: certutil.Config{
			CommonName: "system:kube-controller-manager", Usages: client,
		}},
		{name: "kube-scheduler", kubeconfig: "kube-scheduler", config: certutil.Config{
			CommonName: "system:kube-scheduler", Usages: client,
		}},
		// The Node authorizer and NodeRestriction know the kubelet by this
		// name and group.
		{name: "kubelet", kubeconfig: "kubelet", config: certutil.Config{
			CommonName: "system:node:" + NodeName, Organization: []string{"system:nodes"}, Usages: client,
		}},
	}
}

// writePKI makes a fresh CA, every certificate and kubeconfig of
// certSpecs, and the service-account signing key pair (sa.key, sa.pub).
func writePKI(l Layout) error {
	const alg = kubeadmapi.EncryptionAlgorithmECDSAP256
	caCert, caKey, err := pkiutil.NewCertificateAuthority(&pkiutil.CertConfig{
		Config:              certutil.Config{CommonName: "hookbox-cluster-ca"},
		EncryptionAlgorithm: alg,
	})
	if err != nil {
		return fmt.Errorf("making the cluster CA: %w", err)
	}
	if err := pkiutil.WriteCertAndKey(l.PKI(), "ca", caCert, caKey); err != nil {
		return err
	}
	caPEM := pkiutil.EncodeCertPEM(caCert)
	for _, s := range certSpecs() {
		cert, key, err := pkiutil.NewCertAndKey(caCert, caKey, &pkiutil.CertConfig{Config: s.config, EncryptionAlgorithm: alg})
		if err != nil {
			return fmt.Errorf("making certificate %s: %w", s.name, err)
		}
		if err := pkiutil.WriteCertAndKey(l.PKI(), s.name, cert, key); err != nil {
			return err
		}
		if s.kubeconfig == "" {
			continue
		}
		keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
		if err != nil {
			return err
		}
		kc := kubeconfig.CreateWithCerts(APIServerURL(), "hookbox-cluster", s.config.CommonName, caPEM, keyPEM, pkiutil.EncodeCertPEM(cert))
		if err := kubeconfig.WriteToDisk(l.Kubeconfig(s.kubeconfig), kc); err != nil {
			return fmt.Errorf("writing kubeconfig %s: %w", s.kubeconfig, err)
		}
	}
	saKey, err := pkiutil.NewPrivateKey(alg)
	if err != nil {
		return err
	}
	if err := pkiutil.WriteKey(l.PKI(), "sa", saKey); err != nil {
		return err
	}
	return pkiutil.WritePublicKey(l.PKI(), "sa", saKey.Public())
}

// pkiFile is the path of a certificate ("x.crt") or key ("x.key") of the PKI.
func (l Layout) pkiFile(name string) string { return filepath.Join(l.PKI(), name) }
