package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// connect serves a CONNECT: judge, dial, 200, then the check of the
// tunnel's first message (checkTunnelStart), then the tunnel. It always ends the client connection.
func (p *Proxy) connect(c net.Conn, br *bufio.Reader, req *http.Request, hosts []string, a *Attempt) {
	refuse := func(r *refusal) {
		c.SetWriteDeadline(time.Now().Add(p.opts.HeaderTimeout))
		writeRefusal(c, r)
		p.record(a, r)
	}
	host, port, err := splitAuthority(req.RequestURI, 0)
	if err != nil {
		a.Host = truncate(req.RequestURI)
		refuse(&refusal{http.StatusBadRequest, ReasonMalformedRequest, err.Error()})
		return
	}
	a.Host, a.Port = host, port
	if r := checkHostHeader(hosts, host, port, 443); r != nil {
		refuse(r)
		return
	}
	d, r := p.judge(p.ctx, host, port)
	a.Rule = d.matched()
	if r != nil {
		refuse(r)
		return
	}
	up, addr, r := p.dialChecked(p.ctx, d)
	if r != nil {
		refuse(r)
		return
	}
	if !p.trackConn(up) {
		return
	}
	defer p.closeConn(up)
	a.Resolved = addr.String()

	c.SetWriteDeadline(time.Now().Add(p.opts.HeaderTimeout))
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		p.record(a, &refusal{0, ReasonNoClientHello, "the client went away before the 200"})
		return
	}
	kind, pending, r := checkTunnelStart(c, br, p.opts.HeaderTimeout, d)
	a.Tunnel = kind
	if r != nil {
		c.SetWriteDeadline(time.Now().Add(p.opts.HeaderTimeout))
		switch {
		case kind == TunnelTLS:
			c.Write(accessDeniedAlert)
		case r.status != 0:
			// A client speaking HTTP, or plain bytes, into the tunnel can
			// read this.
			writeRefusal(c, r)
		}
		p.record(a, r)
		return
	}

	// Nothing went upstream yet: replay what the check read, then tunnel.
	up.SetWriteDeadline(time.Now().Add(p.opts.HeaderTimeout))
	if _, err := up.Write(pending); err != nil {
		p.record(a, &refusal{0, ReasonUpstreamFailed, fmt.Sprintf("sending the tunnel's first message upstream: %v", err)})
		return
	}
	up.SetWriteDeadline(time.Time{})
	c.SetDeadline(time.Time{})
	a.BytesUp, a.BytesDown = p.tunnel(c, up)
	a.BytesUp += int64(len(pending))
	p.record(a, nil)
}

// accessDeniedAlert is a TLS record holding one fatal access_denied alert
// (RFC 8446 section 6): what a TLS client shows for an SNI refusal.
var accessDeniedAlert = []byte{21, 3, 3, 0, 2, 2, 49}

// checkHostHeader compares a request's Host field, when it has one, with
// the destination of its request line. Without a port the field means
// defaultPort.
func checkHostHeader(values []string, host string, port, defaultPort int) *refusal {
	if len(values) == 0 {
		return nil
	}
	if len(values) > 1 {
		return &refusal{http.StatusBadRequest, ReasonMalformedRequest, "more than one Host field"}
	}
	h, hp, err := splitAuthority(values[0], defaultPort)
	if err != nil || h != host || hp != port {
		return &refusal{http.StatusBadRequest, ReasonHostHeaderMismatch,
			fmt.Sprintf("Host %q does not name the requested %s", truncate(values[0]), net.JoinHostPort(host, fmt.Sprint(port)))}
	}
	return nil
}

// What a tunnel carries (Attempt.Tunnel), known from its first message.
const (
	TunnelTLS  = "tls"  // a TLS ClientHello
	TunnelHTTP = "http" // a cleartext HTTP/1.x request head
)

// checkTunnelStart reads a tunnel's first message, all of it within
// timeout, and judges it against d, the CONNECT's destination: a TLS
// ClientHello (checkSNI) or, when the first byte can start an HTTP method,
// an HTTP/1.x request head (checkTunnelHost). It returns what the tunnel
// carries ("" while that is unknown) and, when allowed, every byte read
// from the client, which goes upstream first and unchanged.
func checkTunnelStart(c net.Conn, br *bufio.Reader, timeout time.Duration, d destination) (string, []byte, *refusal) {
	c.SetReadDeadline(time.Now().Add(timeout))
	first, err := br.Peek(1)
	if err != nil {
		return "", nil, &refusal{0, ReasonNoClientHello, fmt.Sprintf("no first byte within %v: %v", timeout, err)}
	}
	if isTokenByte(first[0]) {
		return checkHTTPStart(br, timeout, d)
	}
	hello, r := readClientHello(c, br, timeout)
	if r != nil {
		return "", nil, r
	}
	if r := checkSNI(hello.serverName, d); r != nil {
		return TunnelTLS, nil, r
	}
	return TunnelTLS, append(hello.raw, buffered(br)...), nil
}

