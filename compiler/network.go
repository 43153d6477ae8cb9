package compiler

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"golang.org/x/net/idna"

	"hookbox.dev/hookbox/render"
)

// spec.network: the string none (the default, also when absent) or
// {allow: [ENTRY, ...]}. An entry is HOST[:PORT] (port 443 when omitted),
// *.DOMAIN[:PORT] with at least two labels after "*.", an IP address
// (10.1.2.3:8080, [fd00::1]:443), or the shorthand model-api, which the
// compiler expands to the hosts of the engine's model provider. The hosts
// of HTTP MCP servers are added to every allowlist, each with its source.
//
// Refused, with the entry's file:line:col: a scheme or a path, an empty
// host, a port outside 1-65535, "*" alone, a wildcard anywhere but as the
// whole leftmost label, a non-ASCII name (write its punycode form),
// loopback or unspecified addresses (loopback inside the container is
// hookbox's proxy itself, reached directly), a repeated entry, and an empty
// allow list or mapping (write network: none). The render holds the
// normalised destinations (render.NewEgress: sorted, one per host:port).

// Network is spec.network. Allow is nil for none.
type Network struct {
	Allow []string `json:"allow,omitempty"`
}

// modelAPI is the allow entry that stands for the engine's provider.
const modelAPI = "model-api"

const networkHint = "write network: none (loopback only), or network: {allow: [HOST:PORT, ...]}"

var networkSchema = map[string]any{
	"oneOf": []any{
		map[string]any{"type": "string", "enum": []string{render.NetworkNone}},
		map[string]any{
			"type":                 "object",
			"additionalProperties": false,
			"required":             []string{"allow"},
			"properties": map[string]any{
				"allow": map[string]any{
					"type":        "array",
					"minItems":    1,
					"items":       map[string]any{"type": "string", "minLength": 1},
					"description": "Destinations: HOST[:PORT] (443 when omitted), *.example.com[:PORT], 10.1.2.3[:PORT], [fd00::1][:PORT], or model-api.",
				},
			},
		},
	},
}

func (v *Network) decodeNode(d *decoder, n *yaml.Node, path string) {
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!str":
		if n.Value != render.NetworkNone {
			d.errAt(n, path, networkHint, "network %q is not supported", n.Value)
		}
	case n.Kind == yaml.MappingNode:
		var body struct {
			Allow *[]string `json:"allow"`
		}
		before := len(d.diags.list)
		d.decodeStruct(n, path, reflect.ValueOf(&body).Elem())
		switch {
		case len(d.diags.list) > before:
		case body.Allow == nil:
			d.errAt(n, path, networkHint, "network has no allow list")
		case len(*body.Allow) == 0:
			d.diags.add(d.at(path+".allow"), path+".allow", "write network: none for no network, or list destinations", "an empty allow list allows nothing")
		default:
			v.Allow = *body.Allow
		}
	default:
		d.typeErr(n, path, "none or a mapping {allow: [...]}")
	}
}

// entryError is a refused allow entry (or URL host): what is wrong, and how
// to write it instead.
type entryError struct{ problem, hint string }

func (e *entryError) Error() string { return e.problem }

func refuse(hint, format string, args ...any) *entryError {
	return &entryError{problem: fmt.Sprintf(format, args...), hint: hint}
}

const entryHint = "write HOST:PORT, e.g. api.example.com:443"

