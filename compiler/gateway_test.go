package compiler

import (
	"slices"
	"strings"
	"testing"

	"hookbox.dev/hookbox/render"
)

func TestGatewaySecret(t *testing.T) {
	for name, tc := range map[string]struct {
		engine, secret  string
		wantGateway     render.Gateway
		wantEnv         render.EnvVar // the engine's base URL setting
		wantArg         string        // or a flag carrying it
		wantDestination string
	}{
		"claude, anthropic": {
			engine: "{kind: claude, path: /opt/c}", secret: "{name: ANTHROPIC_API_KEY, gateway: anthropic}",
			wantGateway: render.Gateway{Kind: "anthropic", Listen: "127.0.0.1:3129", Upstream: "https://api.anthropic.com", Header: "x-api-key",
				Paths: []string{"/v1/"}, Secret: "ANTHROPIC_API_KEY", Placeholder: gatewayPlaceholder},
			wantEnv:         render.EnvVar{Name: "ANTHROPIC_BASE_URL", Source: render.EnvHookbox, Value: "http://127.0.0.1:3129"},
			wantDestination: "api.anthropic.com:443",
		},
		"codex, openai, upstream override": {
			engine: "{kind: codex, path: /opt/x}", secret: "{name: OPENAI_API_KEY, gateway: openai, upstream: 'https://10.1.2.3:8443'}",
			wantGateway: render.Gateway{Kind: "openai", Listen: "127.0.0.1:3129", Upstream: "https://10.1.2.3:8443", Header: "Authorization", Prefix: "Bearer ",
				Paths: []string{"/v1/"}, Secret: "OPENAI_API_KEY", Placeholder: gatewayPlaceholder},
			wantArg:         `model_providers.hookbox.base_url="http://127.0.0.1:3129/v1"`,
			wantDestination: "10.1.2.3:8443",
		},
		"gemini": {
			engine: "{kind: gemini, path: /opt/g}", secret: "{name: GEMINI_API_KEY, gateway: gemini}",
			wantGateway: render.Gateway{Kind: "gemini", Listen: "127.0.0.1:3129", Upstream: "https://generativelanguage.googleapis.com", Header: "x-goog-api-key",
				Paths: []string{"/v1beta/", "/v1/"}, Secret: "GEMINI_API_KEY", Placeholder: gatewayPlaceholder},
			wantEnv:         render.EnvVar{Name: "GOOGLE_GEMINI_BASE_URL", Source: render.EnvHookbox, Value: "http://127.0.0.1:3129"},
			wantDestination: "generativelanguage.googleapis.com:443",
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := compileSpec(t, spawnYAML(tc.engine, "  prompt: x", "  secrets: ["+tc.secret+"]"))
			if len(r.Gateways) != 1 || !gatewayEqual(r.Gateways[0], tc.wantGateway) {
				t.Fatalf("gateways %+v, want %+v", r.Gateways, tc.wantGateway)
			}
			secretVar := tc.wantGateway.Secret
			if !slices.Contains(r.Process.Env, render.EnvVar{Name: secretVar, Source: render.EnvHookbox, Value: gatewayPlaceholder}) {
				t.Errorf("the engine must get only the placeholder in %s: %+v", secretVar, r.Process.Env)
			}
			for _, e := range r.Process.Env {
				if e.Source == render.EnvSecret {
					t.Errorf("a gateway secret must not reach the container's environment: %+v", e)
				}
			}
			if tc.wantEnv.Name != "" && !slices.Contains(r.Process.Env, tc.wantEnv) {
				t.Errorf("no %+v in %+v", tc.wantEnv, r.Process.Env)
			}
			if tc.wantArg != "" && !slices.Contains(r.Engine.Exec.Argv, tc.wantArg) {
				t.Errorf("argv %q lacks %q", r.Engine.Exec.Argv, tc.wantArg)
			}
			if r.Network != render.NetworkAllowlist || r.Egress == nil {
				t.Fatalf("a gateway needs the allowlist network: %s %+v", r.Network, r.Egress)
			}
			var dests []string
			for _, d := range r.Egress.Allow {
				dests = append(dests, d.Address()+" "+d.Source)
			}
			if want := tc.wantDestination + " gateway:" + tc.wantGateway.Kind; !slices.Equal(dests, []string{want}) {
				t.Errorf("allowlist %q, want only the upstream %q", dests, want)
			}
		})
	}
}

func gatewayEqual(a, b render.Gateway) bool {
	return a.Kind == b.Kind && a.Listen == b.Listen && a.Upstream == b.Upstream && a.Header == b.Header &&
		a.Prefix == b.Prefix && slices.Equal(a.Paths, b.Paths) && a.Secret == b.Secret && a.Placeholder == b.Placeholder
}

func TestGatewaySecretRefusals(t *testing.T) {
	for name, tc := range map[string]struct{ engine, lines, want string }{
		"unknown kind":            {"{kind: claude, path: /opt/c}", "  secrets: [{name: K, gateway: bedrock}]", "test.yaml:8:32: spec.secrets[0].gateway: gateway \"bedrock\" is not a kind hookbox knows"},
		"engine without base URL": {"{kind: exec, path: /opt/e}", "  secrets: [{name: K, gateway: anthropic}]", "engine exec cannot be pointed at a base URL"},
		"wrong provider":          {"{kind: claude, path: /opt/c}", "  secrets: [{name: K, gateway: openai}]", "engine claude (model \"\") does not speak the openai API"},
		"pi without a provider":   {"{kind: pi, path: /opt/p, model: llama}", "  secrets: [{name: K, gateway: anthropic}]", "does not speak the anthropic API"},
		"baseURL too":             {"{kind: claude, path: /opt/c, baseURL: 'http://10.0.0.1:1'}", "  secrets: [{name: K, gateway: anthropic}]", "engine.baseURL and the gateway secret both say"},
		"base URL variable too":   {"{kind: claude, path: /opt/c}", "  secrets: [{name: K, gateway: anthropic}]\n  env: {set: {ANTHROPIC_BASE_URL: 'http://x:1'}}", "the gateway secret and ANTHROPIC_BASE_URL both say"},
		"plain http upstream":     {"{kind: claude, path: /opt/c}", "  secrets: [{name: K, gateway: anthropic, upstream: 'http://10.0.0.1'}]", "is not https"},
		"upstream with a path":    {"{kind: claude, path: /opt/c}", "  secrets: [{name: K, gateway: anthropic, upstream: 'https://x.example/v1'}]", "is not an origin"},
		"mapping without gateway": {"{kind: claude, path: /opt/c}", "  secrets: [{name: K}]", "a secret mapping needs name and gateway"},
		"two gateways":            {"{kind: claude, path: /opt/c}", "  secrets: [{name: K, gateway: anthropic}, {name: L, gateway: anthropic}]", "a second gateway secret"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := tryCompile(spawnYAML(tc.engine, "  prompt: x", tc.lines))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
