package compiler

import (
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"hookbox.dev/hookbox/render"
)

// Secret is one entry of spec.secrets: a name (the secret goes into the
// engine's environment), or {name, gateway[, upstream]}: the secret never
// enters the container. The engine talks to hookbox's model gateway inside
// its own network namespace with a placeholder credential, and the
// gateway, on the host side, forwards to the provider over TLS with the
// real value (docs/threat-model.md, "Model gateway").
type Secret struct {
	Name    string
	Gateway string
	// Upstream replaces the gateway kind's provider URL (https://HOST[:PORT],
	// e.g. a company's model proxy).
	Upstream string
}

var secretSchema = map[string]any{
	"oneOf": []any{
		map[string]any{"type": "string", "minLength": 1, "description": "A secret environment variable's name: the value is resolved at launch and given to the engine."},
		map[string]any{
			"type":                 "object",
			"additionalProperties": false,
			"required":             []string{"name", "gateway"},
			"properties": map[string]any{
				"name":     map[string]any{"type": "string", "minLength": 1, "description": "The secret's name, resolved at launch on the host like any secret."},
				"gateway":  map[string]any{"type": "string", "enum": gatewayKindNames(), "description": "The provider API the gateway serves. The engine gets a placeholder in this variable and its base URL pointed at the gateway inside its network namespace; the real value is added on the host side and never enters the container."},
				"upstream": map[string]any{"type": "string", "description": "https://HOST[:PORT] to forward to instead of the provider's API."},
			},
		},
	},
}

func (s *Secret) decodeNode(d *decoder, n *yaml.Node, path string) {
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!str":
		s.Name = n.Value
	case n.Kind == yaml.MappingNode:
		var body struct {
			Name     *string `json:"name"`
			Gateway  *string `json:"gateway"`
			Upstream string  `json:"upstream"`
		}
		before := len(d.diags.list)
		d.decodeStruct(n, path, reflect.ValueOf(&body).Elem())
		if len(d.diags.list) > before {
			return
		}
		if body.Name == nil || body.Gateway == nil {
			d.errAt(n, path, "write {name: ANTHROPIC_API_KEY, gateway: anthropic}, or just the name for a secret the engine gets", "a secret mapping needs name and gateway")
			return
		}
		s.Name, s.Gateway, s.Upstream = *body.Name, *body.Gateway, body.Upstream
	default:
		d.typeErr(n, path, "a name, or a mapping {name: NAME, gateway: KIND}")
	}
}

// SecretNames are the names of every secret, gateway ones included.
func (s *SpawnSpec) SecretNames() []string {
	out := make([]string, len(s.Secrets))
	for i, sec := range s.Secrets {
		out[i] = sec.Name
	}
	return out
}

// gatewayKind is one provider API the gateway can serve.
type gatewayKind struct {
	name string
	// upstream is the provider's API origin.
	upstream string
	// header and prefix: where the credential goes (prefix+value).
	header, prefix string
	// paths are the request path prefixes the gateway forwards.
	paths []string
	// apiPath is appended to the gateway's address to make the engine's
	// base URL, in the form the engine's setting takes (docs/engines.md).
	apiPath string
}

var gatewayKinds = []gatewayKind{
	{name: "anthropic", upstream: "https://api.anthropic.com", header: "x-api-key", paths: []string{"/v1/"}},
	{name: "gemini", upstream: "https://generativelanguage.googleapis.com", header: "x-goog-api-key", paths: []string{"/v1beta/", "/v1/"}},
	{name: "openai", upstream: "https://api.openai.com", header: "Authorization", prefix: "Bearer ", paths: []string{"/v1/"}, apiPath: "/v1"},
}

func gatewayKindNames() []string {
	var out []string
	for _, k := range gatewayKinds {
		out = append(out, k.name)
	}
	return out
}

func findGatewayKind(name string) (gatewayKind, bool) {
	for _, k := range gatewayKinds {
		if k.name == name {
			return k, true
		}
	}
	return gatewayKind{}, false
}

// gatewayPlaceholder is what the engine gets in a gateway secret's
// variable: enough for the CLI to start; worth nothing outside.
const gatewayPlaceholder = "hookbox-gateway-placeholder"

// gatewayPortBase is the first container loopback port a gateway listens
// on (the egress proxy has render.ProxyPort); one port per gateway.
const gatewayPortBase = 3129

// engineGatewayKinds says which gateway kinds an engine can be pointed
// at: its provider's. pi's depends on the model's provider.
func engineGatewayKinds(kind string, s *SpawnSpec) []string {
	switch kind {
	case "claude":
		return []string{"anthropic"}
	case "codex":
		return []string{"openai"}
	case "gemini":
		return []string{"gemini"}
	case "pi":
		switch piModelProvider(s.Engine.Model) {
		case "anthropic":
			return []string{"anthropic"}
		case "openai":
			return []string{"openai"}
		case "google":
			return []string{"gemini"}
		}
	}
	return nil
}

