//go:build !hookbox_lite

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"hookbox.dev/hookbox/images"
	"hookbox.dev/hookbox/images/buildkit"
	"hookbox.dev/hookbox/launcher/daemon"
	"hookbox.dev/hookbox/plan"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/runfiles"
)

// defaultContainerdAddress is containerd's system socket.
const defaultContainerdAddress = "/run/containerd/containerd.sock"

// criNamespace is the containerd namespace the kubelet's CRI reads:
// where render --build imports the images a Job pulls IfNotPresent.
const criNamespace = "k8s.io"

// containerdAddress applies the documented precedence: --address, then
// HOOKBOX_CONTAINERD_ADDRESS, then the system socket.
func containerdAddress(flag string) string {
	if flag != "" {
		return flag
	}
	if env := os.Getenv("HOOKBOX_CONTAINERD_ADDRESS"); env != "" {
		return env
	}
	return defaultContainerdAddress
}

// imageOutputs say where built images go: an OCI layout tar, a registry,
// and/or a containerd namespace.
type imageOutputs struct {
	output    string // "oci:FILE"
	push      string // REGISTRY/PATH
	namespace string // containerd namespace of the import
	// importing: no --output or --push, or the namespace flag was given.
	importing bool
}

// ociFile is the FILE of --output oci:FILE.
func (o imageOutputs) ociFile() string { return strings.TrimPrefix(o.output, "oci:") }

func (o *imageOutputs) check(fs *pflag.FlagSet, namespaceFlag string) error {
	if o.output != "" && (!strings.HasPrefix(o.output, "oci:") || o.ociFile() == "") {
		return usageError{fmt.Errorf("--output %q: write oci:FILE (an OCI image layout tar)", o.output)}
	}
	if o.push != "" {
		if err := images.CheckRepository(o.push); err != nil {
			return usageError{err}
		}
	}
	o.importing = (o.output == "" && o.push == "") || fs.Changed(namespaceFlag)
	return nil
}

// imageRecord is one built image as the image commands report it.
type imageRecord struct {
	Kind  images.Kind `json:"kind"`
	Spawn string      `json:"spawn,omitempty"` // a runfiles image's spawn
	Name  string      `json:"name"`
	// Digest is the manifest digest; Reference the image pinned by it, as
	// pushed (--push) or as named in containerd and the layout tar.
	Digest         string `json:"digest"`
	Reference      string `json:"reference"`
	RunfilesDigest string `json:"runfiles_digest,omitempty"`
	Size           int64  `json:"size"`
}

// imageEvent is one line of `hookbox image build --json`, in the shape of
// run's events: progress (phase, detail) while building and writing, then
// one image event per image once every output has it.
type imageEvent struct {
	Type   string       `json:"type"`
	Time   time.Time    `json:"time"`
	Phase  string       `json:"phase,omitempty"`
	Detail string       `json:"detail,omitempty"`
	Image  *imageRecord `json:"image,omitempty"`
}

// imageReporter prints progress (on a terminal, or as JSON events) and the
// built images.
type imageReporter struct {
	stdout, stderr io.Writer
	json           bool
	mu             sync.Mutex
	enc            *json.Encoder
	// last is when each phase last printed a counting progress line.
	last map[string]time.Time
}

func newImageReporter(stdout, stderr io.Writer, jsonOut bool) *imageReporter {
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	return &imageReporter{stdout: stdout, stderr: stderr, json: jsonOut, enc: enc, last: map[string]time.Time{}}
}

func (r *imageReporter) progress(phase, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.json {
		_ = r.enc.Encode(imageEvent{Type: "progress", Time: time.Now().UTC(), Phase: phase, Detail: detail})
		return
	}
	progressLine(r.stderr, false, phase, detail)
}

// counting reports done of total at most once a second per phase, and
// always the last step.
func (r *imageReporter) counting(phase, what string, done, total int64, unit string) {
	r.mu.Lock()
	last := r.last[phase]
	now := time.Now()
	if done < total && now.Sub(last) < time.Second {
		r.mu.Unlock()
		return
	}
	r.last[phase] = now
	r.mu.Unlock()
	if unit == "bytes" {
		r.progress(phase, fmt.Sprintf("%s: %.1f/%.1f MiB", what, float64(done)/(1<<20), float64(total)/(1<<20)))
		return
	}
	r.progress(phase, fmt.Sprintf("%s: %d/%d %s", what, done, total, unit))
}

