package egress

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Attempt is one request the proxy judged: a CONNECT, one absolute-form
// request of a kept-alive connection, one request to a gateway, or a
// connection refused before it said what it wanted. It is one line of a
// run's network.jsonl. It never holds a header field's value.
type Attempt struct {
	Time     time.Time `json:"time"`     // when the request head started
	Method   string    `json:"method"`   // "CONNECT", "GET", ...; "" if unread
	Host     string    `json:"host"`     // as requested, normalized when it parses
	Port     int       `json:"port"`     // 0 if unread
	Resolved string    `json:"resolved"` // ip:port dialled, "" if none
	// Gateway is the GatewayRoute.Name of a request to a gateway, whose
	// Host and Port are the route's upstream; "" for the proxy's requests.
	Gateway string `json:"gateway,omitempty"`
	// Path is a gateway request's path as the client sent it, never its
	// query (which may have held a key).
	Path string `json:"path,omitempty"`
	// Status is the destination's HTTP status for a forwarded or gateway
	// request; 0 if it sent none.
	Status   int    `json:"status,omitempty"`
	Decision string `json:"decision"` // DecisionAllowed or DecisionRefused
	// Reason is a reason id (Reason*): why it was refused, or, for an
	// allowed attempt, ReasonUpstreamFailed or ReasonUpstreamTLSFailed when
	// the destination failed it; "" for an allowed attempt that completed.
	Reason string `json:"reason"`
	Rule   string `json:"rule"` // the rule that allowed the destination (Rule.String), "" if none
	// Tunnel is what a CONNECT's tunnel carried, known from its first
	// message: TunnelTLS or TunnelHTTP. It is absent for a forwarded
	// request, and for a CONNECT refused before its first message was
	// recognized as either.
	Tunnel string `json:"tunnel,omitempty"`
	// Bytes moved: for a tunnel every byte after the CONNECT head (its
	// first message included); for a forwarded or gateway request the
	// body bytes.
	BytesUp    int64 `json:"bytes_up"`
	BytesDown  int64 `json:"bytes_down"`
	DurationMS int64 `json:"duration_ms"`
}

// Decisions.
const (
	DecisionAllowed = "allowed"
	DecisionRefused = "refused"
)

// Reason ids. Each refusal's HTTP status is given; a refusal after a
// CONNECT's 200 cannot have one (see the package doc).
const (
	ReasonNotAllowed          = "not-allowed"            // 403: no name or wildcard rule for host:port
	ReasonIPLiteralNotAllowed = "ip-literal-not-allowed" // 403: an IP address without an ip rule for it
	ReasonResolvesToPrivate   = "resolves-to-private"    // 403: every address of the name is internal and none is an ip rule
	ReasonResolveFailed       = "resolve-failed"         // 502, or 504 on timeout: the lookup failed or found nothing
	ReasonDialFailed          = "dial-failed"            // 502: no checked address accepted the connection
	ReasonDialTimeout         = "dial-timeout"           // 504: no checked address answered within DialTimeout
	ReasonMalformedRequest    = "malformed-request"      // 400: unparsable request, target or host
	ReasonHeadersTooLarge     = "headers-too-large"      // 431: request head beyond 64 KiB
	ReasonHeaderTimeout       = "header-timeout"         // 408: no complete request head within HeaderTimeout
	ReasonHostHeaderMismatch  = "host-header-mismatch"   // 400: Host field names another destination than the request line
	ReasonOriginFormRequest   = "origin-form-request"    // 400: a request without an absolute URL (not a proxy request)
	ReasonUnsupportedScheme   = "unsupported-scheme"     // 400: absolute URL other than http:// (use CONNECT for TLS)
	ReasonTooManyConnections  = "too-many-connections"   // 503: beyond MaxConns
	ReasonNotTLS              = "not-tls"                // after 200, 403: the tunnel's first bytes are neither a TLS ClientHello nor an HTTP/1.x request
	ReasonNoClientHello       = "no-client-hello"        // after 200: the client closed or stalled before a whole ClientHello (or any byte)
	ReasonNoSNI               = "no-sni"                 // after 200: a ClientHello without server name, for a name
	ReasonSNIMismatch         = "sni-mismatch"           // after 200: server name is not the CONNECT host
	ReasonHostMismatch        = "host-mismatch"          // after 200, 403: a cleartext request's Host or target is not the CONNECT host
	ReasonGatewayPathRefused  = "gateway-path-refused"   // 403: a gateway request's path is outside its route's prefixes, or not plain
	ReasonUpstreamFailed      = "upstream-failed"        // allowed, 502: the destination broke the forwarded request
	ReasonUpstreamTLSFailed   = "upstream-tls-failed"    // allowed, 502: a gateway's upstream failed TLS (its certificate did not verify, or the handshake broke)
)