// parseDestination parses one allow entry other than model-api. Source is
// left empty.
func parseDestination(entry string) (render.Destination, error) {
	switch {
	case entry == "":
		return render.Destination{}, refuse(entryHint, "empty entry")
	case strings.ContainsFunc(entry, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return render.Destination{}, refuse("remove the whitespace", "%q contains whitespace or a control character", entry)
	case strings.Contains(entry, "://"):
		scheme, _, _ := strings.Cut(entry, "://")
		hint := entryHint
		if u, err := url.Parse(entry); err == nil && u.Host != "" {
			hint = "write " + u.Host + " (the port defaults to 443)"
		}
		return render.Destination{}, refuse(hint, "%q has a scheme (%s://): the allowlist names hosts and ports", entry, scheme)
	case strings.ContainsAny(entry, "/?#"):
		return render.Destination{}, refuse("write the host and port only: the proxy allows whole hosts", "%q has a path", entry)
	case strings.Contains(entry, "@"):
		return render.Destination{}, refuse(entryHint, "%q has user information (@)", entry)
	}
	host, port, err := splitHostPort(entry)
	if err != nil {
		return render.Destination{}, err
	}
	if strings.EqualFold(host, modelAPI) {
		return render.Destination{}, refuse("write model-api alone: the shorthand takes no port and expands to the provider's hosts", "%q looks like the shorthand model-api", entry)
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		return ipDestination(entry, addr, port)
	}
	name, err := normaliseName(host)
	if err != nil {
		return render.Destination{}, err
	}
	if name == "*" {
		return render.Destination{}, refuse("list the hosts the spawn needs; a bare * would allow everything", "%q allows every host", entry)
	}
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		if strings.Contains(rest, "*") {
			return render.Destination{}, refuse("write one wildcard, as the whole leftmost label: *.example.com", "%q has more than one wildcard", entry)
		}
		if err := checkName(rest); err != nil {
			return render.Destination{}, err
		}
		if strings.Count(rest, ".") < 1 {
			return render.Destination{}, refuse("name the domain with at least two labels after *., e.g. *.example.com", "%q covers a whole top-level domain", entry)
		}
		return render.Destination{Host: name, Port: port, Kind: render.DestWildcard}, nil
	}
	if strings.Contains(name, "*") {
		return render.Destination{}, refuse("a wildcard must be the whole leftmost label: *.example.com", "%q has a wildcard inside the name", entry)
	}
	if err := checkName(name); err != nil {
		return render.Destination{}, err
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return render.Destination{}, refuse(loopbackHint, "%q is loopback", entry)
	}
	return render.Destination{Host: name, Port: port, Kind: render.DestName}, nil
}

const loopbackHint = "remove it: loopback inside the container holds only hookbox's proxy, and it is reached directly (NO_PROXY)"

// splitHostPort splits HOST[:PORT] or [IPV6][:PORT]; the port defaults to 443.
func splitHostPort(entry string) (string, int, error) {
	host, portText, hasPort := entry, "", false
	if rest, ok := strings.CutPrefix(entry, "["); ok {
		inner, after, closed := strings.Cut(rest, "]")
		if !closed {
			return "", 0, refuse("close the bracket: [fd00::1]:443", "%q has an unclosed [", entry)
		}
		if after != "" && !strings.HasPrefix(after, ":") {
			return "", 0, refuse("write [ADDRESS]:PORT", "%q has text after ]", entry)
		}
		addr, err := netip.ParseAddr(inner)
		if err != nil || !addr.Is6() {
			return "", 0, refuse("brackets hold an IPv6 address, e.g. [fd00::1]:443", "%q is not an IPv6 address", inner)
		}
		host, portText, hasPort = inner, strings.TrimPrefix(after, ":"), after != ""
	} else if n := strings.Count(entry, ":"); n == 1 {
		host, portText, hasPort = strings.Cut(entry, ":")
	} else if n > 1 {
		return "", 0, refuse("write an IPv6 address in brackets, e.g. [fd00::1]:443", "%q: an IPv6 address needs brackets", entry)
	}
	if host == "" {
		return "", 0, refuse(entryHint, "%q has no host", entry)
	}
	if !hasPort {
		return host, 443, nil
	}
	port, err := parsePort(portText)
	if err != nil {
		return "", 0, refuse("give a port from 1 to 65535, or leave it out for 443", "%q: %v", entry, err)
	}
	return host, port, nil
}

