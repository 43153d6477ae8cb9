package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// GatewayRoute is one model provider a gateway listener serves: the engine
// sends plain HTTP with a placeholder credential, and the gateway sends
// the request on over TLS with the real one (see the package doc).
type GatewayRoute struct {
	// Name is the route's kind in records (Attempt.Gateway), such as
	// "anthropic": letters, digits, '-', '_' or '.'.
	Name string
	// Upstream is the provider's base URL, https:// only. A request for
	// /p goes to Upstream's path followed by /p, so with
	// "https://api.openai.com/v1" the engine's /responses is sent as
	// /v1/responses. Its host and port are judged by the Policy like any
	// destination.
	Upstream *url.URL
	// PathPrefixes are the request paths served, compared with the path as
	// the engine sends it (before Upstream's path is put in front): "/v1/"
	// serves /v1/messages and refuses /admin. At least one.
	PathPrefixes []string
	// Header is the field the credential goes in ("x-api-key",
	// "Authorization", "x-goog-api-key"); Prefix goes before it in the
	// value ("Bearer ").
	Header string
	Prefix string
	// Credential is the real value. The gateway never logs or records it,
	// nor puts it in an error or an answer of its own; String omits it.
	Credential string
}

// String describes the route without its credential.
func (r GatewayRoute) String() string {
	upstream := "no upstream"
	if r.Upstream != nil {
		upstream = shownURL(r.Upstream)
	}
	return fmt.Sprintf("gateway %q to %s (credential in %s)", r.Name, upstream, r.Header)
}

// GoString is String, so that %#v does not print the credential either.
func (r GatewayRoute) GoString() string { return r.String() }

// Validate reports a route ServeGateway would refuse. Its errors never
// hold the credential.
func (r GatewayRoute) Validate() error {
	_, err := compileRoute(r)
	return err
}

// ServeGateway serves a gateway for route on l until Close (then it
// returns ErrClosed) or until l fails, like Serve: the same Policy, limits
// and records, and Close ends both. It closes l. It refuses an invalid
// route, and an Options.GatewayTLS that skips certificate verification.
func (p *Proxy) ServeGateway(l net.Listener, route GatewayRoute) error {
	g, err := compileRoute(route)
	if err == nil && p.opts.GatewayTLS != nil && p.opts.GatewayTLS.InsecureSkipVerify {
		err = fmt.Errorf("egress: gateway %q: Options.GatewayTLS skips certificate verification, and a gateway sends its credential only to a verified upstream", route.Name)
	}
	if err != nil {
		l.Close()
		return err
	}
	g.p = p
	return p.serve(l, g)
}

// gateway is a checked GatewayRoute serving one listener.
type gateway struct {
	p        *Proxy
	name     string
	host     string // canonical
	port     int
	base     string // Upstream's escaped path without a trailing "/"
	prefixes []string
	header   string // canonical
	value    string // Prefix + Credential
	secret   string // Credential, struck from every answer of the gateway's own
}

// compileRoute checks r and builds its gateway (without a proxy).
func compileRoute(r GatewayRoute) (*gateway, error) {
	fail := func(format string, args ...any) (*gateway, error) {
		return nil, fmt.Errorf("egress: gateway %q: "+format, append([]any{truncate(r.Name)}, args...)...)
	}
	if !validRouteName(r.Name) {
		return fail("a route needs a name of up to 64 letters, digits, '-', '_' or '.' (records name the gateway by it)")
	}
	u := r.Upstream
	switch {
	case u == nil:
		return fail("no upstream URL")
	case u.Scheme != "https":
		return fail("upstream %s is not https://: the credential goes only over TLS", shownURL(u))
	case u.User != nil:
		return fail("upstream %s has user information: the credential goes in Header", shownURL(u))
	case u.Opaque != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return fail("upstream %s: want https://host[:port][/path], without a query or fragment", shownURL(u))
	}
	host, _, err := normalizeHost(u.Hostname())
	if err != nil {
		return fail("upstream %s: %w", shownURL(u), err)
	}
	port := 443
	if text := u.Port(); text != "" {
		if port, err = parsePort(text); err != nil {
			return fail("upstream %s: %w", shownURL(u), err)
		}
	}
	base := strings.TrimSuffix(u.EscapedPath(), "/")
	if base != "" {
		if err := plainPath(base); err != nil {
			return fail("upstream %s: %w", shownURL(u), err)
		}
	}
	if len(r.PathPrefixes) == 0 {
		return fail("no PathPrefixes: list the request paths the gateway serves (\"/v1/\")")
	}
	for _, prefix := range r.PathPrefixes {
		if err := plainPath(prefix); err != nil {
			return fail("path prefix: %w", err)
		}
	}
	header := textproto.CanonicalMIMEHeaderKey(r.Header)
	switch {
	case r.Header == "" || strings.IndexFunc(r.Header, func(c rune) bool { return c > 0x7f || !isTokenByte(byte(c)) }) >= 0:
		return fail("header %q is not a header field name", truncate(r.Header))
	case slices.Contains(hopByHop, header) || header == "Host" || header == "Content-Length" || header == "Expect":
		return fail("header %s cannot carry a credential", header)
	case r.Credential == "":
		return fail("no credential")
	case strings.TrimSpace(r.Credential) != r.Credential:
		return fail("the credential begins or ends with white space (read from a file with its newline?); it is not shown")
	case strings.IndexFunc(r.Prefix+r.Credential, func(c rune) bool { return c < ' ' && c != '\t' || c == 0x7f }) >= 0:
		return fail("the prefix or the credential holds a control character or line break; it is not shown")
	}
	return &gateway{
		name:     r.Name,
		host:     host,
		port:     port,
		base:     base,
		prefixes: append([]string(nil), r.PathPrefixes...),
		header:   header,
		value:    r.Prefix + r.Credential,
		secret:   r.Credential,
	}, nil
}

