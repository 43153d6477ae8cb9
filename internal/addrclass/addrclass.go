// Package addrclass says which IP addresses are internal (loopback,
// link-local and cloud metadata, private, unique-local, CGNAT, reserved):
// the addresses a proxied name may not resolve to. The egress proxy judges
// with it, and the Kubernetes output mirrors it in its NetworkPolicy, so
// the two agree by construction. Pure: no lookups.
package addrclass

import "net/netip"

// internalRanges are the addresses a name may not resolve to unless that
// exact address and port is an IP rule: everything that reaches the host
// itself, its networks, or a provider's internal services rather than the
// public internet. Order matters only for the label reported.
var internalRanges = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network (0.0.0.0 reaches the host itself)"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT (cloud-internal services)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (cloud metadata)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved or broadcast"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible (deprecated)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64"},
	{netip.MustParsePrefix("100::/64"), "discard-only"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("fc00::/7"), "unique-local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "site-local (deprecated)"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// Prefixes whose addresses carry an IPv4 address that a translator or
// relay would reach: judged by the embedded address.
var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4 = netip.MustParsePrefix("2002::/16")
)

// Internal says whether a resolved address is internal, and which
// range it is in. ip must be unmapped.
func Internal(ip netip.Addr) (what string, internal bool) {
	if ip.Is6() {
		b := ip.As16()
		switch {
		case nat64.Contains(ip):
			if what, bad := Internal(netip.AddrFrom4([4]byte(b[12:16]))); bad {
				return "NAT64 of " + what, true
			}
		case sixTo4.Contains(ip):
			if what, bad := Internal(netip.AddrFrom4([4]byte(b[2:6]))); bad {
				return "6to4 of " + what, true
			}
		}
	}
	for _, r := range internalRanges {
		if r.prefix.Contains(ip) {
			return r.what, true
		}
	}
	return "", false
}

// Prefixes are the ranges a resolved name may not reach unless an
// IP rule names the address, for a platform policy that mirrors the proxy
// (the Kubernetes Job's NetworkPolicy excepts them). NAT64 and 6to4
// addresses are judged by the address they embed, which no prefix says.
func Prefixes() []netip.Prefix {
	out := make([]netip.Prefix, len(internalRanges))
	for i, r := range internalRanges {
		out[i] = r.prefix
	}
	return out
}
