package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"hookbox.dev/hookbox/compiler"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/plan"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/runfiles"
)

// hostFlags are the persistent flags every command shares: where hookbox
// keeps its state and cache, and which containerd it talks to.
type hostFlags struct{ stateDir, cacheDir, address string }

func newRootCommand() *cobra.Command {
	h := &hostFlags{}
	root := &cobra.Command{
		Use:           "hookbox",
		Short:         "Run AI coding agent spawns in containers and prove what ran",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.ArbitraryArgs,
		// An unknown command is a usage error (exit 2) like any other.
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("unknown command %q: hookbox --help lists the commands", args[0])}
			}
			return cmd.Help()
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{flagError{err}} })
	pf := root.PersistentFlags()
	pf.StringVar(&h.stateDir, "state-dir", "", "run records and the managed containerd (default /var/lib/hookbox as root, else $XDG_STATE_HOME/hookbox); also the runfiles store unless --cache-dir is given")
	pf.StringVar(&h.cacheDir, "cache-dir", "", "runfiles store (default --state-dir if given, else /var/cache/hookbox as root, else $XDG_CACHE_HOME/hookbox)")
	pf.StringVar(&h.address, "address", "", "containerd socket (default $HOOKBOX_CONTAINERD_ADDRESS, then /run/containerd/containerd.sock, else a managed containerd)")
	root.AddCommand(newRenderCommand(h), newRootlessCommand(), newTracerCommand(h), newEgressCommand(), newRunCommand(h), newVerifyCommand(h), newGCCommand(h), newPsCommand(h), newLogsCommand(h),
		newDoctorCommand(h), newDaemonCommand(h), newSchemaCommand(), newImageCommand(h), newKeyCommand(), newK8sCommand(), newVersionCommand())
	return root
}

