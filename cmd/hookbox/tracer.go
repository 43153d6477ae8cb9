package main

import (
	"errors"
	"fmt"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"hookbox.dev/hookbox/ebpf"
	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/tracehelper"
)

func newTracerCommand(h *hostFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tracer",
		Short: "The privileged exec tracer helper of rootless hookbox",
	}
	var socket string
	var node nodeFlags
	serve := &cobra.Command{
		Use:   "serve",
		Short: "As root: trace execs in their own cgroups for rootless hookbox runs",
		Long: `Load the BPF exec tracer and serve it on a unix socket (default
` + tracehelper.DefaultSocket + `, or $` + tracehelper.SocketEnv + `) until
SIGINT or SIGTERM. A rootless hookbox, which cannot load BPF, passes its
run's cgroup2 directory and gets that cgroup's exec events back. A user
may watch only cgroups its uid owns (by SO_PEERCRED and the directory's
owner); root gets no exception. One line per watch goes to stderr.

Runs as root, typically from contrib/systemd/hookbox-tracer.service. If the
tracer cannot load here, the helper keeps serving and refuses every watch
with tracer-unavailable and the reason.

--node runs the node agent instead (docs/node-agent.md): an NRI plugin of
the node's containerd that arms the tracer on each hookbox pod's engine
container before it starts, judges it against the pod's render (its
ConfigMap's render.json, checked against hookbox.dev/render-sha256), and
writes the signed record to the ConfigMap hookbox-verdict-<job> of the
Job's namespace (hookbox k8s verdict JOB fetches and checks it).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !host.RealRoot() {
				return usageError{errors.New("tracer serve must run as root: it loads BPF programs for other users (sudo hookbox tracer serve, or contrib/systemd/hookbox-tracer.service)")}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			stderr := cmd.ErrOrStderr()
			if node.on {
				return serveNode(ctx, h, node, stderr)
			}

			l, err := tracehelper.Listen(socket)
			if err != nil {
				return err
			}
			tracer := tracehelper.NewBPFTracer(ebpf.Options{})
			defer tracer.Close()
			// Loaded now, so a host problem shows at start, not at the
			// first run; the helper serves (and refuses) either way.
			if err := tracer.Load(); err != nil {
				fmt.Fprintf(stderr, "hookbox tracer: %v; watches will be refused with tracer-unavailable\n", err)
			}
			fmt.Fprintf(stderr, "hookbox tracer: listening on %s\n", socket)
			return tracehelper.NewServer(tracer, stderr).Serve(ctx, l)
		},
	}
	serve.Flags().StringVar(&socket, "socket", tracehelper.SocketPath(), "unix socket to listen on")
	node.add(serve)
	cmd.AddCommand(serve)
	return cmd
}