// shownURL is u for errors and descriptions: without user information or
// query, which may hold secrets.
func shownURL(u *url.URL) string {
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}).String()
}

func validRouteName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func (g *gateway) start() *Attempt {
	return &Attempt{Time: time.Now(), Gateway: g.name, Host: g.host, Port: g.port}
}

func (g *gateway) describe(a *Attempt, req *http.Request) {
	a.Method = req.Method
	path, _, _ := strings.Cut(req.RequestURI, "?")
	path, _, _ = strings.Cut(path, "#")
	a.Path = truncate(path)
}

// serveRequest serves one origin-form request: its path checked against
// the route, the upstream judged by the Policy, the engine's credentials
// replaced by the route's, then the exchange over TLS.
func (g *gateway) serveRequest(c net.Conn, _ *bufio.Reader, _ []byte, req *http.Request, a *Attempt) bool {
	p := g.p
	refuse := func(r *refusal) bool {
		c.SetWriteDeadline(time.Now().Add(p.opts.HeaderTimeout))
		writeRefusal(c, g.redact(r))
		p.record(a, r)
		return false
	}
	g.describe(a, req)
	path, query, _ := strings.Cut(req.RequestURI, "?")
	if req.Method == http.MethodConnect || !strings.HasPrefix(path, "/") {
		return refuse(&refusal{http.StatusBadRequest, ReasonMalformedRequest,
			"this is a model-API gateway: send origin-form requests (POST /v1/messages) to it, not proxy requests"})
	}
	if r := g.checkPath(path); r != nil {
		return refuse(r)
	}
	query, err := withoutKeyParam(query)
	if err != nil {
		return refuse(&refusal{http.StatusBadRequest, ReasonMalformedRequest, err.Error()})
	}
	d, r := p.judge(p.ctx, g.host, g.port)
	a.Rule = d.matched()
	if r != nil {
		return refuse(r)
	}

	full := g.base + path
	decoded, err := url.PathUnescape(full)
	if err != nil { // plainPath decoded every segment already
		return refuse(&refusal{http.StatusBadRequest, ReasonMalformedRequest, err.Error()})
	}
	u := &url.URL{Scheme: "https", Host: d.hostPort(), Path: decoded, RawPath: full, RawQuery: query}
	out, body := outgoingRequest(context.WithValue(p.ctx, judgedKey{}, d), req, u, hostField(d, 443), c, p.opts.IdleTimeout)
	g.setCredential(out.Header)
	if req.ProtoAtLeast(1, 1) && strings.EqualFold(req.Header.Get("Expect"), "100-continue") && body != nil {
		// The transport sends the body without waiting for the upstream's
		// 100, so the client may send it now.
		c.SetWriteDeadline(time.Now().Add(p.opts.HeaderTimeout))
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
	}
	return p.exchange(c, p.gateways, req, out, body, a, refuse)
}

// checkPath refuses a path that is not plain (plainPath) or not under one
// of the route's prefixes.
func (g *gateway) checkPath(path string) *refusal {
	if err := plainPath(path); err != nil {
		return &refusal{http.StatusForbidden, ReasonGatewayPathRefused, err.Error()}
	}
	for _, prefix := range g.prefixes {
		if strings.HasPrefix(path, prefix) {
			return nil
		}
	}
	return &refusal{http.StatusForbidden, ReasonGatewayPathRefused,
		fmt.Sprintf("path %q is not under %s", truncate(path), strings.Join(g.prefixes, " or "))}
}

