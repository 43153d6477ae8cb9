package plan

import (
	"fmt"
	"net/url"

	"hookbox.dev/hookbox/egress"
	"hookbox.dev/hookbox/render"
)

// EgressPolicy is a render's allowlist as the proxy's rules, one per
// destination: the launcher's proxy and `hookbox egress serve` in a pod
// enforce the same one. The zero Policy for a render without egress.
func EgressPolicy(r *render.Render) egress.Policy {
	var p egress.Policy
	if r.Egress == nil {
		return p
	}
	for _, d := range r.Egress.Allow {
		p.Allow = append(p.Allow, egress.Rule{Host: d.Host, Port: d.Port, Kind: egress.Kind(d.Kind)})
	}
	return p
}

// GatewayRoutes are a render's gateways as the proxy serves them, with the
// credentials (by secret name) the launcher or the pod's sidecar resolved:
// both serve the same routes. A missing credential is an error naming the
// secret, never a gateway that forwards without one.
func GatewayRoutes(r *render.Render, credentials map[string]string) ([]egress.GatewayRoute, error) {
	var out []egress.GatewayRoute
	for _, g := range r.Gateways {
		upstream, err := url.Parse(g.Upstream)
		if err != nil {
			return nil, fmt.Errorf("gateway %s: upstream %q: %w; recompile the spec", g.Kind, g.Upstream, err)
		}
		value, ok := credentials[g.Secret]
		if !ok || value == "" {
			return nil, fmt.Errorf("gateway %s: secret %s has no value: set it in the environment or the global config's secrets lookup", g.Kind, g.Secret)
		}
		route := egress.GatewayRoute{Name: g.Kind, Upstream: upstream, PathPrefixes: g.Paths, Header: g.Header, Prefix: g.Prefix, Credential: value}
		if err := route.Validate(); err != nil {
			return nil, fmt.Errorf("gateway %s: %w", g.Kind, err)
		}
		out = append(out, route)
	}
	return out, nil
}
