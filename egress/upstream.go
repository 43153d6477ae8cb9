package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"

	"hookbox.dev/hookbox/internal/addrclass"
)

// destination is a judged request target: the rule that allowed it and
// the addresses it may be dialled at, all checked.
type destination struct {
	host  string // canonical
	port  int
	ip    bool // host is an IP literal
	rule  Rule
	addrs []netip.AddrPort
}

// matched is the rule that matched, "" if none did.
func (d destination) matched() string {
	if d.rule.Kind == "" {
		return ""
	}
	return d.rule.String()
}

func (d destination) hostPort() string { return net.JoinHostPort(d.host, strconv.Itoa(d.port)) }

// judge decides on host (canonical, from splitAuthority) and port. A name
// is judged before any lookup: only an allowed name is resolved, and only
// the addresses that are not internal, or are themselves ip rules, remain.
func (p *Proxy) judge(ctx context.Context, host string, port int) (destination, *refusal) {
	d := destination{host: host, port: port}
	if ip, err := netip.ParseAddr(host); err == nil {
		rule, ok := p.opts.Policy.matchIP(ip, port)
		if !ok {
			return d, &refusal{http.StatusForbidden, ReasonIPLiteralNotAllowed,
				fmt.Sprintf("%s is an IP address and no ip rule allows exactly it", d.hostPort())}
		}
		d.ip, d.rule, d.addrs = true, rule, []netip.AddrPort{netip.AddrPortFrom(ip, uint16(port))}
		return d, nil
	}
	rule, ok := p.opts.Policy.matchName(host, port)
	if !ok {
		return d, &refusal{http.StatusForbidden, ReasonNotAllowed,
			fmt.Sprintf("%s is not on this spawn's allowlist", d.hostPort())}
	}
	d.rule = rule
	lookupCtx, cancel := context.WithTimeout(ctx, p.opts.DialTimeout)
	defer cancel()
	ips, err := p.opts.Resolver.LookupNetIP(lookupCtx, "ip", host)
	if err != nil || len(ips) == 0 {
		status := http.StatusBadGateway
		if lookupCtx.Err() != nil {
			status = http.StatusGatewayTimeout
		}
		return d, &refusal{status, ReasonResolveFailed, fmt.Sprintf("looking up %s: %v", host, errOrNone(err))}
	}
	var internal []string
	for _, ip := range ips {
		ip = ip.Unmap().WithZone("")
		if what, bad := addrclass.Internal(ip); bad {
			if _, exempt := p.opts.Policy.matchIP(ip, port); !exempt {
				internal = append(internal, ip.String()+" ("+what+")")
				continue
			}
		}
		d.addrs = append(d.addrs, netip.AddrPortFrom(ip, uint16(port)))
	}
	if len(d.addrs) == 0 {
		return d, &refusal{http.StatusForbidden, ReasonResolvesToPrivate,
			fmt.Sprintf("%s resolves only to internal addresses %v and no ip rule allows them", host, internal)}
	}
	return d, nil
}

func errOrNone(err error) error {
	if err == nil {
		return errors.New("no addresses")
	}
	return err
}

// dialChecked connects to the first of d's checked addresses that
// answers, within DialTimeout overall. It never resolves anything.
func (p *Proxy) dialChecked(ctx context.Context, d destination) (net.Conn, netip.AddrPort, *refusal) {
	ctx, cancel := context.WithTimeout(ctx, p.opts.DialTimeout)
	defer cancel()
	var errs []error
	for _, ap := range d.addrs {
		c, err := p.opts.Dial(ctx, "tcp", ap.String())
		if err == nil {
			return c, ap, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, netip.AddrPort{}, &refusal{http.StatusGatewayTimeout, ReasonDialTimeout,
			fmt.Sprintf("no address of %s answered within %v", d.hostPort(), p.opts.DialTimeout)}
	}
	return nil, netip.AddrPort{}, &refusal{http.StatusBadGateway, ReasonDialFailed,
		fmt.Sprintf("connecting to %s: %v", d.hostPort(), errors.Join(errs...))}
}