// plainPath accepts an escaped path that every server splits into the
// same segments, so that a prefix of it is a prefix of what the upstream
// serves: it begins with "/", and no segment, decoded, is a dot segment
// ("." or "..", also before a ";" parameter), holds "/" or "\", or a
// control byte.
func plainPath(path string) error {
	if !strings.HasPrefix(path, "/") {
		return fmt.Errorf("path %q does not begin with /", truncate(path))
	}
	for segment := range strings.SplitSeq(path[1:], "/") {
		decoded, err := url.PathUnescape(segment)
		if err != nil {
			return fmt.Errorf("path %q: %w", truncate(path), err)
		}
		name, _, _ := strings.Cut(decoded, ";")
		if name == "." || name == ".." {
			return fmt.Errorf("path %q has a dot segment", truncate(path))
		}
		if strings.IndexFunc(decoded, func(c rune) bool { return c == '/' || c == '\\' || c < ' ' || c == 0x7f }) >= 0 {
			return fmt.Errorf("path %q has an encoded slash, a backslash or a control byte in a segment", truncate(path))
		}
	}
	return nil
}

// withoutKeyParam drops every "key" parameter (the form of a Gemini API
// key in a URL) from a raw query and keeps the others as they were sent.
func withoutKeyParam(raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	var kept []string
	for param := range strings.SplitSeq(raw, "&") {
		name, _, _ := strings.Cut(param, "=")
		decoded, err := url.QueryUnescape(name)
		if err != nil {
			return "", fmt.Errorf("query parameter name %q: %w", truncate(name), err)
		}
		if !strings.EqualFold(decoded, "key") {
			kept = append(kept, param)
		}
	}
	return strings.Join(kept, "&"), nil
}

// credentialFields are the fields engines put API keys in, lowercase.
// Whatever the engine sent in them is a placeholder and never goes on.
var credentialFields = []string{"authorization", "proxy-authorization", "x-api-key", "x-goog-api-key", "api-key"}

// setCredential strikes every credential field the engine sent (matched
// case-insensitively, '_' as '-', since some servers read them alike), and
// Expect (the gateway answered it), then puts in the route's credential.
func (g *gateway) setCredential(h http.Header) {
	own := strings.ToLower(g.header)
	for name := range h {
		field := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
		if field == own || field == "expect" || slices.Contains(credentialFields, field) {
			delete(h, name)
		}
	}
	h[g.header] = []string{g.value}
}

// redact is r with the credential struck from its detail. Nothing the
// gateway writes should hold it; this makes sure an error text cannot.
func (g *gateway) redact(r *refusal) *refusal {
	out := *r
	out.detail = strings.ReplaceAll(out.detail, g.secret, "[credential]")
	return &out
}

// hostField is the Host field for d: its host, with the port unless it is
// defaultPort, an IPv6 address in brackets.
func hostField(d destination, defaultPort int) string {
	if d.port == defaultPort {
		return strings.TrimSuffix(d.hostPort(), ":"+strconv.Itoa(defaultPort))
	}
	return d.hostPort()
}

// newGatewayTransport is the transport of every gateway of a proxy:
// HTTP/1.1 over TLS (dialGatewayTLS) only, no proxy, no decompression.
func (p *Proxy) newGatewayTransport() *http.Transport {
	return &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("egress: a gateway speaks only TLS to its upstream")
		},
		DialTLSContext:         p.dialGatewayTLS,
		DisableCompression:     true,
		MaxIdleConns:           16,
		MaxIdleConnsPerHost:    8,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: maxHeadBytes,
	}
}

// dialGatewayTLS dials a judged destination (dialJudged) and completes a
// TLS handshake with it within DialTimeout, verifying its certificate for
// the upstream's host (an IP address against the certificate's IP SANs).
// Nothing of a request is written before that handshake succeeds.
func (p *Proxy) dialGatewayTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := p.dialJudged(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	d := ctx.Value(judgedKey{}).(destination) // dialJudged checked it is there
	cfg := p.opts.GatewayTLS.Clone()
	if cfg == nil {
		cfg = &tls.Config{}
	}
	cfg.ServerName = d.host
	cfg.NextProtos = []string{"http/1.1"}
	tc := tls.Client(c, cfg)
	hctx, cancel := context.WithTimeout(ctx, p.opts.DialTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		c.Close()
		return nil, &refusal{http.StatusBadGateway, ReasonUpstreamTLSFailed,
			fmt.Sprintf("TLS with %s at %s: %v", d.hostPort(), c.RemoteAddr(), err)}
	}
	return tc, nil
}
