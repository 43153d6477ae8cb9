package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Kind says how a Rule's Host is matched.
type Kind string

const (
	// KindName matches one DNS name exactly.
	KindName Kind = "name"
	// KindWildcard ("*.example.com") matches every name with one or more
	// labels in front of the suffix ("api.example.com",
	// "a.b.example.com"), never the suffix itself. The suffix needs at
	// least two labels, so "*.com" is not a rule.
	KindWildcard Kind = "wildcard"
	// KindIP matches one IP address, and only a request for that literal
	// address or a name that resolves to it. It is also the only way to
	// reach a loopback, private, link-local or other internal address.
	KindIP Kind = "ip"
)

// Rule allows one destination: a host (by Kind) on one TCP port.
type Rule struct {
	Host string `json:"host"` // lowercase, no trailing dot; an IP without brackets
	Port int    `json:"port"`
	Kind Kind   `json:"kind"`
}

// String is host:port, with brackets around an IPv6 address. Attempt.Rule
// holds it.
func (r Rule) String() string { return net.JoinHostPort(r.Host, strconv.Itoa(r.Port)) }

// ParseRule reads "host:port", "*.suffix:port", "192.0.2.1:port" or
// "[2001:db8::1]:port" and infers the Kind. The host is lowercased.
func ParseRule(s string) (Rule, error) {
	host, portText, err := net.SplitHostPort(s)
	if err != nil {
		return Rule{}, fmt.Errorf("egress rule %q: want host:port: %w", s, err)
	}
	port, err := parsePort(portText)
	if err != nil {
		return Rule{}, fmt.Errorf("egress rule %q: %w", s, err)
	}
	r := Rule{Host: strings.ToLower(host), Port: port, Kind: KindName}
	if ip, err := netip.ParseAddr(host); err == nil {
		r = Rule{Host: ip.String(), Port: port, Kind: KindIP}
	} else if strings.HasPrefix(host, "*.") {
		r.Kind = KindWildcard
	}
	if err := r.Validate(); err != nil {
		return Rule{}, err
	}
	return r, nil
}

// Validate reports a rule the proxy could not match as written.
func (r Rule) Validate() error {
	if r.Port < 1 || r.Port > 65535 {
		return fmt.Errorf("egress rule %s: port %d is outside 1-65535", r, r.Port)
	}
	switch r.Kind {
	case KindName:
		if err := checkName(r.Host); err != nil {
			return fmt.Errorf("egress rule %s: %w", r, err)
		}
	case KindWildcard:
		suffix, ok := strings.CutPrefix(r.Host, "*.")
		if !ok {
			return fmt.Errorf("egress rule %s: a wildcard starts with \"*.\"", r)
		}
		if err := checkName(suffix); err != nil {
			return fmt.Errorf("egress rule %s: %w", r, err)
		}
		if !strings.Contains(suffix, ".") {
			return fmt.Errorf("egress rule %s: a wildcard suffix needs two labels or more (\"*.example.com\", not \"*.com\")", r)
		}
	case KindIP:
		ip, err := netip.ParseAddr(r.Host)
		if err != nil {
			return fmt.Errorf("egress rule %s: not an IP address: %w", r, err)
		}
		if ip.Zone() != "" || ip.Is4In6() || ip.String() != r.Host {
			return fmt.Errorf("egress rule %s: write the address as %s (no zone, no IPv4-mapped form)", r, ip.Unmap().WithZone(""))
		}
	default:
		return fmt.Errorf("egress rule %s: unknown kind %q (want %q, %q or %q)", r, r.Kind, KindName, KindWildcard, KindIP)
	}
	return nil
}

// Policy is what one proxy allows. Everything else is refused.
type Policy struct {
	Allow []Rule `json:"allow"`
}

// Validate checks every rule. A proxy whose policy does not validate
// refuses to serve.
func (p Policy) Validate() error {
	var errs []error
	for _, r := range p.Allow {
		if err := r.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// matchName returns the first name or wildcard rule that allows name
// (normalized) on port.
func (p Policy) matchName(name string, port int) (Rule, bool) {
	for _, r := range p.Allow {
		if r.Port != port {
			continue
		}
		switch r.Kind {
		case KindName:
			if name == r.Host {
				return r, true
			}
		case KindWildcard:
			// name is a valid name, so whatever precedes ".suffix" is one
			// or more whole labels.
			if strings.HasSuffix(name, r.Host[1:]) {
				return r, true
			}
		}
	}
	return Rule{}, false
}

// matchIP returns the IP rule for exactly ip (unmapped, no zone) and port.
func (p Policy) matchIP(ip netip.Addr, port int) (Rule, bool) {
	for _, r := range p.Allow {
		if r.Kind == KindIP && r.Port == port && r.Host == ip.String() {
			return r, true
		}
	}
	return Rule{}, false
}

// normalizeHost reads the host of a request (CONNECT authority, absolute
// URL, Host header): an IP literal (brackets allowed, IPv4-mapped IPv6
// unmapped, zones refused) or a DNS name (lowercased, one trailing dot
// dropped). canonical is the form records and comparisons use.
func normalizeHost(host string) (canonical string, ip netip.Addr, err error) {
	bare := host
	if strings.HasPrefix(bare, "[") && strings.HasSuffix(bare, "]") {
		bare = bare[1 : len(bare)-1]
		ip, err := netip.ParseAddr(bare)
		if err != nil || !ip.Is6() {
			return "", netip.Addr{}, fmt.Errorf("host %q: brackets hold no IPv6 address", host)
		}
	}
	if ip, err := netip.ParseAddr(bare); err == nil {
		if ip.Zone() != "" {
			return "", netip.Addr{}, fmt.Errorf("host %q: an address with a zone is not a destination", host)
		}
		ip = ip.Unmap()
		return ip.String(), ip, nil
	}
	name := strings.TrimSuffix(strings.ToLower(bare), ".")
	if err := checkName(name); err != nil {
		return "", netip.Addr{}, fmt.Errorf("host %q: %w", host, err)
	}
	return name, netip.Addr{}, nil
}

// checkName accepts a lowercase DNS name: labels of 1-63 letters, digits,
// '-' or '_', not starting or ending with '-', 253 bytes at most. The last
// label must not be all digits: no top-level domain is, and the C resolver
// would read "127.1" or "2130706433" as an IPv4 address.
func checkName(name string) error {
	if name == "" || len(name) > 253 {
		return fmt.Errorf("%q is not a DNS name (1 to 253 bytes)", name)
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("%q is not a DNS name (label %q)", name, l)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("%q is not a lowercase DNS name (byte %q)", name, c)
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" || strings.HasPrefix(labels[len(labels)-1], "0x") {
		return fmt.Errorf("%q ends in a numeric label: write an IP address in its usual form", name)
	}
	return nil
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("port %q is not a number in 1-65535", s)
	}
	return n, nil
}