// validateGateways checks the gateway secrets: a known kind the engine can
// use, at most one, an https upstream, and no other base URL setting.
func (p *Parsed) validateGateways(diags *diagnostics, def *engineDef) {
	s := &p.Spawn.Spec
	var seen int
	for i, sec := range s.Secrets {
		if sec.Gateway == "" {
			continue
		}
		field := fmt.Sprintf("spec.secrets[%d]", i)
		seen++
		if seen > 1 {
			p.errf(diags, field+".gateway", "keep one gateway secret: an engine has one model API", "a second gateway secret")
			continue
		}
		if _, ok := findGatewayKind(sec.Gateway); !ok {
			p.errf(diags, field+".gateway", "use one of "+strings.Join(gatewayKindNames(), ", ")+", or give the secret as a plain name (the engine then gets the value)",
				"gateway %q is not a kind hookbox knows", sec.Gateway)
			continue
		}
		if def == nil {
			continue
		}
		if def.baseURL == nil {
			p.errf(diags, field+".gateway", "give the secret as a plain name (the engine then gets the value)", "engine %s cannot be pointed at a base URL, so it cannot use the gateway", def.kind)
			continue
		}
		if kinds := engineGatewayKinds(def.kind, s); !slices.Contains(kinds, sec.Gateway) {
			want := "its model provider's"
			if len(kinds) > 0 {
				want = strings.Join(kinds, " or ")
			}
			p.errf(diags, field+".gateway", "use gateway "+want+", or give the secret as a plain name", "engine %s (model %q) does not speak the %s API", def.kind, s.Engine.Model, sec.Gateway)
			continue
		}
		if s.Engine.BaseURL != "" {
			p.errf(diags, "spec.engine.baseURL", "remove engine.baseURL; to forward elsewhere, set upstream: on the gateway secret", "engine.baseURL and the gateway secret both say where the model API is")
		}
		if name, ok := baseURLEnvGiven(s, def); ok {
			p.errf(diags, field, "remove "+name+" from env: the gateway sets it", "the gateway secret and %s both say where the model API is", name)
		}
		if sec.Upstream != "" {
			if _, err := gatewayUpstream(sec.Upstream); err != nil {
				p.errf(diags, field+".upstream", "give https://HOST or https://HOST:PORT", "%v", err)
			}
		}
	}
}

// gatewayUpstream parses an upstream override: an https origin.
func gatewayUpstream(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%q is not a URL", raw)
	case u.Scheme != "https":
		return nil, fmt.Errorf("upstream %q is not https: the gateway speaks TLS to its upstream", raw)
	case u.Hostname() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/"):
		return nil, fmt.Errorf("upstream %q is not an origin (https://HOST[:PORT], no path, user or query)", raw)
	}
	u.Path = ""
	return u, nil
}

// gatewayDestinations are the allowlist entries the gateways need: their
// upstreams, added automatically.
func (p *Parsed) gatewayDestinations() []render.Destination {
	var out []render.Destination
	for _, sec := range p.Spawn.Spec.Secrets {
		k, ok := findGatewayKind(sec.Gateway)
		if !ok {
			continue
		}
		upstream := k.upstream
		if sec.Upstream != "" {
			upstream = sec.Upstream
		}
		d, _, err := urlDestination(upstream)
		if err != nil {
			continue // reported by validateGateways
		}
		d.Source = render.SourceGateway + sec.Gateway
		out = append(out, d)
	}
	return out
}

// gateways puts the gateway secrets into the render: the gateway, the
// placeholder the engine gets, and its base URL pointed at the gateway.
func (c *compilation) gateways() error {
	port := gatewayPortBase
	for _, sec := range c.spec.Secrets {
		k, ok := findGatewayKind(sec.Gateway)
		if !ok {
			continue
		}
		upstream := k.upstream
		if sec.Upstream != "" {
			u, err := gatewayUpstream(sec.Upstream)
			if err != nil {
				return err // validated earlier
			}
			upstream = u.String()
		}
		listen := "127.0.0.1:" + strconv.Itoa(port)
		port++
		c.r.Gateways = append(c.r.Gateways, render.Gateway{
			Kind: k.name, Listen: listen, Upstream: upstream, Header: k.header, Prefix: k.prefix,
			Paths: slices.Clone(k.paths), Secret: sec.Name, Placeholder: gatewayPlaceholder,
		})
		c.setEnv(sec.Name, render.EnvHookbox, gatewayPlaceholder)
		if err := c.def.baseURL(c, "http://"+listen+k.apiPath); err != nil {
			return err
		}
	}
	return nil
}
