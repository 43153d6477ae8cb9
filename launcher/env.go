package launcher

import (
	"context"
	"os"

	"hookbox.dev/hookbox/internal/config/secretsconf"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/secrets"
)

// resolveEnv resolves the values of the render's host and secret variables.
// Values go to the container's environment only.
func resolveEnv(ctx context.Context, r *render.Render, lookup secretsconf.Lookup) (map[string]string, error) {
	env := map[string]string{}
	var names []string
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
		return env, nil
	}
	values, err := secrets.Resolver{Lookup: lookup, LookupEnv: os.LookupEnv}.Resolve(ctx, names)
	if err != nil {
		return nil, err
	}
	for k, v := range values {
		env[k] = v
	}
	return env, nil
}