// failed reports a reason for an allowed attempt the destination failed.
func failed(reason string) bool {
	return reason == ReasonUpstreamFailed || reason == ReasonUpstreamTLSFailed
}

// refusal is a refused attempt's reason, the HTTP status that tells the
// client, and a short explanation for the response body.
type refusal struct {
	status int
	reason string
	detail string
}

func (r *refusal) Error() string { return r.reason + ": " + r.detail }

// Response header fields naming the reason id of a refusal, and of an
// allowed request the destination failed.
const (
	RefusedHeader = "X-Hookbox-Refused"
	ErrorHeader   = "X-Hookbox-Error"
)

// writeRefusal answers with r's status, RefusedHeader (ErrorHeader for a
// failure of the destination) and a one-line body; the connection is
// closed after it.
func writeRefusal(w io.Writer, r *refusal) {
	field := RefusedHeader
	if failed(r.reason) {
		field = ErrorHeader
	}
	body := fmt.Sprintf("hookbox egress proxy: %s: %s\n", r.reason, r.detail)
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\n%s: %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		r.status, http.StatusText(r.status), field, r.reason, len(body), body)
}

// record completes a and hands it to Options.Record and the stats; r nil
// means allowed.
func (p *Proxy) record(a *Attempt, r *refusal) {
	a.Decision = DecisionAllowed
	if r != nil {
		a.Reason = r.reason
		if !failed(r.reason) {
			a.Decision = DecisionRefused
		}
	}
	a.DurationMS = time.Since(a.Time).Milliseconds()
	p.recordMu.Lock()
	defer p.recordMu.Unlock()
	p.stats.add(a)
	if p.opts.Record != nil {
		p.opts.Record(*a)
	}
}

// requestTarget is the host and port a request names, for the record,
// whether or not they are valid.
func requestTarget(req *http.Request) (string, int) {
	authority, defaultPort := req.URL.Host, 80
	if req.Method == http.MethodConnect {
		authority, defaultPort = req.RequestURI, 0
	}
	host, port, err := splitAuthority(authority, defaultPort)
	if err != nil {
		return truncate(authority), 0
	}
	return host, port
}

// splitAuthority reads host[:port] (port required when defaultPort is 0)
// and normalizes the host.
func splitAuthority(authority string, defaultPort int) (string, int, error) {
	host, portText, err := net.SplitHostPort(authority)
	port := defaultPort
	switch {
	case err == nil:
		if port, err = parsePort(portText); err != nil {
			return "", 0, fmt.Errorf("authority %q: %w", truncate(authority), err)
		}
	case defaultPort != 0 && !strings.HasSuffix(authority, ":"):
		host = authority
	default:
		return "", 0, fmt.Errorf("authority %q: want host:port", truncate(authority))
	}
	canonical, _, err := normalizeHost(host)
	if err != nil {
		return "", 0, err
	}
	return canonical, port, nil
}

// truncate bounds a client-supplied string kept in a record.
func truncate(s string) string {
	const limit = 256
	if len(s) > limit {
		return s[:limit] + "..."
	}
	return s
}