func (r *imageReporter) image(rec imageRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.json {
		_ = r.enc.Encode(imageEvent{Type: "image", Time: time.Now().UTC(), Image: &rec})
		return
	}
	spawn := ""
	if rec.Spawn != "" {
		spawn = "  spawn " + rec.Spawn
	}
	fmt.Fprintf(r.stdout, "%-8s %s%s\n", rec.Kind, rec.Reference, spawn)
}

// imageWants are the images to build besides the base image.
type imageWants struct {
	base     bool
	runfiles bool // one per render
	seed     bool
	proxy    bool
}

// builtImages is what buildImages built and sent to every output.
type builtImages struct {
	records []imageRecord
	// runfiles maps each spawn to its runfiles image's reference.
	runfiles map[string]string
	byKind   map[images.Kind]string
}

// buildImages builds the images of renders (their runfiles assembled into
// the store under cacheDir first) into a Set under cacheDir, sends them to
// every output and returns their references. The Set's directory is removed
// before it returns.
func buildImages(ctx context.Context, h *hostFlags, renders []*render.Render, want imageWants, out imageOutputs, cacheDir string, rep *imageReporter) (*builtImages, error) {
	set, err := images.NewSet(filepath.Join(cacheDir, "images"))
	if err != nil {
		return nil, err
	}
	defer set.Close()
	spawnOf := map[*images.Built][]string{}
	if want.base {
		def, err := images.HostDefinition()
		if err != nil {
			return nil, err
		}
		img, err := images.Build(def)
		if err != nil {
			return nil, err
		}
		if _, err := set.AddBase(img); err != nil {
			return nil, err
		}
	}
	if want.runfiles {
		store, err := runfiles.OpenStore(cacheDir)
		if err != nil {
			return nil, err
		}
		for _, r := range renders {
			res, err := plan.Runfiles(ctx, store, r, runfiles.RenderOptions{Progress: func(p runfiles.Progress) {
				rep.counting("runfiles", "spawn "+r.Spawn, int64(p.Done), int64(p.Total), "files")
			}})
			if err != nil {
				return nil, err
			}
			b, err := set.AddRunfiles(ctx, res.Manifest, res.TreeDir, func(done, total int64) {
				rep.counting("layer", "runfiles of "+r.Spawn, done, total, "bytes")
			})
			if err != nil {
				return nil, err
			}
			spawnOf[b] = append(spawnOf[b], r.Spawn)
		}
	}
	for _, p := range []struct {
		want bool
		kind images.Kind
		host func() (string, error)
	}{{want.seed, images.KindSeed, images.SeedHostPath}, {want.proxy, images.KindProxy, images.ProxyHostPath}} {
		if !p.want {
			continue
		}
		hostPath, err := p.host()
		if err != nil {
			return nil, err
		}
		if _, err := set.AddProgram(ctx, p.kind, hostPath); err != nil {
			return nil, err
		}
	}

	repo := ""
	if out.output != "" {
		rep.progress("write", out.ociFile())
		if err := writeLayoutFile(set, out.ociFile()); err != nil {
			return nil, err
		}
	}
	if out.push != "" {
		repo = strings.TrimSuffix(out.push, "/")
		_, err := images.Push(ctx, set, repo, images.PushOptions{Progress: func(ref string, done, total int64) {
			rep.counting("push", ref, done, total, "bytes")
		}})
		if err != nil {
			return nil, exitError{exitInfra, err.Error()}
		}
	}
	if out.importing {
		client, err := connectContainerd(ctx, h.address, out.output)
		if err != nil {
			return nil, err
		}
		defer client.Close()
		rep.progress("import", "containerd namespace "+out.namespace)
		if err := images.ImportSet(ctx, client, set, out.namespace, func(s string) { rep.progress("import", s) }); err != nil {
			return nil, exitError{exitInfra, err.Error()}
		}
	}

	built := &builtImages{runfiles: map[string]string{}, byKind: map[images.Kind]string{}}
	for _, b := range set.Images() {
		rec := imageRecord{Kind: b.Kind, Name: b.Name, Digest: b.ManifestDigest.String(), Reference: b.Reference(repo),
			RunfilesDigest: b.RunfilesDigest, Size: b.Size}
		spawns := spawnOf[b]
		if len(spawns) == 0 {
			spawns = []string{""}
		}
		for _, s := range spawns {
			rec.Spawn = s
			built.records = append(built.records, rec)
			if b.Kind == images.KindRunfiles {
				built.runfiles[s] = rec.Reference
			}
		}
		built.byKind[b.Kind] = rec.Reference
	}
	return built, nil
}