func parsePort(text string) (int, error) {
	if text == "" {
		return 0, errors.New("empty port")
	}
	if len(text) > 5 || strings.Trim(text, "0123456789") != "" {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", text)
	}
	port, _ := strconv.Atoi(text)
	if port < 1 || port > 65535 {
		return 0, fmt.Errorf("port %d is out of range", port)
	}
	return port, nil
}

func ipDestination(entry string, addr netip.Addr, port int) (render.Destination, error) {
	if addr.Zone() != "" {
		return render.Destination{}, refuse("remove the zone (%...): the proxy connects by address", "%q has an IPv6 zone", entry)
	}
	addr = addr.Unmap()
	switch {
	case addr.IsLoopback():
		return render.Destination{}, refuse(loopbackHint, "%q is loopback", entry)
	case addr.IsUnspecified():
		return render.Destination{}, refuse("give the address of the host to reach", "%q is the unspecified address", entry)
	case addr.IsMulticast():
		return render.Destination{}, refuse("give a unicast address", "%q is a multicast address", entry)
	}
	return render.Destination{Host: addr.String(), Port: port, Kind: render.DestIP}, nil
}

// normaliseName lowercases a DNS name and drops one trailing dot; a
// non-ASCII name is refused with its punycode form as the fix, so the
// render (and the proxy) compare ASCII only.
func normaliseName(host string) (string, error) {
	for _, r := range host {
		if r >= 0x80 {
			hint := "write the name in its punycode (xn--) form"
			if ascii, err := idna.Lookup.ToASCII(host); err == nil {
				hint = "write " + ascii
			}
			return "", refuse(hint, "%q is not an ASCII name", host)
		}
	}
	return strings.ToLower(strings.TrimSuffix(host, ".")), nil
}

// checkName accepts letters, digits and inner '-' in labels of 1-63
// characters, at most 253 in all. A last label of digits only is refused:
// resolvers read names like 10.1.2 or 127.1 as IPv4 addresses.
func checkName(name string) error {
	if len(name) > 253 {
		return refuse("", "name %.20q... is longer than 253 characters", name)
	}
	labels := strings.Split(name, ".")
	for _, label := range labels {
		switch {
		case label == "":
			return refuse(entryHint, "%q has an empty label", name)
		case len(label) > 63:
			return refuse("", "%q has a label longer than 63 characters", name)
		case strings.Trim(label, "abcdefghijklmnopqrstuvwxyz0123456789-") != "":
			return refuse("use letters, digits and '-' in names", "%q is not a host name", name)
		case label[0] == '-' || label[len(label)-1] == '-':
			return refuse("a label cannot start or end with '-'", "%q is not a host name", name)
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return refuse("write an IPv4 address as four decimal numbers, e.g. 10.1.2.3", "%q is neither a host name nor an IP address", name)
	}
	return nil
}

// urlDestination is the host and port a base URL or an MCP server URL
// connects to. loopback is true for a host inside the container, which the
// engine reaches directly (NO_PROXY) and so needs no allowlist entry.
func urlDestination(raw string) (dest render.Destination, loopback bool, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return dest, false, refuse("give an http:// or https:// URL", "not a URL")
	}
	var port int
	switch strings.ToLower(u.Scheme) {
	case "https":
		port = 443
	case "http":
		port = 80
	default:
		return dest, false, refuse("give an http:// or https:// URL", "%q is not an http or https URL", raw)
	}
	host := u.Hostname()
	if host == "" {
		return dest, false, refuse("give an http:// or https:// URL with a host", "%q has no host", raw)
	}
	if p := u.Port(); p != "" {
		if port, err = parsePort(p); err != nil {
			return dest, false, refuse("give a port from 1 to 65535", "%q: %v", raw, err)
		}
	}
	if addr, err := netip.ParseAddr(host); err == nil && addr.Unmap().IsLoopback() {
		return dest, true, nil
	}
	if name := strings.ToLower(strings.TrimSuffix(host, ".")); name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return dest, true, nil
	}
	dest, err = parseDestination(net.JoinHostPort(host, strconv.Itoa(port)))
	if err == nil && dest.Kind == render.DestWildcard {
		err = refuse("give the URL of one host", "%q names a wildcard host", raw)
	}
	return dest, false, err
}

