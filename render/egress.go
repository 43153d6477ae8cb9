package render

import (
	"cmp"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// The render's network.
const (
	// NetworkNone: loopback only, no route anywhere.
	NetworkNone = "none"
	// NetworkAllowlist: no route anywhere either; the only way out is
	// hookbox's proxy, which connects to the render's Egress.Allow only.
	NetworkAllowlist = "allowlist"
)

// ProxyAddress is where hookbox's egress proxy listens inside the
// container's own network namespace. Loopback there holds nothing else, so
// the engine's proxy variables point at it and NO_PROXY lists only loopback.
const ProxyAddress = "127.0.0.1:3128"

// ProxyURL is ProxyAddress as the engines' HTTP(S)_PROXY variables give it.
const ProxyURL = "http://" + ProxyAddress

// Egress is the network a spawn with an allowlist gets: no route anywhere;
// the only way out is hookbox's proxy, listening at ProxyAddress inside the
// container's own network namespace.
type Egress struct {
	ProxyAddress string        `json:"proxy_address"` // always ProxyAddress
	Allow        []Destination `json:"allow"`         // sorted, deduplicated (NewEgress)
}

// Destination kinds.
const (
	// DestName: exactly this DNS name (lowercase ASCII, no trailing dot).
	DestName = "name"
	// DestWildcard: "*.example.com" matches every name below example.com,
	// at any depth (a.example.com, a.b.example.com), never example.com
	// itself.
	DestWildcard = "wildcard"
	// DestIP: exactly this address (IPv4, or IPv6 without brackets); a name
	// that resolves to it does not match.
	DestIP = "ip"
)

// Why a destination is allowed. Sources order the deduplication: when two
// entries allow the same host and port, the one whose source comes first in
// this list is kept (spec, then model-api, then MCP servers by name).
const (
	SourceSpec     = "spec"      // written in spec.network.allow
	SourceModelAPI = "model-api" // the engine's provider, from the shorthand
	SourceMCP      = "mcp:"      // + server name: an HTTP MCP server's URL
	SourceGateway  = "gateway:"  // + kind: a model gateway's upstream
)

// Destination is one host and port the proxy may connect to.
type Destination struct {
	Host   string `json:"host"` // lowercase name, "*.example.com", or an IP literal without brackets
	Port   int    `json:"port"`
	Kind   string `json:"kind"`   // DestName, DestWildcard or DestIP
	Source string `json:"source"` // SourceSpec, SourceModelAPI, SourceMCP+name or SourceGateway+kind: why it is allowed
}

// Address is host:port, with brackets around an IPv6 address.
func (d Destination) Address() string {
	return net.JoinHostPort(d.Host, strconv.Itoa(d.Port))
}

// Matches reports whether a connection to host:port is one d allows. host
// is compared as a DNS name (case and one trailing dot ignored) unless it is
// an IP literal, which only a DestIP entry of the same address matches.
func (d Destination) Matches(host string, port int) bool {
	if port != d.Port {
		return false
	}
	if addr, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")); err == nil {
		want, err := netip.ParseAddr(d.Host)
		return d.Kind == DestIP && err == nil && addr.Unmap() == want.Unmap()
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	switch d.Kind {
	case DestName:
		return name == d.Host
	case DestWildcard:
		suffix := d.Host[1:] // ".example.com"
		return len(name) > len(suffix) && strings.HasSuffix(name, suffix)
	}
	return false
}

// Allowed returns the first destination that allows host:port.
func (e *Egress) Allowed(host string, port int) (Destination, bool) {
	if e == nil {
		return Destination{}, false
	}
	for _, d := range e.Allow {
		if d.Matches(host, port) {
			return d, true
		}
	}
	return Destination{}, false
}

// NewEgress keeps one destination per host and port (the one whose source
// comes first: spec, model-api, then MCP servers by name) and sorts them by
// host, port and source.
func NewEgress(allow []Destination) *Egress {
	byPrecedence := slices.Clone(allow)
	slices.SortStableFunc(byPrecedence, func(a, b Destination) int {
		return cmp.Or(cmp.Compare(sourceRank(a.Source), sourceRank(b.Source)), strings.Compare(a.Source, b.Source))
	})
	seen := map[string]bool{}
	kept := []Destination{}
	for _, d := range byPrecedence {
		if key := d.Address(); !seen[key] {
			seen[key] = true
			kept = append(kept, d)
		}
	}
	e := &Egress{ProxyAddress: ProxyAddress, Allow: kept}
	e.sort()
	return e
}

func sourceRank(source string) int {
	switch {
	case source == SourceSpec:
		return 0
	case source == SourceModelAPI:
		return 1
	case strings.HasPrefix(source, SourceMCP):
		return 2
	case strings.HasPrefix(source, SourceGateway):
		return 3
	}
	return 4
}

func (e *Egress) sort() {
	slices.SortFunc(e.Allow, func(a, b Destination) int {
		return cmp.Or(strings.Compare(a.Host, b.Host), cmp.Compare(a.Port, b.Port), strings.Compare(a.Source, b.Source))
	})
}

// Gateway is hookbox's model gateway for one provider API: a plain-HTTP
// endpoint at Listen inside the container's network namespace that the
// engine's base URL points at. Each request goes out over TLS to Upstream
// with Header set to Prefix + the value of the secret Secret, resolved on
// the host at launch; the engine's own credential headers are dropped. The
// engine's variable Secret holds only Placeholder.
type Gateway struct {
	Kind        string   `json:"kind"`
	Listen      string   `json:"listen"`
	Upstream    string   `json:"upstream"` // https://HOST[:PORT]
	Header      string   `json:"header"`
	Prefix      string   `json:"prefix,omitempty"`
	Paths       []string `json:"paths"` // request path prefixes forwarded; others are refused
	Secret      string   `json:"secret"`
	Placeholder string   `json:"placeholder"`
}
