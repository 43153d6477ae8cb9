package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"hookbox.dev/hookbox/egress"
	"hookbox.dev/hookbox/plan"
	"hookbox.dev/hookbox/render"
)

func newEgressCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "egress",
		Short: "The egress proxy of a render, outside hookbox run",
	}
	var listen, renderFile string
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve a render's egress allowlist as an HTTP proxy on a TCP address",
		Long: `Run the egress proxy hookbox run starts for a render with network.allow,
enforcing the same allowlist, on a plain TCP address of this process's
network namespace. It is the egress-proxy sidecar of the Kubernetes Job
(README "Review pipeline on Kubernetes"): the containers of a pod share
one network namespace, so the engine reaches it at ` + render.ProxyAddress + `.
--render is the render's canonical JSON (hookbox render --format json; in
the Job, the ConfigMap's render.json). One JSON line per connection attempt,
allowed or refused, goes to stdout, as in a run's network.jsonl. SIGINT or
SIGTERM ends every connection and exits 0. A render with model gateways
(secrets with gateway:) also gets each gateway served at its listen address,
with the secret's value read from this process's environment (in the Job,
only the sidecar references the Secret).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, policy, err := readEgressPolicy(renderFile)
			if err != nil {
				return err
			}
			credentials := map[string]string{}
			for _, g := range r.Gateways {
				credentials[g.Secret] = os.Getenv(g.Secret)
			}
			routes, err := plan.GatewayRoutes(r, credentials)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("egress: cannot listen at %s: %w", listen, err)
			}
			gateways := make([]net.Listener, len(routes))
			for i := range routes {
				if gateways[i], err = net.Listen("tcp", r.Gateways[i].Listen); err != nil {
					return fmt.Errorf("egress: gateway %s cannot listen at %s: %w", routes[i].Name, r.Gateways[i].Listen, err)
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "hookbox egress: listening on %s, %d destinations allowed, %d gateways\n", l.Addr(), len(policy.Allow), len(routes))
			return serveEgress(ctx, l, policy, routes, gateways, cmd.OutOrStdout())
		},
	}
	serve.Flags().StringVar(&listen, "listen", render.ProxyAddress, "TCP address to listen on")
	serve.Flags().StringVar(&renderFile, "render", "", "the render's canonical JSON, whose egress allowlist is served (required)")
	var address string
	probe := &cobra.Command{
		Use:   "probe",
		Short: "Exit 0 once something accepts TCP connections at an address",
		Long: `Connect to --address and exit 0 if the connection is accepted, 1 if not.
It is the startup probe of the Job's egress-proxy sidecar: it runs in the
pod's network namespace, where the proxy listens on loopback, which a
kubelet tcpSocket probe (made from the node) cannot reach.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := net.DialTimeout("tcp", address, time.Second)
			if err != nil {
				return fmt.Errorf("egress probe: %w", err)
			}
			return c.Close()
		},
	}
	probe.Flags().StringVar(&address, "address", render.ProxyAddress, "TCP address to connect to")
	cmd.AddCommand(serve, probe)
	return cmd
}

// readEgressPolicy reads one render's canonical JSON and returns its
// allowlist as the proxy's policy. A render without an allowlist has
// nothing to serve: that is the caller's mistake, not an open network.
func readEgressPolicy(file string) (*render.Render, egress.Policy, error) {
	if file == "" {
		return nil, egress.Policy{}, usageError{errors.New("--render FILE is required: the render's canonical JSON (hookbox render --format json)")}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, egress.Policy{}, err
	}
	var r render.Render
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, egress.Policy{}, usageError{fmt.Errorf("--render %s: not one render's JSON: %w", file, err)}
	}
	if r.Network != render.NetworkAllowlist || r.Egress == nil {
		return nil, egress.Policy{}, usageError{fmt.Errorf("--render %s: spawn %s has network %q, no egress allowlist to serve", file, r.Spawn, r.Network)}
	}
	policy := plan.EgressPolicy(&r)
	if err := policy.Validate(); err != nil {
		return nil, egress.Policy{}, usageError{fmt.Errorf("--render %s: %w", file, err)}
	}
	return &r, policy, nil
}

// serveEgress serves policy on l until ctx ends, writing one JSON line per
// attempt to out, then closes the proxy (ending every connection) and
// returns nil.
func serveEgress(ctx context.Context, l net.Listener, policy egress.Policy, routes []egress.GatewayRoute, gateways []net.Listener, out io.Writer) error {
	// Record calls are serialized, and Close waits for every handler, so
	// each line is whole and the last is written before serveEgress returns.
	proxy := egress.New(egress.Options{Policy: policy, Record: func(a egress.Attempt) {
		if line, err := json.Marshal(a); err == nil {
			out.Write(append(line, '\n'))
		}
	}})
	served := make(chan error, 1+len(gateways))
	go func() { served <- proxy.Serve(l) }()
	for i, g := range gateways {
		go func() { served <- proxy.ServeGateway(g, routes[i]) }()
	}
	pending := 1 + len(gateways)
	var first error
	select {
	case <-ctx.Done():
	case err := <-served:
		pending--
		first = fmt.Errorf("egress: serving: %w", err)
	}
	proxy.Close()
	for ; pending > 0; pending-- {
		if err := <-served; first == nil && !errors.Is(err, egress.ErrClosed) {
			first = err
		}
	}
	return first
}
