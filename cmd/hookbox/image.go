package main

import (
	"context"
	"fmt"
	"os"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/spf13/cobra"

	"hookbox.dev/hookbox/images"
	"hookbox.dev/hookbox/images/buildkit"
	"hookbox.dev/hookbox/launcher/daemon"
)

// defaultContainerdAddress is containerd's system socket.
const defaultContainerdAddress = "/run/containerd/containerd.sock"

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

func newImageCommand(h *hostFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build the base image (no executables; every program is a runfile)",
	}
	var buildkitAddr, layoutFile string
	build := &cobra.Command{
		Use:   "build",
		Short: "Build the base image and import it into containerd",
		Long: `Build the base image in-process (deterministic OCI layout, no daemon) and
import it into containerd's namespace "hookbox", or with --buildkit ADDR solve
its BuildKit LLB definition on that buildkitd, which exports it straight into
containerd's image store. --oci-layout FILE writes the OCI layout tar instead
of importing it.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			address := h.address
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			def, err := images.HostDefinition()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if buildkitAddr != "" {
				res, err := buildkit.Build(ctx, buildkitAddr, def, buildkit.Options{Progress: cmd.ErrOrStderr()})
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "%s %s (buildkit, %s)\n", res.Name, res.ManifestDigest, res.Duration.Round(time.Millisecond))
				return nil
			}
			img, err := images.Build(def)
			if err != nil {
				return err
			}
			if layoutFile != "" {
				f, err := os.Create(layoutFile)
				if err != nil {
					return err
				}
				if err := img.WriteLayoutTar(f); err != nil {
					f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
				fmt.Fprintf(out, "%s %s -> %s\n", img.Name, img.ManifestDigest, layoutFile)
				return nil
			}
			addr := containerdAddress(address)
			if rootlessUser() {
				// The image goes to the user's rootless containerd (started
				// if need be); importing is all over its socket.
				endpoint, err := daemon.ResolveRootless(ctx, address, daemonOptions(true, "", nil))
				if err != nil {
					return err
				}
				addr = endpoint.Address
			}
			client, err := containerd.New(addr, containerd.WithTimeout(5*time.Second))
			if err == nil {
				defer client.Close()
				pingCtx, cancelPing := context.WithTimeout(ctx, 5*time.Second)
				_, err = client.Version(pingCtx)
				cancelPing()
			}
			if err != nil {
				return fmt.Errorf("containerd does not answer at %s (start it, pass --address, or write the image with --oci-layout FILE): %w", addr, err)
			}
			if _, err := images.Import(ctx, client, img); err != nil {
				return err
			}
			fmt.Fprintf(out, "%s %s (imported into containerd namespace %s)\n", img.Name, img.ManifestDigest, images.Namespace)
			return nil
		},
	}
	build.Flags().StringVar(&buildkitAddr, "buildkit", "", "solve the LLB definition on this buildkitd (e.g. unix:///run/buildkit/buildkitd.sock)")
	build.Flags().StringVar(&layoutFile, "oci-layout", "", "write the OCI image layout tar to this file instead of importing it")
	cmd.AddCommand(build)
	return cmd
}