// validateNetwork parses spec.network.allow, expands model-api, adds the
// HTTP MCP servers and checks the engine's base-URL variables against the
// result, which becomes p.egress.
func (p *Parsed) validateNetwork(diags *diagnostics, def *engineDef) {
	s := &p.Spawn.Spec
	gateways := p.gatewayDestinations()
	if s.Network.Allow == nil && len(gateways) == 0 {
		return
	}
	// A gateway's upstream is allowed automatically; with no network
	// block, it is the only destination.
	allow := gateways
	first := map[string]int{}
	for i, entry := range s.Network.Allow {
		field := fmt.Sprintf("spec.network.allow[%d]", i)
		if entry == modelAPI {
			if def != nil {
				allow = append(allow, p.modelAPIDestinations(diags, def, field)...)
			}
			continue
		}
		d, err := parseDestination(entry)
		var refused *entryError
		if errors.As(err, &refused) {
			p.errf(diags, field, refused.hint, "%s", refused.problem)
			continue
		}
		if j, dup := first[d.Address()]; dup {
			p.errf(diags, field, "remove the duplicate", "%s is already allowed by spec.network.allow[%d]", d.Address(), j)
			continue
		}
		first[d.Address()] = i
		d.Source = render.SourceSpec
		allow = append(allow, d)
	}
	if s.MCPServers != nil {
		for _, name := range sortedKeys(*s.MCPServers) {
			server := (*s.MCPServers)[name]
			if server.URL == "" {
				continue
			}
			d, loopback, err := urlDestination(server.URL)
			var refused *entryError
			switch {
			case errors.As(err, &refused):
				p.errf(diags, "spec.mcpServers."+name+".url", refused.hint, "MCP server %q cannot be allowed: %s", name, refused.problem)
			case !loopback:
				d.Source = render.SourceMCP + name
				allow = append(allow, d)
			}
		}
	}
	egress := render.NewEgress(allow)
	p.checkBaseURLs(diags, def, egress)
	p.egress = egress
}

func (p *Parsed) modelAPIDestinations(diags *diagnostics, def *engineDef, field string) []render.Destination {
	var hosts []string
	if base := p.Spawn.Spec.Engine.BaseURL; base != "" && def.baseURL != nil {
		// The engine is pointed elsewhere: that is its model API.
		d, loopback, err := urlDestination(base)
		if err != nil || loopback {
			return nil // refused at spec.engine.baseURL, or reached directly
		}
		hosts = []string{d.Address()}
	} else if def.modelAPI != nil {
		hosts = def.modelAPI(&p.Spawn.Spec)
	}
	if len(hosts) == 0 {
		hint := "list the hosts the program needs as HOST:PORT"
		if def.modelAPIHint != "" {
			hint = def.modelAPIHint
		}
		p.errf(diags, field, hint, "model-api needs an engine with a known provider (engine %s has none)", def.kind)
		return nil
	}
	out := make([]render.Destination, 0, len(hosts))
	for _, h := range hosts {
		d, err := parseDestination(h)
		if err != nil { // a table entry; TestModelAPIHostsParse keeps them valid
			p.errf(diags, field, "", "internal error: engine %s: model-api host %q: %v", def.kind, h, err)
			continue
		}
		d.Source = render.SourceModelAPI
		out = append(out, d)
	}
	return out
}

