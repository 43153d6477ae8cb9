//go:build hookbox_lite

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The lite build is bin/hookbox (make build, -tags hookbox_lite): every
// command but the Kubernetes and image-building ones, whose libraries
// (client-go, k8s.io/api, BuildKit's client, NRI: 241 packages) made every
// `hookbox run` pay their package initialisation and a binary two thirds
// larger: 9 ms of CPU a trivial run (docs/cli.md). Those commands are in
// the full build, bin/hookbox-kube beside it, which the lite one executes
// in its place with the same arguments. The full build is a superset, so
// whatever it is handed it does as if called directly.

// kubeBinary is the full build's name, next to the lite one.
const kubeBinary = "hookbox-kube"

// fullBuildNeeded: the command line is the full build's.
type fullBuildNeeded struct{ what string }

func (f fullBuildNeeded) Error() string { return f.what + " is in " + kubeBinary }

func newImageCommand(*hostFlags) *cobra.Command {
	return handedOver("image", "Build the images a run or a Kubernetes Job uses")
}

func newK8sCommand() *cobra.Command {
	return handedOver("k8s", "Kubernetes: the node agent's verdicts")
}

// handedOver is a command of the full build: it takes its arguments as
// they are (the full build parses them) and hands the command line over.
func handedOver(use, short string) *cobra.Command {
	return &cobra.Command{Use: use, Short: short + " (" + kubeBinary + ")", DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error { return fullBuildNeeded{"hookbox " + use} }}
}

// k8sFlags: render's --format k8s flags are the full build's; given here,
// they are unknown flags, which hand the command line over.
type k8sFlags struct{}

func (*k8sFlags) register(*pflag.FlagSet) {}

func (*k8sFlags) render(*cobra.Command, *hostFlags, string, []string, string, bool) error {
	return fullBuildNeeded{"hookbox render --format k8s"}
}

func refuseK8sFlags(*pflag.FlagSet, string) error { return nil }

// nodeFlags: tracer serve --node is the full build's (an unknown flag
// here).
type nodeFlags struct{ on bool }

func (*nodeFlags) add(*cobra.Command) {}

func serveNode(context.Context, *hostFlags, nodeFlags, io.Writer) error {
	return fullBuildNeeded{"hookbox tracer serve --node"}
}

// handOver executes the full build with args when err says the command
// line is its own: a command of its, or a flag this build does not know
// (nothing has been done yet: flags are parsed before a command runs).
// It returns only if the full build cannot be executed.
func handOver(err error, args []string) (int, bool) {
	var full fullBuildNeeded
	var flag flagError
	isFull := errors.As(err, &full)
	if !isFull && !errors.As(err, &flag) {
		return 0, false
	}
	exe, xerr := os.Executable()
	if xerr == nil {
		kube := filepath.Join(filepath.Dir(exe), kubeBinary)
		xerr = syscall.Exec(kube, append([]string{kube}, args...), os.Environ())
		xerr = fmt.Errorf("%s: %w", kube, xerr)
	}
	if !isFull {
		// Perhaps only a mistyped flag: said as one.
		fmt.Fprintf(os.Stderr, "hookbox: %v (the full build, which has more flags, cannot be run: %v)\n", err, xerr)
		return exitSpec, true
	}
	fmt.Fprintf(os.Stderr, "hookbox: %s needs the full build, %s, next to this hookbox (make build puts bin/%s beside bin/hookbox): %v\n", full.what, kubeBinary, kubeBinary, xerr)
	return exitInfra, true
}