// writeLayoutFile writes the Set's layout tar to file, mode 0600 (a
// runfiles layer holds copies of files the host may keep from others),
// through a temporary file beside it, so file is whole or untouched.
func writeLayoutFile(set *images.Set, file string) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".")
	if err != nil {
		return fmt.Errorf("--output %s: %w", file, err)
	}
	defer os.Remove(tmp.Name()) // gone after the rename
	err = set.WriteLayoutTar(tmp)
	if closeErr := tmp.Close(); err == nil {
		err = closeErr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), file)
	}
	if err != nil {
		return fmt.Errorf("--output %s: %w", file, err)
	}
	return nil
}

// connectContainerd connects to the containerd images go to: the address
// flag's (documented precedence), or as a non-root user the rootless one,
// started if need be. It fails with exit 120 when none answers.
func connectContainerd(ctx context.Context, address, output string) (*containerd.Client, error) {
	addr := containerdAddress(address)
	if rootlessUser() {
		// The images go to the user's rootless containerd; importing is
		// all over its socket.
		endpoint, err := daemon.ResolveRootless(ctx, address, daemonOptions(true, "", nil))
		if err != nil {
			return nil, exitError{exitInfra, err.Error()}
		}
		addr = endpoint.Address
	}
	client, err := containerd.New(addr, containerd.WithTimeout(5*time.Second))
	if err == nil {
		pingCtx, cancelPing := context.WithTimeout(ctx, 5*time.Second)
		_, err = client.Version(pingCtx)
		cancelPing()
		if err != nil {
			client.Close()
		}
	}
	if err != nil {
		hint := "write the images with --output oci:FILE or --push REPO"
		if output != "" {
			hint = "leave out the namespace flag to only write " + output
		}
		return nil, exitError{exitInfra, fmt.Sprintf("containerd does not answer at %s (start it, pass --address, or %s): %v", addr, hint, err)}
	}
	return client, nil
}

