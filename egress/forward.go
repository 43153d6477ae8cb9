package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// forward serves one absolute-form request (GET http://host/path): judge
// it on its own, send it through the shared transport, write the
// response. It reports whether the connection may carry another request.
func (p *Proxy) forward(c net.Conn, req *http.Request, hosts []string, a *Attempt) bool {
	refuse := func(r *refusal) bool {
		c.SetWriteDeadline(time.Now().Add(p.opts.HeaderTimeout))
		writeRefusal(c, r)
		p.record(a, r)
		return false
	}
	a.Host = truncate(req.URL.Host)
	switch {
	case req.URL.Host == "":
		a.Host = ""
		return refuse(&refusal{http.StatusBadRequest, ReasonOriginFormRequest,
			"this is a forward proxy: send an absolute URL (http://host/path), or CONNECT for TLS"})
	case req.URL.Scheme != "http":
		return refuse(&refusal{http.StatusBadRequest, ReasonUnsupportedScheme,
			fmt.Sprintf("scheme %q: only http:// is forwarded; use CONNECT for TLS", truncate(req.URL.Scheme))})
	case req.URL.User != nil:
		return refuse(&refusal{http.StatusBadRequest, ReasonMalformedRequest, "user information in the URL"})
	}
	host, port, err := splitAuthority(req.URL.Host, 80)
	if err != nil {
		return refuse(&refusal{http.StatusBadRequest, ReasonMalformedRequest, err.Error()})
	}
	a.Host, a.Port = host, port
	if r := checkHostHeader(hosts, host, port, 80); r != nil {
		return refuse(r)
	}
	d, r := p.judge(p.ctx, host, port)
	a.Rule = d.matched()
	if r != nil {
		return refuse(r)
	}

	u := &url.URL{Scheme: "http", Host: d.hostPort(), Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
	out, body := outgoingRequest(context.WithValue(p.ctx, judgedKey{}, d), req, u, hostField(d, 80), c, p.opts.IdleTimeout)
	return p.exchange(c, p.transport, req, out, body, a, refuse)
}

// exchange sends out, built from req by outgoingRequest, through t, writes
// the response to c and records a; refuse answers and records a failure
// before the response. It reports whether c may carry another request.
func (p *Proxy) exchange(c net.Conn, t *http.Transport, req, out *http.Request, body *clientBody, a *Attempt, refuse func(*refusal) bool) bool {
	out = out.WithContext(httptrace.WithClientTrace(out.Context(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { a.Resolved = info.Conn.RemoteAddr().String() },
	}))
	resp, err := t.RoundTrip(out)
	if err != nil {
		var r *refusal
		if errors.As(err, &r) {
			return refuse(r)
		}
		return refuse(&refusal{http.StatusBadGateway, ReasonUpstreamFailed, err.Error()})
	}
	defer resp.Body.Close()
	a.Status = resp.StatusCode

	keepAlive := !req.Close && !resp.Close
	down, err := writeResponse(idleWriter{c, p.opts.IdleTimeout}, req, resp, keepAlive)
	a.BytesDown = down
	if body != nil {
		// The transport may still be reading the request body; the next
		// request is read from the same buffer, so wait for it.
		select {
		case <-body.done:
			keepAlive = keepAlive && body.closeErr == nil
		case <-time.After(p.opts.HeaderTimeout):
			keepAlive = false
		}
		a.BytesUp = body.n.Load()
	}
	if err != nil {
		p.record(a, &refusal{0, ReasonUpstreamFailed, err.Error()})
		return false
	}
	p.record(a, nil)
	return keepAlive
}

// judgedKey carries the destination judged for a request to the
// transport's dial.
type judgedKey struct{}

// outgoingRequest is the request sent upstream to u, with Host field
// host: the client's method, end-to-end header fields and body. A gateway
// changes its header fields further (gateway.setCredential).
func outgoingRequest(ctx context.Context, req *http.Request, u *url.URL, host string, c net.Conn, idle time.Duration) (*http.Request, *clientBody) {
	out := (&http.Request{
		Method:        req.Method,
		URL:           u,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        req.Header.Clone(),
		Body:          http.NoBody,
		ContentLength: req.ContentLength,
		Host:          host,
	}).WithContext(ctx)
	stripHopByHop(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = []string{""} // send none rather than Go's
	}
	if req.Body == nil || req.Body == http.NoBody {
		return out, nil
	}
	body := &clientBody{body: req.Body, conn: c, idle: idle, done: make(chan struct{})}
	out.Body = body
	return out, body
}

// hopByHop are the fields that describe one connection, not the message
// (RFC 9110 section 7.6.1); a proxy never forwards them.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func stripHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range hopByHop {
		h.Del(name)
	}
}

