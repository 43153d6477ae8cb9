package launcher

import (
	"context"
	"os"
	"slices"

	"hookbox.dev/hookbox/internal/config/secretsconf"
	"hookbox.dev/hookbox/internal/initsecrets"
	"hookbox.dev/hookbox/launcher/cgroup"
	"hookbox.dev/hookbox/oci"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/secrets"
)

// resolveEnv resolves the values of the render's host and secret
// variables, and of its gateways' secrets. host goes into the container's
// spec. The container's secrets never do (containerd keeps the spec on
// disk): stream is their values for hookbox-init, which reads them from the
// task's stdin (nil without secrets; package internal/initsecrets).
// credentials go to the gateways on the host side only, never into the
// container. Each secret lookup runs in a cgroup of its own from helpers,
// named after runID; degraded says what a lookup ran without, each reason
// once, with why.
func resolveEnv(ctx context.Context, r *render.Render, lookup secretsconf.Lookup, helpers cgroup.Helpers, runID string) (host map[string]string, stream []byte, credentials map[string]string, degraded []helperDegraded, err error) {
	host = map[string]string{}
	credentials = map[string]string{}
	container := oci.SecretNames(r)
	names := append([]string(nil), container...)
	for _, g := range r.Gateways {
		names = append(names, g.Secret)
	}
	for _, e := range r.Process.Env {
		if e.Source != render.EnvHost {
			continue
		}
		if v, ok := os.LookupEnv(e.Name); ok {
			host[e.Name] = v
		}
	}
	if len(names) == 0 {
		return host, nil, credentials, nil, nil
	}
	resolver := secrets.Resolver{Lookup: lookup, LookupEnv: os.LookupEnv, Cgroups: helpers, RunID: runID,
		Degraded: func(reason, why string) {
			if !slices.ContainsFunc(degraded, func(d helperDegraded) bool { return d.reason == reason }) {
				degraded = append(degraded, helperDegraded{reason, why})
			}
		}}
	values, err := resolver.Resolve(ctx, names)
	if err != nil {
		return nil, nil, nil, degraded, err
	}
	for _, g := range r.Gateways {
		credentials[g.Secret] = values[g.Secret]
	}
	if len(container) > 0 {
		if stream, err = initsecrets.Encode(container, values); err != nil {
			return nil, nil, nil, degraded, err
		}
	}
	return host, stream, credentials, degraded, nil
}

// helperDegraded is a degraded reason of a host-side helper, and why.
type helperDegraded struct{ reason, why string }