// buffered is what br holds, left unconsumed.
func buffered(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return b
}

// isTokenByte reports whether b may start an HTTP method, a token (RFC
// 9110 section 5.6.2). No TLS record starts so: its first byte, the
// content type, is 20 to 24.
func isTokenByte(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0
}

// checkHTTPStart judges a tunnel whose first byte can start an HTTP
// request. It consumes nothing: the head is peeked at in br, bounded like a
// proxy request's (maxHeadBytes, headRefusal), and net/http parses a copy,
// so what goes upstream is exactly what the client sent. The request line
// is checked as soon as it is whole, so another protocol whose client
// speaks first (SSH) is refused at once rather than at the timeout.
func checkHTTPStart(br *bufio.Reader, timeout time.Duration, d destination) (string, []byte, *refusal) {
	notHTTP := func(err error) *refusal {
		return &refusal{http.StatusForbidden, ReasonNotTLS,
			fmt.Sprintf("only TLS or HTTP/1.x may pass a CONNECT tunnel, and this is neither: %v", err)}
	}
	line, err := peekThrough(br, lineEnd)
	if err != nil {
		return "", nil, headRefusal(err, timeout)
	}
	if _, err := parseRequestHead(slices.Concat(line, []byte("\r\n"))); err != nil {
		return "", nil, notHTTP(err)
	}
	head, err := readHead(br)
	if err != nil {
		return "", nil, headRefusal(err, timeout)
	}
	hosts, err := hostHeaders(head)
	if err != nil {
		return "", nil, notHTTP(err)
	}
	if len(hosts) > 1 {
		// net/http refuses this too, but it is about the destination.
		return TunnelHTTP, nil, hostMismatch(d, "more than one Host field")
	}
	req, err := parseRequestHead(head)
	if err != nil {
		return "", nil, notHTTP(err)
	}
	if r := checkTunnelHost(req, hosts, d); r != nil {
		return TunnelHTTP, nil, r
	}
	return TunnelHTTP, buffered(br), nil
}

// parseRequestHead parses a request head (through its empty line) with
// net/http and requires HTTP/1.x.
func parseRequestHead(head []byte) (*http.Request, error) {
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		return nil, err
	}
	if req.ProtoMajor != 1 {
		return nil, fmt.Errorf("%s is not HTTP/1.x", truncate(req.Proto))
	}
	return req, nil
}

// checkTunnelHost requires a cleartext request in a tunnel to name the
// CONNECT's destination d, as a ClientHello's server name must. Its Host
// field and an absolute-form target (http:// only) are each compared when
// present; at least one must be, and one Host field at most. The
// comparison is a forwarded request's (splitAuthority): the name
// case-insensitively and without a trailing dot, an address in its
// canonical form, and the port d's, where a missing port means 80, the
// http scheme's default.
func checkTunnelHost(req *http.Request, hosts []string, d destination) *refusal {
	switch {
	case req.URL.Scheme != "" || req.URL.Host != "":
		target := truncate(req.RequestURI)
		if req.URL.Scheme != "http" {
			return hostMismatch(d, fmt.Sprintf("request target %q: a cleartext tunnel carries origin-form or http:// requests", target))
		}
		if host, port, err := splitAuthority(req.URL.Host, 80); err != nil || host != d.host || port != d.port {
			return hostMismatch(d, fmt.Sprintf("request target %q names another destination", target))
		}
	case len(hosts) == 0:
		return hostMismatch(d, "the request has no Host field")
	}
	if r := checkHostHeader(hosts, d.host, d.port, 80); r != nil {
		return hostMismatch(d, r.detail)
	}
	return nil
}

// hostMismatch refuses a cleartext tunnel whose request names another
// destination than d, the CONNECT's.
func hostMismatch(d destination, detail string) *refusal {
	return &refusal{http.StatusForbidden, ReasonHostMismatch, detail + "; the CONNECT was for " + d.hostPort()}
}

// checkSNI requires the ClientHello's server name to be the CONNECT host.
// A TLS client sends no server name for an IP address (RFC 6066 section
// 3), so an ip destination takes none, or its own address.
func checkSNI(serverName string, d destination) *refusal {
	sni := strings.TrimSuffix(strings.ToLower(serverName), ".")
	switch {
	case d.ip && (sni == "" || sni == d.host):
		return nil
	case d.ip:
		return &refusal{0, ReasonSNIMismatch, fmt.Sprintf("server name %q for the address %s", truncate(serverName), d.host)}
	case sni == "":
		return &refusal{0, ReasonNoSNI, fmt.Sprintf("ClientHello without a server name for %s", d.host)}
	case sni != d.host:
		return &refusal{0, ReasonSNIMismatch, fmt.Sprintf("server name %q is not %s", truncate(serverName), d.host)}
	}
	return nil
}