func newRenderCommand(h *hostFlags) *cobra.Command {
	var format, spawn string
	var withRunfiles bool
	var sets []string
	var kube k8sFlags
	cmd := &cobra.Command{
		Use:   "render SPEC",
		Short: "Compile a spawn spec and print its render",
		Long: `Compile a spawn spec (YAML or JSON) and print the render: the exact plan of
each spawn. --format json prints canonical JSON (a SpawnList prints a JSON
array); the sha256 of one render's canonical bytes is its digest.
--format text prints a view for humans with the digests to pin (hookbox run
--expect-digest): the plan digest, the same from any checkout of the spec,
and, with --runfiles, the content digest, which adds every program's bytes.
--format digests prints them as one JSON object per spawn. --format oci prints
the OCI runtime spec a run would get (run id "plan", values resolved at
launch shown as placeholders). --runfiles assembles every program's runfiles
(closure, content-addressed store) and puts the manifest in the render, as
hookbox run does, so a changed binary changes the digest.
--format k8s prints, per spawn, a ConfigMap, a NetworkPolicy and a batch/v1
Job that runs the same argv in the same read-only layout (README "Review
pipeline on Kubernetes"); with --build it first builds the images the Jobs
use that no flag gives (as hookbox image build SPEC does: base, one runfiles
image per spawn, seed, proxy), pushes them to --push REGISTRY/PATH or imports
them into containerd namespace --build-namespace (k8s.io), and pins the
objects to their digests, which it prints on stderr. --set NAME=VALUE fills
the spec's template slots.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(renderFormats, format) {
				return usageError{fmt.Errorf("--format %q: use %s", format, strings.Join(renderFormats, ", "))}
			}
			if format == "k8s" {
				return kube.render(cmd, h, args[0], sets, spawn, withRunfiles)
			}
			if err := refuseK8sFlags(cmd.Flags(), format); err != nil {
				return err
			}
			renders, err := compileSelected(args[0], sets, spawn)
			if err != nil {
				return err
			}
			dirs := dirsFrom(h.stateDir, h.cacheDir, nil)
			if withRunfiles {
				if err := addRunfiles(cmd.Context(), renders, dirs.cache); err != nil {
					return err
				}
			}
			var out bytes.Buffer
			if err := writeRenders(&out, renders, format, dirs.state); err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out.Bytes())
			return err
		},
	}
	cmd.Flags().StringVar(&format, "format", "json", "output format: "+strings.Join(renderFormats, ", "))
	cmd.Flags().StringArrayVar(&sets, "set", nil, "NAME=VALUE: fill the spec's template slot NAME (repeatable)")
	kube.register(cmd.Flags())
	cmd.Flags().StringVar(&spawn, "spawn", "", "print only the spawn with this name")
	cmd.RegisterFlagCompletionFunc("spawn", completeSpawnNames)
	cmd.Flags().BoolVar(&withRunfiles, "runfiles", false, "assemble the runfiles and include their manifest")
	return cmd
}

// renderFormats are the documents hookbox render prints.
var renderFormats = []string{"json", "text", "digests", "oci", "k8s"}

// spawnDigests is one line of render --format digests.
type spawnDigests struct {
	Spawn string `json:"spawn"`
	render.Digests
}

func selectSpawn(renders []*render.Render, name string) []*render.Render {
	for _, r := range renders {
		if r.Spawn == name {
			return []*render.Render{r}
		}
	}
	return nil
}

// writeRenders prints one render as its canonical JSON, several as a JSON
// array of canonical renders, text sections, or their digests.
func writeRenders(w io.Writer, renders []*render.Render, format, stateDir string) error {
	for i, r := range renders {
		digests, err := r.Digests()
		if err != nil {
			return err
		}
		switch {
		case format == "digests":
			data, err := json.Marshal(spawnDigests{Spawn: r.Spawn, Digests: digests})
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "%s\n", data)
		case format == "oci":
			c, err := plan.Preview(context.Background(), r, launcher.RunsDir(stateDir))
			if err != nil {
				return fmt.Errorf("spawn %s: %w", r.Spawn, err)
			}
			data, err := json.MarshalIndent(c.Spec, "", "  ")
			if err != nil {
				return err
			}
			if len(renders) > 1 {
				fmt.Fprintf(w, "# spawn %s\n", r.Spawn)
			}
			fmt.Fprintf(w, "%s\n", data)
		case format == "text":
			if i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprint(w, r.Text(digests))
		case len(renders) == 1:
			canonical, err := r.Canonical()
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "%s\n", canonical)
		default:
			canonical, err := r.Canonical()
			if err != nil {
				return err
			}
			sep := ","
			if i == 0 {
				sep = "["
			}
			fmt.Fprintf(w, "%s%s", sep, canonical)
			if i == len(renders)-1 {
				fmt.Fprintln(w, "]")
			}
		}
	}
	return nil
}

// addRunfiles assembles each render's runfiles into the store and records
// the manifest in the render, as a run does.
func addRunfiles(ctx context.Context, renders []*render.Render, cacheDir string) error {
	store, err := runfiles.OpenStore(cacheDir)
	if err != nil {
		return err
	}
	for _, r := range renders {
		if _, err := plan.Runfiles(ctx, store, r, runfiles.RenderOptions{}); err != nil {
			return err
		}
	}
	return nil
}

func newSchemaCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema (draft 2020-12) of the spawn spec",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := compiler.JSONSchema()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", data)
			return err
		},
	}
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print hookbox's version",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "hookbox %s (render schema %d, spec %s, %s %s/%s)\n",
				version, render.SchemaVersion, compiler.APIVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}

func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("%s takes %d argument(s), got %d: usage: %s", cmd.Name(), n, len(args), strings.TrimSpace(cmd.UseLine()))}
		}
		return nil
	}
}

// compileSelected compiles file with the --set values and keeps the spawn
// named by --spawn, if given.
func compileSelected(file string, sets []string, spawn string) ([]*render.Render, error) {
	params, err := compiler.ParseSetFlags(sets)
	if err != nil {
		return nil, usageError{err}
	}
	renders, err := compiler.CompileFileWithOptions(file, compiler.HostChecks(params))
	if err != nil {
		return nil, err
	}
	if spawn != "" {
		if renders = selectSpawn(renders, spawn); renders == nil {
			return nil, usageError{fmt.Errorf("--spawn %q: no such spawn in %s", spawn, file)}
		}
	}
	return renders, nil
}
