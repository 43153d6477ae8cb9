package buildkit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/moby/buildkit/client"
	"github.com/moby/buildkit/exporter/containerimage/exptypes"
	gateway "github.com/moby/buildkit/frontend/gateway/client"
	digest "github.com/opencontainers/go-digest"
	"google.golang.org/grpc/metadata"

	"hookbox.dev/hookbox/images"
)

// DefaultAddress is buildkitd's default listening address.
const DefaultAddress = "unix:///run/buildkit/buildkitd.sock"

// DefaultName is the containerd image name Build uses when Options.Name is
// empty. Unlike images.Build's names it carries no digest: the digest is
// known only after the solve.
const DefaultName = images.Repository + ":buildkit"

// Options tune Build.
type Options struct {
	// Name is the image name in containerd; DefaultName when empty.
	Name string
	// Progress, when set, receives one line per finished build step.
	Progress io.Writer
}

// Result is what a Build produced.
type Result struct {
	Name           string
	ManifestDigest digest.Digest
	ConfigDigest   digest.Digest
	Duration       time.Duration
}

// Build solves def on the buildkitd at addr (e.g. DefaultAddress) and exports
// it with the image exporter: stored under opts.Name in the image store of
// buildkitd's containerd worker and unpacked with that worker's snapshotter;
// nothing is pushed. The containerd namespace is the worker's
// (--containerd-worker-namespace); start buildkitd with
// --containerd-worker-namespace=hookbox so the image lands where hookbox
// looks for it.
//
// The image config (user, working directory, env, labels, platform) is
// attached through a gateway build function as containerimage.config
// metadata, the route BuildKit offers for a config without a Dockerfile.
//
// buildkitd's worker must run on def.Platform: nothing in the image runs,
// but the platform is recorded in the config.
func Build(ctx context.Context, addr string, def images.Definition, opts Options) (*Result, error) {
	name := opts.Name
	if name == "" {
		name = DefaultName
	}
	llbDef, err := Marshal(ctx, def)
	if err != nil {
		return nil, err
	}
	config, err := json.Marshal(def.ImageConfig())
	if err != nil {
		return nil, fmt.Errorf("buildkit: encoding the image config: %w", err)
	}

	ctx = withoutContainerdNamespace(ctx)
	c, err := client.New(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("buildkit: connecting to buildkitd at %s: %w", addr, err)
	}
	defer c.Close()

	solveOpt := client.SolveOpt{
		Exports: []client.ExportEntry{{
			Type: client.ExporterImage,
			Attrs: map[string]string{
				string(exptypes.OptKeyName):             name,
				string(exptypes.OptKeyPush):             "false",
				string(exptypes.OptKeyUnpack):           "true",
				string(exptypes.OptKeyOCITypes):         "true",
				string(exptypes.OptKeyLayerCompression): "uncompressed",
				string(exptypes.OptKeySourceDateEpoch):  strconv.FormatInt(images.SourceDateEpoch, 10),
				string(exptypes.OptKeyRewriteTimestamp): "true",
			},
		}},
	}
	buildFunc := func(ctx context.Context, gc gateway.Client) (*gateway.Result, error) {
		res, err := gc.Solve(ctx, gateway.SolveRequest{Definition: llbDef.ToPB()})
		if err != nil {
			return nil, err
		}
		ref, err := res.SingleRef()
		if err != nil {
			return nil, err
		}
		out := gateway.NewResult()
		out.SetRef(ref)
		out.AddMeta(exptypes.ExporterImageConfigKey, config)
		return out, nil
	}

	status := make(chan *client.SolveStatus)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		printProgress(opts.Progress, status)
	}()
	start := time.Now()
	resp, err := c.Build(ctx, solveOpt, "hookbox", buildFunc, status)
	<-drained // Build closes status when it returns
	if err != nil {
		return nil, fmt.Errorf("buildkit: building %s: %w", name, err)
	}
	res := &Result{
		Name:           name,
		ManifestDigest: digest.Digest(resp.ExporterResponse[exptypes.ExporterImageDigestKey]),
		ConfigDigest:   digest.Digest(resp.ExporterResponse[exptypes.ExporterImageConfigDigestKey]),
		Duration:       time.Since(start),
	}
	if err := res.ManifestDigest.Validate(); err != nil {
		return nil, fmt.Errorf("buildkit: buildkitd returned no valid image digest for %s: %w", name, err)
	}
	return res, nil
}

// containerdNamespaceHeader is the gRPC header containerd's
// namespaces.WithNamespace adds to a context's outgoing metadata.
const containerdNamespaceHeader = "containerd-namespace"

// withoutContainerdNamespace drops a containerd namespace header from ctx's
// outgoing gRPC metadata. A context prepared for containerd calls carries
// one, and buildkitd v0.34.2 fails the image export of a request that has it
// ("namespace is required: failed precondition"); the namespace of the
// export is the worker's, not the caller's.
func withoutContainerdNamespace(ctx context.Context) context.Context {
	md, ok := metadata.FromOutgoingContext(ctx)
	if !ok || len(md.Get(containerdNamespaceHeader)) == 0 {
		return ctx
	}
	md = md.Copy()
	md.Delete(containerdNamespaceHeader)
	return metadata.NewOutgoingContext(ctx, md)
}

// printProgress writes one line per completed vertex to w and drains ch.
func printProgress(w io.Writer, ch <-chan *client.SolveStatus) {
	done := map[digest.Digest]bool{}
	for st := range ch {
		if w == nil {
			continue
		}
		for _, v := range st.Vertexes {
			if v.Completed == nil || done[v.Digest] {
				continue
			}
			done[v.Digest] = true
			state := "done"
			switch {
			case v.Error != "":
				state = "error: " + v.Error
			case v.Cached:
				state = "cached"
			}
			took := ""
			if v.Started != nil {
				took = " " + v.Completed.Sub(*v.Started).Round(time.Millisecond).String()
			}
			fmt.Fprintf(w, "buildkit: %s: %s%s\n", v.Name, state, took)
		}
	}
}