// checkBaseURLs refuses an allowlist that does not allow where the engine
// is told to send its model traffic. A value copied from the host or a
// secret cannot be checked here, so those are refused for an allowlist.
func (p *Parsed) checkBaseURLs(diags *diagnostics, def *engineDef, egress *render.Egress) {
	if def == nil {
		return
	}
	s := &p.Spawn.Spec
	if base := s.Engine.BaseURL; base != "" && def.baseURL != nil {
		if d, loopback, err := urlDestination(base); err == nil && !loopback {
			if _, ok := egress.Allowed(d.Host, d.Port); !ok {
				p.errf(diags, "spec.engine.baseURL", fmt.Sprintf("add model-api or %q to spec.network.allow", d.Address()),
					"engine.baseURL sends the engine's model traffic to %s, which the allowlist does not allow", d.Address())
			}
		}
	}
	for _, name := range def.baseURLEnv {
		if i := slices.Index(s.Env.Allow, name); i >= 0 {
			p.errf(diags, fmt.Sprintf("spec.env.allow[%d]", i), "give its value in env.set, so the compiler can check it against spec.network.allow",
				"%s is copied from the host at launch, so it cannot be checked against the allowlist", name)
		}
		if i := slices.Index(s.SecretNames(), name); i >= 0 {
			p.errf(diags, fmt.Sprintf("spec.secrets[%d]", i), "give its value in env.set, so the compiler can check it against spec.network.allow",
				"%s is resolved at launch, so it cannot be checked against the allowlist", name)
		}
		value, set := s.Env.Set[name]
		if !set {
			continue
		}
		field := "spec.env.set." + name
		d, loopback, err := urlDestination(value)
		var refused *entryError
		switch {
		case errors.As(err, &refused):
			p.errf(diags, field, refused.hint, "%s: %s", name, refused.problem)
		case loopback:
		default:
			if _, ok := egress.Allowed(d.Host, d.Port); !ok {
				p.errf(diags, field, fmt.Sprintf("add %q to spec.network.allow", d.Address()),
					"%s sends the engine's model traffic to %s, which the allowlist does not allow", name, d.Address())
			}
		}
	}
}

// proxyEnvNames are the variables hookbox sets for an allowlist network
// (the values below) or owns without setting (ALL_PROXY: every engine here
// reads HTTPS_PROXY first, and no other proxy is reachable).
var proxyEnvNames = []string{"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"}

// noProxy is loopback only: inside the container's namespace it holds the
// proxy itself and whatever the spawn starts there.
const noProxy = "localhost,127.0.0.1,::1"

// egress puts the allowlist into the render, with the proxy environment.
// Every engine hookbox knows honours HTTPS_PROXY, HTTP_PROXY and NO_PROXY
// (upper or lower case, both set alike) with no further variable:
//   - Claude Code 2.1.197 (Bun): its bundle reads
//     https_proxy||HTTPS_PROXY||http_proxy||HTTP_PROXY and no_proxy||NO_PROXY;
//     measured: every connection is a CONNECT to the proxy.
//   - Codex 0.171.0 (Rust, reqwest 0.12.28 system proxy): the binary holds
//     HTTP_PROXY, HTTPS_PROXY, ALL_PROXY in both cases and no_proxy;
//     measured with RUST_LOG=debug: "proxy(http://127.0.0.1:…) intercepts
//     'https://api.openai.com/'".
//   - Gemini CLI 0.61.0 (Node): its config takes proxy from
//     HTTPS_PROXY||https_proxy||HTTP_PROXY||http_proxy and setGlobalProxy
//     installs an undici EnvHttpProxyAgent with NO_PROXY (bundle
//     chunk-JDPZ4CE3.js), so NODE_USE_ENV_PROXY is not needed; measured on
//     Node 20: CONNECT generativelanguage.googleapis.com:443.
//   - pi 0.73.1 (Node): dist/cli.js installs undici's EnvHttpProxyAgent as
//     the global dispatcher before anything else; measured on Node 20:
//     CONNECT to the provider's host.
func (c *compilation) egress() {
	if c.p.egress == nil {
		return
	}
	c.r.Network = render.NetworkAllowlist
	c.r.Egress = c.p.egress
	for _, name := range []string{"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"} {
		c.setEnv(name, render.EnvHookbox, render.ProxyURL)
	}
	c.setEnv("NO_PROXY", render.EnvHookbox, noProxy)
	c.setEnv("no_proxy", render.EnvHookbox, noProxy)
}
