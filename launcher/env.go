package launcher

import (
	"context"
	"os"
	"slices"

	"hookbox.dev/hookbox/internal/config/secretsconf"
	"hookbox.dev/hookbox/launcher/cgroup"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/secrets"
)

// resolveEnv resolves the values of the render's host and secret variables,
// and of its gateways' secrets. env goes to the container's environment
// only; credentials to the gateways on the host side only, never into the
// container. Each secret lookup runs in a cgroup of its own from helpers,
// named after runID; degraded says what a lookup ran without, each reason
// once, with why.
func resolveEnv(ctx context.Context, r *render.Render, lookup secretsconf.Lookup, helpers cgroup.Helpers, runID string) (env, credentials map[string]string, degraded []helperDegraded, err error) {
	env = map[string]string{}
	credentials = map[string]string{}
	var names []string
	for _, g := range r.Gateways {
		names = append(names, g.Secret)
	}
	for _, e := range r.Process.Env {
		switch e.Source {
		case render.EnvHost:
			if v, ok := os.LookupEnv(e.Name); ok {
				env[e.Name] = v
			}
		case render.EnvSecret:
			names = append(names, e.Name)
		}
	}
	if len(names) == 0 {
		return env, credentials, nil, nil
	}
	resolver := secrets.Resolver{Lookup: lookup, LookupEnv: os.LookupEnv, Cgroups: helpers, RunID: runID,
		Degraded: func(reason, why string) {
			if !slices.ContainsFunc(degraded, func(d helperDegraded) bool { return d.reason == reason }) {
				degraded = append(degraded, helperDegraded{reason, why})
			}
		}}
	values, err := resolver.Resolve(ctx, names)
	if err != nil {
		return nil, nil, degraded, err
	}
	gateway := map[string]bool{}
	for _, g := range r.Gateways {
		gateway[g.Secret] = true
	}
	for k, v := range values {
		if gateway[k] {
			credentials[k] = v
		} else {
			env[k] = v
		}
	}
	return env, credentials, degraded, nil
}

// helperDegraded is a degraded reason of a host-side helper, and why.
type helperDegraded struct{ reason, why string }