func newImageCommand(h *hostFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build the images a run or a Kubernetes Job uses (the base image has no executables)",
	}
	var buildkitAddr, layoutFile, spawn string
	var sets []string
	var jsonOut, agent bool
	var out imageOutputs
	build := &cobra.Command{
		Use:   "build [SPEC]",
		Short: "Build the base image, or every image a spec's Kubernetes Jobs use, and import, write or push them",
		Long: `Build the base image in-process (deterministic OCI image, no daemon). With
SPEC, also build what hookbox render --format k8s references for it: one
runfiles image per spawn (its assembled runfiles tree, one layer), the seed
image (the static hookbox-seed the seed init containers run) and, for a spec
with an egress allowlist, the proxy image (this hookbox binary). --agent
adds the proxy image whatever SPEC says: it is also the node agent's image
(hookbox k8s agent-manifest --image). The same inputs give the same digests
on any machine.

Where they go: --output oci:FILE writes one OCI image layout tar holding
them all (mode 0600); --push REGISTRY/PATH pushes each to REGISTRY/PATH/<kind>
with the first 12 hex digits of its digest as tag (credentials from the
Docker config file, as docker login writes it). Without either, or with
--namespace given, they are imported into containerd namespace --namespace
(default hookbox; k8s.io is the kubelet's). Each image is printed with its
reference pinned by digest.

--buildkit ADDR solves the base image's BuildKit LLB definition on that
buildkitd instead, which exports it straight into containerd's image store
(base image only). --oci-layout FILE is --output oci:FILE.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError{fmt.Errorf("image build takes at most one SPEC, got %d: usage: %s", len(args), strings.TrimSpace(cmd.UseLine()))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			// A signal cancels the build, so the Set's directory is removed.
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
			defer cancel()
			if layoutFile != "" {
				if out.output != "" {
					return usageError{errors.New("--oci-layout FILE is --output oci:FILE: give one of them")}
				}
				out.output = "oci:" + layoutFile
			}
			if err := out.check(cmd.Flags(), "namespace"); err != nil {
				return err
			}
			if len(args) == 0 && (spawn != "" || len(sets) > 0) {
				return usageError{errors.New("--spawn and --set need a SPEC")}
			}
			rep := newImageReporter(cmd.OutOrStdout(), cmd.ErrOrStderr(), jsonOut)
			if buildkitAddr != "" {
				if len(args) > 0 || out.output != "" || out.push != "" || cmd.Flags().Changed("namespace") {
					return usageError{errors.New("--buildkit builds the base image into buildkitd's containerd only: leave out SPEC, --output, --push and --namespace")}
				}
				def, err := images.HostDefinition()
				if err != nil {
					return err
				}
				res, err := buildkit.Build(ctx, buildkitAddr, def, buildkit.Options{Progress: cmd.ErrOrStderr()})
				if err != nil {
					return err
				}
				rep.image(imageRecord{Kind: images.KindBase, Name: res.Name, Digest: res.ManifestDigest.String(), Reference: res.Name + "@" + res.ManifestDigest.String()})
				return nil
			}
			want := imageWants{base: true}
			var renders []*render.Render
			if len(args) == 1 {
				var err error
				if renders, err = compileSelected(args[0], sets, spawn); err != nil {
					return err
				}
				want.runfiles, want.seed, want.proxy = true, true, anyAllowlist(renders)
			}
			want.proxy = want.proxy || agent
			dirs := dirsFrom(h.stateDir, h.cacheDir, nil)
			built, err := buildImages(ctx, h, renders, want, out, dirs.cache, rep)
			if err != nil {
				return err
			}
			for _, rec := range built.records {
				rep.image(rec)
			}
			if !jsonOut {
				reportOutputs(cmd.ErrOrStderr(), out, len(built.records))
			}
			return nil
		},
	}
	f := build.Flags()
	f.StringVar(&buildkitAddr, "buildkit", "", "solve the base image's LLB definition on this buildkitd (e.g. unix:///run/buildkit/buildkitd.sock)")
	f.StringVar(&out.output, "output", "", "oci:FILE: write every image to one OCI image layout tar (mode 0600) instead of importing them")
	f.StringVar(&layoutFile, "oci-layout", "", "write the OCI image layout tar to this file (= --output oci:FILE)")
	f.StringVar(&out.push, "push", "", "REGISTRY/PATH: push each image to REGISTRY/PATH/<kind>:<12 hex> instead of importing them")
	f.StringVar(&out.namespace, "namespace", images.Namespace, "containerd namespace to import into (k8s.io for a kubelet's)")
	f.StringVar(&spawn, "spawn", "", "with SPEC: only this spawn's runfiles image")
	build.RegisterFlagCompletionFunc("spawn", completeSpawnNames)
	f.StringArrayVar(&sets, "set", nil, "NAME=VALUE: fill the spec's template slot NAME (repeatable), as for hookbox render")
	f.BoolVar(&jsonOut, "json", false, "print progress and every image as JSON events, one per line")
	f.BoolVar(&agent, "agent", false, "also build the proxy image (this static hookbox), the node agent's image for hookbox k8s agent-manifest --image, whatever SPEC says")
	cmd.AddCommand(build)
	return cmd
}

// reportOutputs says on stderr where the images went.
func reportOutputs(w io.Writer, out imageOutputs, n int) {
	if out.output != "" {
		fmt.Fprintf(w, "hookbox: wrote %s to %s\n", imagesCount(n), out.ociFile())
	}
	if out.push != "" {
		fmt.Fprintf(w, "hookbox: pushed %s to %s\n", imagesCount(n), out.push)
	}
	if out.importing {
		fmt.Fprintf(w, "hookbox: %s imported into containerd namespace %s\n", imagesCount(n), out.namespace)
	}
}

func imagesCount(n int) string {
	if n == 1 {
		return "1 image"
	}
	return fmt.Sprintf("%d images", n)
}

func anyAllowlist(renders []*render.Render) bool {
	for _, r := range renders {
		if r.Network == render.NetworkAllowlist {
			return true
		}
	}
	return false
}
