package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

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
	var socket, managedDir string
	var managed bool
	var idle time.Duration
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

--managed --dir DIR is the managed tracer a root hookbox starts by itself
on its first traced run (no helper listening) and reuses on later runs, so
that its BPF programs stay loaded: socket DIR/sock (0600, DIR 0700), root
peers only, and requests must name this build's tracer key (the hash of
its BPF objects and protocol version; DIR is <runtime dir>/tracer/<key>).
It loads the tracer after it listens, exits after --idle-timeout with no
connection, on SIGTERM, and on SIGUSR1 when idle (hookbox gc). Not meant
to be started by hand.

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

			if managed {
				return serveManaged(ctx, stderr, managedDir, idle)
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
	serve.Flags().BoolVar(&managed, "managed", false, "serve as the managed tracer of root's hookbox runs, in --dir (hookbox starts it)")
	serve.Flags().StringVar(&managedDir, "dir", "", "with --managed: the tracer's directory, <runtime dir>/tracer/<key>")
	serve.Flags().DurationVar(&idle, "idle-timeout", tracehelper.DefaultIdleTimeout, "with --managed: exit after this long with no connection")
	node.add(serve)
	cmd.AddCommand(serve)
	return cmd
}

// serveManaged is `tracer serve --managed`: it listens first, so that a
// first run waits for the exec of this process, not for the BPF load,
// which overlaps with the run's container create.
func serveManaged(ctx context.Context, stderr io.Writer, dir string, idle time.Duration) error {
	key := tracehelper.ManagedKey()
	if filepath.Base(dir) != key || !filepath.IsAbs(dir) {
		return usageError{fmt.Errorf("--managed --dir %q: give the absolute <runtime dir>/tracer/%s of this hookbox's key", dir, key)}
	}
	l, err := tracehelper.ListenPrivate(filepath.Join(dir, "sock"))
	if err != nil {
		return err
	}
	tracer := tracehelper.NewBPFTracer(ebpf.Options{})
	defer tracer.Close()
	go func() {
		if err := tracer.Load(); err != nil {
			fmt.Fprintf(stderr, "hookbox tracer: %v; watches will be refused with tracer-unavailable\n", err)
		}
	}()
	srv := tracehelper.NewManagedServer(tracer, stderr, tracehelper.ManagedOptions{Key: key, IdleTimeout: idle})
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	go func() {
		for range usr1 {
			if srv.StopIfIdle() {
				fmt.Fprintln(stderr, "hookbox tracer: idle, exiting on SIGUSR1")
			}
		}
	}()
	fmt.Fprintf(stderr, "hookbox tracer: managed, key %s, pid %d, listening on %s\n", key, os.Getpid(), filepath.Join(dir, "sock"))
	return srv.Serve(ctx, l)
}
