package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/spf13/pflag"

	"hookbox.dev/hookbox/images"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/k8s"
)

// k8sFlags are the flags of `hookbox render --format k8s`.
type k8sFlags struct {
	image, runfilesImage, seedImage string
	workspaceClaim, secretName      string
	hostEnvConfigMap, namespace     string
	proxyImage                      string
	cilium                          bool
	ttl                             time.Duration
}

func (f *k8sFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.image, "image", "", "k8s: engine image pinned by digest (default: the base image this host builds, hookbox.dev/base:<12 hex>@sha256:…)")
	fs.StringVar(&f.runfilesImage, "runfiles-image", "", "k8s: OCI image holding the runfiles tree, pinned by digest (required)")
	fs.StringVar(&f.seedImage, "seed-image", "", "k8s: image with mkdir and install that prepares the run dir, pinned by digest (required)")
	fs.StringVar(&f.proxyImage, "proxy-image", "", "k8s: image holding the hookbox binary that runs the egress proxy sidecar, pinned by digest (required for a spec with network.allow)")
	fs.BoolVar(&f.cilium, "cilium", false, "k8s: also emit a CiliumNetworkPolicy allowing network.allow names by FQDN (for clusters running Cilium)")
	fs.StringVar(&f.workspaceClaim, "workspace-claim", k8s.DefaultWorkspaceClaim, "k8s: PersistentVolumeClaim mounted read-only at /workspace")
	fs.StringVar(&f.secretName, "secret-name", k8s.DefaultSecretName, "k8s: Secret holding the secrets, one key per variable name")
	fs.StringVar(&f.hostEnvConfigMap, "host-env-configmap", k8s.DefaultHostEnvConfigMap, "k8s: ConfigMap holding allow-listed host variables (optional keys)")
	fs.StringVar(&f.namespace, "namespace", "", "k8s: namespace of the objects (default: kubectl's)")
	fs.DurationVar(&f.ttl, "ttl", k8s.DefaultTTLSeconds*time.Second, "k8s: how long a finished Job is kept")
}

// k8sOnlyFlags are the flags register adds; they mean nothing to other
// formats, so giving one there is refused rather than ignored.
var k8sOnlyFlags = []string{"image", "runfiles-image", "seed-image", "proxy-image", "cilium", "workspace-claim", "secret-name", "host-env-configmap", "namespace", "ttl"}

// refuseK8sFlags refuses any k8s-only flag set on a render of another format.
func refuseK8sFlags(fs *pflag.FlagSet, format string) error {
	for _, name := range k8sOnlyFlags {
		if fs.Changed(name) {
			return usageError{fmt.Errorf("--%s applies to --format k8s only, not --format %s: remove it or add --format k8s", name, format)}
		}
	}
	return nil
}

// options turns the flags into k8s.Options; without --image the engine
// image is the base image this host builds (images.HostDefinition).
func (f *k8sFlags) options() (k8s.Options, error) {
	if f.ttl < 0 || f.ttl.Seconds() > math.MaxInt32 {
		return k8s.Options{}, usageError{fmt.Errorf("--ttl %s is out of range", f.ttl)}
	}
	ttl := int32(f.ttl / time.Second)
	opts := k8s.Options{
		Image: f.image, RunfilesImage: f.runfilesImage, SeedImage: f.seedImage, ProxyImage: f.proxyImage, Cilium: f.cilium,
		WorkspaceClaim: f.workspaceClaim, SecretName: f.secretName, HostEnvConfigMap: f.hostEnvConfigMap,
		Namespace: f.namespace, TTLSecondsAfterFinished: &ttl, Version: version,
	}
	if opts.Image == "" {
		def, err := images.HostDefinition()
		if err != nil {
			return k8s.Options{}, err
		}
		img, err := images.Build(def)
		if err != nil {
			return k8s.Options{}, err
		}
		opts.Image = img.Name + "@" + img.ManifestDigest.String()
	}
	return opts, nil
}

// writeK8s writes the Kubernetes objects of renders as multi-document YAML.
func writeK8s(w io.Writer, renders []*render.Render, f *k8sFlags) error {
	opts, err := f.options()
	if err != nil {
		return err
	}
	data, err := k8s.YAML(renders, opts)
	if errors.Is(err, k8s.ErrOptions) || errors.Is(err, k8s.ErrUnsupported) {
		return usageError{err} // the flags or the spec, not the machine
	}
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}
