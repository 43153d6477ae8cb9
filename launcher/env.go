package launcher

import (
	"context"
	"os"

	"hookbox.dev/hookbox/internal/config/secretsconf"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/secrets"
)

// resolveEnv resolves the values of the render's host and secret variables,
// and of its gateways' secrets. env goes to the container's environment
// only; credentials to the gateways on the host side only, never into the
// container.
func resolveEnv(ctx context.Context, r *render.Render, lookup secretsconf.Lookup) (env, credentials map[string]string, err error) {
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
		return env, credentials, nil
	}
	values, err := secrets.Resolver{Lookup: lookup, LookupEnv: os.LookupEnv}.Resolve(ctx, names)
	if err != nil {
		return nil, nil, err
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
	return env, credentials, nil
}