// writeResponse writes resp to the client with framing of its own, body
// bytes as they arrive (a stream is not held back), and returns the body
// bytes written.
func writeResponse(w io.Writer, req *http.Request, resp *http.Response, keepAlive bool) (int64, error) {
	stripHopByHop(resp.Header)
	resp.Header.Del("Content-Length")
	bodyless := req.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent ||
		resp.StatusCode == http.StatusNotModified || resp.StatusCode < 200
	chunked := !bodyless && resp.ContentLength < 0 && req.ProtoAtLeast(1, 1)
	if !bodyless && resp.ContentLength < 0 && !chunked {
		keepAlive = false // delimited by closing
	}
	var head bytes.Buffer
	fmt.Fprintf(&head, "HTTP/1.1 %s\r\n", resp.Status)
	resp.Header.Write(&head)
	switch {
	case chunked:
		head.WriteString("Transfer-Encoding: chunked\r\n")
	case resp.ContentLength >= 0 && (!bodyless || req.Method == http.MethodHead):
		fmt.Fprintf(&head, "Content-Length: %d\r\n", resp.ContentLength)
	}
	if !keepAlive {
		head.WriteString("Connection: close\r\n")
	}
	head.WriteString("\r\n")
	if _, err := w.Write(head.Bytes()); err != nil {
		return 0, err
	}
	if bodyless {
		return 0, nil
	}
	if !chunked {
		n, err := io.Copy(w, resp.Body)
		if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
			err = fmt.Errorf("upstream body ended after %d of %d bytes", n, resp.ContentLength)
		}
		return n, err
	}
	bw := bufio.NewWriter(w)
	cw := httputil.NewChunkedWriter(bw)
	buf := make([]byte, 32<<10)
	var total int64
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			total += int64(n)
			if _, werr := cw.Write(buf[:n]); werr != nil {
				return total, werr
			}
			if werr := bw.Flush(); werr != nil {
				return total, werr
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return total, err
		}
	}
	cw.Close()
	if resp.Trailer != nil {
		resp.Trailer.Write(bw)
	}
	bw.WriteString("\r\n")
	return total, bw.Flush()
}

// newTransport is the one transport of a proxy: HTTP/1.1 only, no proxy,
// no decompression, every dial through dialJudged.
func (p *Proxy) newTransport() *http.Transport {
	return &http.Transport{
		DialContext:            p.dialJudged,
		DisableCompression:     true,
		MaxIdleConns:           16,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: maxHeadBytes,
	}
}

// dialJudged dials for the transport, only the destination judged for the
// request the dial is for. The transport pools connections by host:port,
// so a pooled one was dialled the same way for the same name.
func (p *Proxy) dialJudged(ctx context.Context, network, addr string) (net.Conn, error) {
	d, ok := ctx.Value(judgedKey{}).(destination)
	if !ok || addr != d.hostPort() {
		return nil, fmt.Errorf("egress: refusing a dial to %s that no judged request asked for", addr)
	}
	c, _, r := p.dialChecked(ctx, d)
	if r != nil {
		return nil, r
	}
	if !p.trackConn(c) {
		return nil, ErrClosed
	}
	return &upstreamConn{Conn: c, p: p, idle: p.opts.IdleTimeout}, nil
}

// upstreamConn renews its deadlines on every read and write, so a
// forwarded exchange ends once it idles for IdleTimeout.
type upstreamConn struct {
	net.Conn
	p    *Proxy
	idle time.Duration
}

func (u *upstreamConn) Read(b []byte) (int, error) {
	u.Conn.SetReadDeadline(time.Now().Add(u.idle))
	return u.Conn.Read(b)
}

func (u *upstreamConn) Write(b []byte) (int, error) {
	u.Conn.SetWriteDeadline(time.Now().Add(u.idle))
	return u.Conn.Write(b)
}

func (u *upstreamConn) Close() error {
	u.p.closeConn(u.Conn)
	return nil
}

// idleWriter writes to the client with a deadline renewed per write.
type idleWriter struct {
	c    net.Conn
	idle time.Duration
}

func (w idleWriter) Write(b []byte) (int, error) {
	w.c.SetWriteDeadline(time.Now().Add(w.idle))
	return w.c.Write(b)
}

// clientBody is a request body read from the client with a deadline
// renewed per read, counted, and signalled once closed.
type clientBody struct {
	body     io.ReadCloser
	conn     net.Conn
	idle     time.Duration
	n        atomic.Int64
	once     sync.Once
	closeErr error
	done     chan struct{}
}

func (b *clientBody) Read(p []byte) (int, error) {
	b.conn.SetReadDeadline(time.Now().Add(b.idle))
	n, err := b.body.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// Close drains what the transport did not read (so the connection can
// carry the next request) and signals done.
func (b *clientBody) Close() error {
	b.once.Do(func() {
		b.conn.SetReadDeadline(time.Now().Add(b.idle))
		b.closeErr = b.body.Close()
		close(b.done)
	})
	return b.closeErr
}
