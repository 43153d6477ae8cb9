package render

import (
	"strings"
	"testing"
)

func TestDestinationMatches(t *testing.T) {
	name := Destination{Host: "api.example.com", Port: 443, Kind: DestName}
	wild := Destination{Host: "*.example.com", Port: 443, Kind: DestWildcard}
	ip4 := Destination{Host: "10.1.2.3", Port: 8080, Kind: DestIP}
	ip6 := Destination{Host: "fd00::1", Port: 443, Kind: DestIP}
	for _, tc := range []struct {
		d    Destination
		host string
		port int
		want bool
	}{
		{name, "api.example.com", 443, true},
		{name, "API.Example.com.", 443, true},
		{name, "api.example.com", 80, false},
		{name, "x.api.example.com", 443, false},
		{wild, "a.example.com", 443, true},
		{wild, "a.b.example.com", 443, true},
		{wild, "example.com", 443, false},
		{wild, "badexample.com", 443, false},
		{wild, "a.example.com", 8443, false},
		{ip4, "10.1.2.3", 8080, true},
		{ip4, "::ffff:10.1.2.3", 8080, true},
		{ip4, "10.1.2.3", 443, false},
		{ip6, "[fd00::1]", 443, true},
		{ip6, "fd00:0::1", 443, true},
		{name, "10.1.2.3", 443, false},
		{ip4, "ten.example.com", 8080, false},
	} {
		if got := tc.d.Matches(tc.host, tc.port); got != tc.want {
			t.Errorf("%s matches %s:%d = %v, want %v", tc.d.Address(), tc.host, tc.port, got, tc.want)
		}
	}
}

// TestNewEgressPrecedence: one destination per host:port, the spec's entry
// before model-api before MCP servers (by name), sorted by host, port, source.
func TestNewEgressPrecedence(t *testing.T) {
	e := NewEgress([]Destination{
		{Host: "mcp.example.com", Port: 443, Kind: DestName, Source: SourceMCP + "b"},
		{Host: "mcp.example.com", Port: 443, Kind: DestName, Source: SourceMCP + "a"},
		{Host: "api.anthropic.com", Port: 443, Kind: DestName, Source: SourceModelAPI},
		{Host: "api.anthropic.com", Port: 443, Kind: DestName, Source: SourceSpec},
		{Host: "api.anthropic.com", Port: 8443, Kind: DestName, Source: SourceModelAPI},
		{Host: "fd00::1", Port: 443, Kind: DestIP, Source: SourceSpec},
	})
	var got []string
	for _, d := range e.Allow {
		got = append(got, d.Address()+" "+d.Source)
	}
	want := "api.anthropic.com:443 spec|api.anthropic.com:8443 model-api|[fd00::1]:443 spec|mcp.example.com:443 mcp:a"
	if strings.Join(got, "|") != want {
		t.Errorf("got  %s\nwant %s", strings.Join(got, "|"), want)
	}
	if e.ProxyAddress != ProxyAddress {
		t.Errorf("proxy address %q", e.ProxyAddress)
	}
	if d, ok := e.Allowed("mcp.example.com", 443); !ok || d.Source != "mcp:a" {
		t.Errorf("Allowed = %+v, %v", d, ok)
	}
	if _, ok := (*Egress)(nil).Allowed("x", 1); ok {
		t.Error("a nil egress allows something")
	}
}

func TestTextShowsEgress(t *testing.T) {
	r := sampleRender()
	if text := r.Text(Digests{Plan: "sha256:x"}); !strings.Contains(text, "\n  network  none\n") {
		t.Errorf("none:\n%s", text)
	}
	r.Network = NetworkAllowlist
	r.Egress = NewEgress([]Destination{
		{Host: "api.anthropic.com", Port: 443, Kind: DestName, Source: SourceModelAPI},
		{Host: "fd00::1", Port: 8443, Kind: DestIP, Source: SourceSpec},
	})
	text := r.Text(Digests{Plan: "sha256:x"})
	for _, want := range []string{
		"\n  network  allowlist  through the proxy at 127.0.0.1:3128, to\n",
		"\n    api.anthropic.com:443                    name     model-api\n",
		"\n    [fd00::1]:8443                           ip       spec\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
}
