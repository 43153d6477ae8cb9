package plan

import (
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