// clientHello is what the tunnel check read: the server name, and every
// byte consumed to get it.
type clientHello struct {
	serverName string
	raw        []byte
}

// errHelloRead stops the standard library's TLS server once it has parsed
// the ClientHello: the proxy only reads it.
var errHelloRead = errors.New("egress: ClientHello read")

// readClientHello parses the client's first TLS message with crypto/tls,
// over a connection that records every byte it reads and discards every
// byte the TLS server would write (its alerts never reach the client).
// The caller has set c's read deadline, timeout from now.
func readClientHello(c net.Conn, br *bufio.Reader, timeout time.Duration) (clientHello, *refusal) {
	rec := &recordingConn{Conn: c, r: br}
	var hello clientHello
	seen := false
	err := tls.Server(rec, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			hello.serverName, seen = h.ServerName, true
			return nil, errHelloRead
		},
	}).Handshake()
	hello.raw = rec.seen.Bytes()
	var headerErr tls.RecordHeaderError
	switch {
	case seen:
		return hello, nil
	case errors.As(err, &headerErr):
		return hello, &refusal{http.StatusForbidden, ReasonNotTLS, "only TLS may pass a CONNECT tunnel, and this is not a TLS ClientHello"}
	case rec.readErr != nil:
		return hello, &refusal{0, ReasonNoClientHello, fmt.Sprintf("no whole ClientHello within %v: %v", timeout, rec.readErr)}
	}
	return hello, &refusal{http.StatusForbidden, ReasonNotTLS, fmt.Sprintf("unreadable ClientHello: %v", err)}
}

// recordingConn feeds the TLS server from the client's buffered reader.
type recordingConn struct {
	net.Conn
	r       io.Reader
	seen    bytes.Buffer
	readErr error
}

func (rc *recordingConn) Read(b []byte) (int, error) {
	n, err := rc.r.Read(b)
	rc.seen.Write(b[:n])
	if err != nil {
		rc.readErr = err
	}
	return n, err
}

func (rc *recordingConn) Write(b []byte) (int, error)      { return len(b), nil }
func (rc *recordingConn) Close() error                     { return nil }
func (rc *recordingConn) SetDeadline(time.Time) error      { return nil }
func (rc *recordingConn) SetReadDeadline(time.Time) error  { return nil }
func (rc *recordingConn) SetWriteDeadline(time.Time) error { return nil }

// tunnelChunk is how much one splice loop moves before the tunnel notes
// activity and renews its read deadline.
const tunnelChunk = 1 << 20

// tunnel copies both ways until both directions end, returning the bytes
// each way. A direction that ends cleanly half-closes its destination and
// leaves the other HeaderTimeout of silence; an error or an idle tunnel
// (no byte either way for between IdleTimeout and twice that) ends both.
func (p *Proxy) tunnel(client, upstream net.Conn) (up, down int64) {
	t := &tunnelState{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		up = p.pipe(t, upstream, client, upstream)
	}()
	down = p.pipe(t, client, upstream, client)
	wg.Wait()
	return up, down
}

type tunnelState struct {
	activity atomic.Int64 // bumped whenever a direction moved bytes
	halfDone atomic.Bool  // one direction has ended cleanly
	once     sync.Once
}

// pipe copies src to dst. other is the connection the opposite direction
// reads from, whose deadline is shortened when this direction ends.
func (p *Proxy) pipe(t *tunnelState, dst, src, other net.Conn) int64 {
	var total, seen int64
	for {
		limit := p.opts.IdleTimeout
		if t.halfDone.Load() {
			limit = p.opts.HeaderTimeout
		}
		src.SetReadDeadline(time.Now().Add(limit))
		// dst and src are *net.TCPConn in production: CopyN ends in
		// TCPConn.ReadFrom over an io.LimitedReader, which splices.
		n, err := io.CopyN(dst, src, tunnelChunk)
		total += n
		if n > 0 {
			t.activity.Add(1)
		}
		switch {
		case err == nil:
			continue
		case isTimeout(err) && t.activity.Load() != seen:
			// Some byte moved since this direction last looked: not idle.
			seen = t.activity.Load()
			continue
		case errors.Is(err, io.EOF):
			if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
				if t.halfDone.Swap(true) {
					return total // both ended
				}
				other.SetReadDeadline(time.Now().Add(p.opts.HeaderTimeout))
				return total
			}
		}
		// Failure, idle, or no half-close: end both directions.
		t.once.Do(func() {
			dst.Close()
			src.Close()
		})
		return total
	}
}
