//go:build !hookbox_lite

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/spf13/cobra"
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
	// build: build the images not given above (hookbox image build) and
	// push them to push, or import them into containerd's buildNamespace.
	build                bool
	push, buildNamespace string
	runfilesImages       map[string]string
}

func (f *k8sFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.image, "image", "", "k8s: engine image pinned by digest (default: the base image this host builds, hookbox.dev/base:<12 hex>@sha256:…)")
	fs.StringVar(&f.runfilesImage, "runfiles-image", "", "k8s: OCI image holding the runfiles tree, pinned by digest (required unless --build)")
	fs.StringVar(&f.seedImage, "seed-image", "", "k8s: hookbox's seed image (hookbox-seed, hookbox image build SPEC) that prepares the run dir, pinned by digest (required unless --build)")
	fs.StringVar(&f.proxyImage, "proxy-image", "", "k8s: image holding the hookbox binary that runs the egress proxy sidecar, pinned by digest (required for a spec with network.allow)")
	fs.BoolVar(&f.cilium, "cilium", false, "k8s: also emit a CiliumNetworkPolicy allowing network.allow names by FQDN (for clusters running Cilium)")
	fs.StringVar(&f.workspaceClaim, "workspace-claim", k8s.DefaultWorkspaceClaim, "k8s: PersistentVolumeClaim mounted read-only at /workspace")
	fs.StringVar(&f.secretName, "secret-name", k8s.DefaultSecretName, "k8s: Secret holding the secrets, one key per variable name")
	fs.StringVar(&f.hostEnvConfigMap, "host-env-configmap", k8s.DefaultHostEnvConfigMap, "k8s: ConfigMap holding allow-listed host variables (optional keys)")
	fs.StringVar(&f.namespace, "namespace", "", "k8s: namespace of the objects (default: kubectl's)")
	fs.DurationVar(&f.ttl, "ttl", k8s.DefaultTTLSeconds*time.Second, "k8s: how long a finished Job is kept")
	fs.BoolVar(&f.build, "build", false, "k8s: build the images the Jobs use and no flag gives (base, a runfiles image per spawn, seed, proxy), as hookbox image build does, and fill the flags with their digests")
	fs.StringVar(&f.push, "push", "", "k8s with --build: push the images to REGISTRY/PATH/<kind> and reference them there (default: import them into containerd)")
	fs.StringVar(&f.buildNamespace, "build-namespace", criNamespace, "k8s with --build: containerd namespace to import the images into (the kubelet's)")
}

// render is hookbox render --format k8s SPEC.
func (f *k8sFlags) render(cmd *cobra.Command, h *hostFlags, file string, sets []string, spawn string, withRunfiles bool) error {
	if err := f.checkBuild(cmd.Flags()); err != nil {
		return err
	}
	renders, err := compileSelected(file, sets, spawn)
	if err != nil {
		return err
	}
	dirs := dirsFrom(h.stateDir, h.cacheDir, nil)
	// --build assembles the runfiles it builds into images.
	if withRunfiles && !(f.build && f.wants(renders).runfiles) {
		if err := addRunfiles(cmd.Context(), renders, dirs.cache); err != nil {
			return err
		}
	}
	if f.build {
		if err := f.buildImages(cmd.Context(), h, renders, dirs.cache, cmd.ErrOrStderr()); err != nil {
			return err
		}
	}
	var out bytes.Buffer
	if err := writeK8s(&out, renders, f); err != nil {
		return err
	}
	_, err = cmd.OutOrStdout().Write(out.Bytes())
	return err
}

// k8sOnlyFlags are the flags register adds; they mean nothing to other
// formats, so giving one there is refused rather than ignored.
var k8sOnlyFlags = []string{"image", "runfiles-image", "seed-image", "proxy-image", "cilium", "workspace-claim", "secret-name", "host-env-configmap", "namespace", "ttl",
	"build", "push", "build-namespace"}

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
		Image: f.image, RunfilesImage: f.runfilesImage, RunfilesImages: f.runfilesImages, SeedImage: f.seedImage, ProxyImage: f.proxyImage, Cilium: f.cilium,
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

// checkBuild refuses the build flags without --build.
func (f *k8sFlags) checkBuild(fs *pflag.FlagSet) error {
	for _, name := range []string{"push", "build-namespace"} {
		if fs.Changed(name) && !f.build {
			return usageError{fmt.Errorf("--%s applies to --build only: add --build, or give the images with --image, --runfiles-image and --seed-image", name)}
		}
	}
	if f.push != "" {
		if err := images.CheckRepository(f.push); err != nil {
			return usageError{err}
		}
	}
	return nil
}

// wants are the images --build builds: those no flag gives.
func (f *k8sFlags) wants(renders []*render.Render) imageWants {
	return imageWants{base: f.image == "", runfiles: f.runfilesImage == "", seed: f.seedImage == "",
		proxy: f.proxyImage == "" && anyAllowlist(renders)}
}

// buildImages builds what wants says, pushes or imports it, fills the
// flags with the references and prints each on stderr: the digests the
// objects pin.
func (f *k8sFlags) buildImages(ctx context.Context, h *hostFlags, renders []*render.Render, cacheDir string, stderr io.Writer) error {
	out := imageOutputs{push: f.push, namespace: f.buildNamespace, importing: f.push == ""}
	built, err := buildImages(ctx, h, renders, f.wants(renders), out, cacheDir, newImageReporter(io.Discard, stderr, false))
	if err != nil {
		return err
	}
	for kind, flag := range map[images.Kind]*string{images.KindBase: &f.image, images.KindSeed: &f.seedImage, images.KindProxy: &f.proxyImage} {
		if ref, ok := built.byKind[kind]; ok {
			*flag = ref
		}
	}
	if len(built.runfiles) > 0 {
		f.runfilesImages = built.runfiles
	}
	where := "imported into containerd namespace " + out.namespace
	if out.push != "" {
		where = "pushed to " + out.push
	}
	for _, rec := range built.records {
		spawn := ""
		if rec.Spawn != "" {
			spawn = "  spawn " + rec.Spawn
		}
		fmt.Fprintf(stderr, "hookbox: image    %-8s %s%s\n", rec.Kind, rec.Reference, spawn)
	}
	fmt.Fprintf(stderr, "hookbox: image    %s %s\n", imagesCount(len(built.records)), where)
	return nil
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
