package egress

import (
	"net/netip"
	"strings"
	"testing"

	"hookbox.dev/hookbox/internal/addrclass"
)

func TestParseRule(t *testing.T) {
	for in, want := range map[string]Rule{
		"API.Anthropic.com:443": {Host: "api.anthropic.com", Port: 443, Kind: KindName},
		"*.example.com:443":     {Host: "*.example.com", Port: 443, Kind: KindWildcard},
		"127.0.0.1:8443":        {Host: "127.0.0.1", Port: 8443, Kind: KindIP},
		"[2001:DB8::1]:443":     {Host: "2001:db8::1", Port: 443, Kind: KindIP},
	} {
		got, err := ParseRule(in)
		if err != nil || got != want {
			t.Errorf("ParseRule(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"example.com", "example.com:0", "example.com:65536", "example.com:+1",
		"*.com:443", "a.*.example.com:443", "[::ffff:127.0.0.1]:443", "[fe80::1%eth0]:443", "127.1:443", "bad_-.com:443", "ex ample.com:80"} {
		if r, err := ParseRule(in); err == nil {
			t.Errorf("ParseRule(%q) = %+v, want an error", in, r)
		}
	}
	if err := (Rule{Host: "Example.com", Port: 443, Kind: KindName}).Validate(); err == nil {
		t.Error("an uppercase name rule validates")
	}
	if err := (Rule{Host: "example.com", Port: 443}).Validate(); err == nil || !strings.Contains(err.Error(), "unknown kind") {
		t.Errorf("a rule without kind: %v", err)
	}
}

func TestPolicyMatch(t *testing.T) {
	p := Policy{Allow: []Rule{
		{Host: "api.example.com", Port: 443, Kind: KindName},
		{Host: "*.cdn.example.com", Port: 443, Kind: KindWildcard},
		{Host: "10.0.0.7", Port: 8080, Kind: KindIP},
	}}
	for _, tc := range []struct {
		name string
		port int
		ok   bool
	}{
		{"api.example.com", 443, true},
		{"api.example.com", 80, false},
		{"x.api.example.com", 443, false},
		{"a.cdn.example.com", 443, true},
		{"a.b.cdn.example.com", 443, true}, // one or more labels
		{"cdn.example.com", 443, false},    // never the suffix itself
		{"evilcdn.example.com", 443, false},
		{"10.0.0.7", 8080, false}, // an ip rule does not match names
	} {
		if _, ok := p.matchName(tc.name, tc.port); ok != tc.ok {
			t.Errorf("matchName(%s, %d) = %v, want %v", tc.name, tc.port, ok, tc.ok)
		}
	}
	if _, ok := p.matchIP(netip.MustParseAddr("10.0.0.7"), 8080); !ok {
		t.Error("ip rule does not match its address")
	}
	if _, ok := p.matchIP(netip.MustParseAddr("10.0.0.7"), 8081); ok {
		t.Error("ip rule matches another port")
	}
}

func TestNormalizeHost(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM.":       "example.com",
		"[::1]":              "::1",
		"::ffff:169.254.1.1": "169.254.1.1",
		"[::ffff:127.0.0.1]": "127.0.0.1",
		"192.0.2.1":          "192.0.2.1",
	} {
		got, _, err := normalizeHost(in)
		if err != nil || got != want {
			t.Errorf("normalizeHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "[example.com]", "[127.0.0.1]", "fe80::1%eth0", "127.1", "2130706433", "0x7f000001", "a..b", "-a.com", "a b", "ex\x00.com", strings.Repeat("a", 64) + ".com"} {
		if got, _, err := normalizeHost(in); err == nil {
			t.Errorf("normalizeHost(%q) = %q, want an error", in, got)
		}
	}
}

func TestInternalAddress(t *testing.T) {
	for _, s := range []string{"0.0.0.0", "0.1.2.3", "10.1.2.3", "100.64.0.1", "100.100.100.200", "127.0.0.1", "127.255.0.1",
		"169.254.169.254", "172.16.0.1", "172.31.255.255", "192.168.1.1", "224.0.0.1", "255.255.255.255", "198.18.0.1",
		"::", "::1", "fe80::1", "fc00::1", "fd12:3456::1", "ff02::1", "::127.0.0.1", "64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1",
		"2002:a00:1::", "2001:db8::1", "fec0::1"} {
		if _, bad := addrclass.Internal(netip.MustParseAddr(s)); !bad {
			t.Errorf("%s is not reported internal", s)
		}
	}
	for _, s := range []string{"8.8.8.8", "1.1.1.1", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "64:ff9b::808:808", "2002:808:808::"} {
		if what, bad := addrclass.Internal(netip.MustParseAddr(s)); bad {
			t.Errorf("%s is reported internal (%s)", s, what)
		}
	}
}

func TestHeadEnd(t *testing.T) {
	for in, want := range map[string]int{
		"GET / HTTP/1.1\r\n\r\n":          18,
		"GET / HTTP/1.1\n\n":              16,
		"GET / HTTP/1.1\r\nA: b\r\n\r\nX": 24,
		"GET / HTTP/1.1\r\nA: b\r\n":      0,
	} {
		if got := headEnd([]byte(in), 0); got != want {
			t.Errorf("headEnd(%q) = %d, want %d", in, got, want)
		}
	}
}
