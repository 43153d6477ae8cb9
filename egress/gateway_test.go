package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sentinel is every test route's credential: it must show nowhere but in
// the credential field the upstream receives.
const sentinel = "sk-SENTINEL-4b1d9e-never-shown"

// placeholder is what the engine sends as its credential.
const placeholder = "placeholder-key"

// seenRequest is what the upstream received of one request.
type seenRequest struct {
	host, target string // Host field, request target
	header       http.Header
	body         string
}

// gatewayUpstream is an HTTPS server on 127.0.0.1 (its certificate names
// 127.0.0.1 and *.example.com) that keeps what it received, raw bytes
// included.
type gatewayUpstream struct {
	s     *httptest.Server
	port  int
	pool  *x509.CertPool // trusts s
	raw   *recordingListener
	conns atomic.Int64 // TLS connections accepted

	mu   sync.Mutex
	seen []seenRequest
}

// startGatewayUpstream serves handle (after keeping the request; nil:
// answer "ok") over TLS.
func startGatewayUpstream(t testing.TB, handle http.HandlerFunc) *gatewayUpstream {
	t.Helper()
	u := &gatewayUpstream{}
	u.s = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if handle == nil {
			body, _ = io.ReadAll(r.Body)
		}
		u.mu.Lock()
		u.seen = append(u.seen, seenRequest{host: r.Host, target: r.RequestURI, header: r.Header.Clone(), body: string(body)})
		u.mu.Unlock()
		if handle != nil {
			handle(w, r)
			return
		}
		io.WriteString(w, `{"ok":true}`)
	}))
	u.s.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			u.conns.Add(1)
		}
	}
	u.s.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes tests make fail
	u.raw = &recordingListener{Listener: u.s.Listener}
	u.s.Listener = u.raw
	u.s.StartTLS()
	t.Cleanup(u.s.Close)
	u.port = u.s.Listener.Addr().(*net.TCPAddr).Port
	u.pool = x509.NewCertPool()
	u.pool.AddCert(u.s.Certificate())
	return u
}

func (u *gatewayUpstream) requests() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.seen...)
}

// ipRule allows the upstream by its address.
func (u *gatewayUpstream) ipRule() Rule { return Rule{Host: "127.0.0.1", Port: u.port, Kind: KindIP} }

// recordingListener keeps every byte its connections read.
type recordingListener struct {
	net.Listener
	mu  sync.Mutex
	got []byte
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &keepingConn{Conn: c, l: l}, nil
}

func (l *recordingListener) received() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.got...)
}

type keepingConn struct {
	net.Conn
	l *recordingListener
}

func (c *keepingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.l.mu.Lock()
	c.l.got = append(c.l.got, b[:n]...)
	c.l.mu.Unlock()
	return n, err
}

// anthropicRoute is a route like Anthropic's to u by its address.
func anthropicRoute(u *gatewayUpstream) GatewayRoute {
	return GatewayRoute{Name: "anthropic", Upstream: mustURL("https://" + hostPort("127.0.0.1", u.port)),
		PathPrefixes: []string{"/v1/"}, Header: "x-api-key", Credential: sentinel}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// startGateway serves route on a loopback port, trusting u's certificate
// unless opts says otherwise. When the test ends it closes the proxy and
// checks that no record holds the sentinel.
func startGateway(t testing.TB, opts Options, route GatewayRoute, u *gatewayUpstream) (*Proxy, string, *recorder) {
	t.Helper()
	rec := newRecorder()
	if opts.Record == nil {
		opts.Record = rec.record
	}
	if opts.GatewayTLS == nil && u != nil {
		opts.GatewayTLS = &tls.Config{RootCAs: u.pool}
	}
	p := New(opts)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- p.ServeGateway(l, route) }()
	t.Cleanup(func() {
		p.Close()
		if err := <-served; !errors.Is(err, ErrClosed) {
			t.Errorf("ServeGateway returned %v, want ErrClosed", err)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, a := range rec.attempts {
			line, _ := json.Marshal(a)
			if strings.Contains(string(line), sentinel) {
				t.Errorf("a record holds the credential: %s", line)
			}
		}
		if st, _ := json.Marshal(p.Stats()); strings.Contains(string(st), sentinel) {
			t.Errorf("the stats hold the credential: %s", st)
		}
	})
	return p, l.Addr().String(), rec
}

// roundTrip writes a raw request on c and reads the answer and its body.
func roundTrip(t testing.TB, c net.Conn, br *bufio.Reader, request string) (*http.Response, string) {
	t.Helper()
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", request, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body of the answer to %q: %v", request, err)
	}
	return resp, string(body)
}

// wantNoSecret fails when s, an answer or error text, holds the credential.
func wantNoSecret(t testing.TB, what, s string) {
	t.Helper()
	if strings.Contains(s, sentinel) {
		t.Errorf("%s holds the credential: %q", what, s)
	}
}

// engineHeaders are the credential fields an engine may send, every one a
// placeholder, and fields that must or must not go on.
const engineHeaders = "x-api-key: " + placeholder + "\r\n" +
	"Authorization: Bearer " + placeholder + "\r\n" +
	"X-Goog-Api-Key: " + placeholder + "\r\n" +
	"Api-Key: " + placeholder + "\r\n" +
	"x_api_key: " + placeholder + "\r\n" +
	"Proxy-Authorization: Basic " + placeholder + "\r\n" +
	"Connection: X-Per-Hop\r\nX-Per-Hop: 1\r\n" +
	"Anthropic-Version: 2023-06-01\r\n"

func TestGatewayReplacesCredentials(t *testing.T) {
	u := startGatewayUpstream(t, nil)
	name := hostPort("api.example.com", u.port)
	address := hostPort("127.0.0.1", u.port)
	for _, tc := range []struct {
		route              GatewayRoute
		request, forwarded string // request target, and what the upstream gets
		host               string // Host field the upstream gets
		rule               string
		field, value       string
	}{
		{GatewayRoute{Name: "anthropic", Upstream: mustURL("https://" + address), PathPrefixes: []string{"/v1/"},
			Header: "x-api-key", Credential: sentinel},
			"/v1/messages?beta=true&key=" + placeholder, "/v1/messages?beta=true", address, address, "X-Api-Key", sentinel},
		{GatewayRoute{Name: "openai", Upstream: mustURL("https://" + address + "/v1/"), PathPrefixes: []string{"/"},
			Header: "Authorization", Prefix: "Bearer ", Credential: sentinel},
			"/responses", "/v1/responses", address, address, "Authorization", "Bearer " + sentinel},
		{GatewayRoute{Name: "gemini", Upstream: mustURL("https://" + name), PathPrefixes: []string{"/v1beta/", "/v1/"},
			Header: "x-goog-api-key", Credential: sentinel},
			"/v1beta/models/gemini-2.5-pro:streamGenerateContent?key=" + placeholder + "&alt=sse&KEY=x",
			"/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", name, name, "X-Goog-Api-Key", sentinel},
	} {
		t.Run(tc.route.Name, func(t *testing.T) {
			before := len(u.requests())
			_, addr, rec := startGateway(t, Options{
				Policy:   Policy{Allow: []Rule{u.ipRule(), {Host: "api.example.com", Port: u.port, Kind: KindName}}},
				Resolver: resolver("api.example.com", "127.0.0.1"),
			}, tc.route, u)
			c, br := dialProxy(t, addr)
			const body = `{"model":"m"}`
			for i := range 2 { // one kept-alive connection
				resp, got := roundTrip(t, c, br, fmt.Sprintf("POST %s HTTP/1.1\r\nHost: 127.0.0.1:3129\r\n%sContent-Length: %d\r\n\r\n%s",
					tc.request, engineHeaders, len(body), body))
				if resp.StatusCode != 200 || got != `{"ok":true}` {
					t.Fatalf("request %d: %s %q", i, resp.Status, got)
				}
			}
			seen := u.requests()[before:]
			if len(seen) != 2 {
				t.Fatalf("the upstream got %d requests, want 2", len(seen))
			}
			for _, s := range seen {
				if s.target != tc.forwarded || s.host != tc.host || s.body != body {
					t.Errorf("the upstream got %s with Host %s and body %q, want %s, %s and %q", s.target, s.host, s.body, tc.forwarded, tc.host, body)
				}
				for field, values := range s.header {
					lower := strings.ToLower(strings.ReplaceAll(field, "_", "-"))
					switch {
					case field == tc.field:
						if len(values) != 1 || values[0] != tc.value {
							t.Errorf("%s: got %d values, want exactly the route's credential", field, len(values))
						}
					case strings.Contains(strings.Join(values, ","), placeholder) || strings.Contains(strings.Join(values, ","), sentinel):
						t.Errorf("the upstream got a credential in %s", field)
					case lower == "x-per-hop" || lower == "connection":
						t.Errorf("a hop-by-hop field went on: %s", field)
					}
				}
				if _, ok := s.header[tc.field]; !ok {
					t.Errorf("no %s field upstream", tc.field)
				}
				if s.header.Get("Anthropic-Version") != "2023-06-01" {
					t.Errorf("an end-to-end field was dropped: %v", s.header)
				}
			}
			wantPath, _, _ := strings.Cut(tc.request, "?")
			for _, a := range rec.wait(t, 2) {
				sameAttempt(t, a, Attempt{Method: "POST", Host: strings.Split(tc.rule, ":")[0], Port: u.port, Resolved: address,
					Gateway: tc.route.Name, Path: wantPath, Status: 200, Decision: DecisionAllowed, Rule: tc.rule,
					BytesUp: int64(len(body)), BytesDown: int64(len(`{"ok":true}`))})
			}
		})
	}
	if n := u.conns.Load(); n != 3 {
		t.Errorf("the upstream accepted %d connections for 3 routes of 2 requests each, want 3 (kept alive)", n)
	}
}

// Paths outside the route, or that a server could read as another path,
// and requests that are not origin-form, are refused before any lookup or
// dial.
func TestGatewayRefusesPaths(t *testing.T) {
	u := startGatewayUpstream(t, nil)
	for _, tc := range []struct {
		name, requestLine, path string
		status                  int
		reason                  string
	}{
		{"other version", "POST /v2/messages?key=x HTTP/1.1", "/v2/messages", 403, ReasonGatewayPathRefused},
		{"root", "GET / HTTP/1.1", "/", 403, ReasonGatewayPathRefused},
		{"prefix without its slash", "GET /v1 HTTP/1.1", "/v1", 403, ReasonGatewayPathRefused},
		{"dot-dot", "GET /v1/../admin HTTP/1.1", "/v1/../admin", 403, ReasonGatewayPathRefused},
		{"dot", "GET /v1/./messages HTTP/1.1", "/v1/./messages", 403, ReasonGatewayPathRefused},
		{"encoded dot-dot", "GET /v1/%2e%2E/admin HTTP/1.1", "/v1/%2e%2E/admin", 403, ReasonGatewayPathRefused},
		{"encoded slash", "GET /v1/..%2fadmin HTTP/1.1", "/v1/..%2fadmin", 403, ReasonGatewayPathRefused},
		{"dot-dot parameter", "GET /v1/..;/admin HTTP/1.1", "/v1/..;/admin", 403, ReasonGatewayPathRefused},
		{"encoded backslash", "GET /v1/a%5c..%5cadmin HTTP/1.1", "/v1/a%5c..%5cadmin", 403, ReasonGatewayPathRefused},
		{"absolute-form", "GET http://127.0.0.1/v1/messages HTTP/1.1", "http://127.0.0.1/v1/messages", 400, ReasonMalformedRequest},
		{"CONNECT", "CONNECT api.anthropic.com:443 HTTP/1.1", "api.anthropic.com:443", 400, ReasonMalformedRequest},
		{"asterisk", "OPTIONS * HTTP/1.1", "*", 400, ReasonMalformedRequest},
		{"bad query", "GET /v1/messages?%zz=1 HTTP/1.1", "/v1/messages", 400, ReasonMalformedRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := resolver()
			_, addr, rec := startGateway(t, Options{
				Policy:   Policy{Allow: []Rule{u.ipRule()}},
				Resolver: res,
				Dial: func(context.Context, string, string) (net.Conn, error) {
					t.Error("dialled for a refused request")
					return nil, errors.New("no")
				},
			}, anthropicRoute(u), u)
			c, br := dialProxy(t, addr)
			resp, body := roundTrip(t, c, br, tc.requestLine+"\r\nHost: 127.0.0.1:3129\r\n"+engineHeaders+"\r\n")
			if resp.StatusCode != tc.status || resp.Header.Get(RefusedHeader) != tc.reason {
				t.Errorf("got %s with %s=%q (%q), want %d and %q", resp.Status, RefusedHeader, resp.Header.Get(RefusedHeader), body, tc.status, tc.reason)
			}
			wantNoSecret(t, "the refusal", body)
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("connection not closed after the refusal: %v", err)
			}
			method, _, _ := strings.Cut(tc.requestLine, " ")
			sameAttempt(t, rec.wait(t, 1)[0], Attempt{Method: method, Host: "127.0.0.1", Port: u.port, Gateway: "anthropic",
				Path: tc.path, Decision: DecisionRefused, Reason: tc.reason})
		})
	}
	if n := len(u.requests()); n != 0 || u.conns.Load() != 0 {
		t.Errorf("the upstream got %d requests on %d connections", n, u.conns.Load())
	}
}

// The gateway's upstream is a destination like any other: without a rule
// for it, nothing is dialled.
func TestGatewayUpstreamNeedsPolicy(t *testing.T) {
	u := startGatewayUpstream(t, nil)
	for _, tc := range []struct {
		name     string
		upstream string
		rules    []Rule
		reason   string
		lookups  int64
	}{
		{"address without ip rule", "https://" + hostPort("127.0.0.1", u.port), []Rule{{Host: "127.0.0.2", Port: u.port, Kind: KindIP}}, ReasonIPLiteralNotAllowed, 0},
		{"address on another port", "https://" + hostPort("127.0.0.1", u.port), []Rule{{Host: "127.0.0.1", Port: 443, Kind: KindIP}}, ReasonIPLiteralNotAllowed, 0},
		{"name not listed", "https://" + hostPort("api.example.com", u.port), []Rule{u.ipRule()}, ReasonNotAllowed, 0},
		{"name resolving to loopback", "https://" + hostPort("api.example.com", u.port), []Rule{{Host: "api.example.com", Port: u.port, Kind: KindName}}, ReasonResolvesToPrivate, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := resolver("api.example.com", "127.0.0.1")
			route := anthropicRoute(u)
			route.Upstream = mustURL(tc.upstream)
			_, addr, rec := startGateway(t, Options{
				Policy:   Policy{Allow: tc.rules},
				Resolver: res,
				Dial: func(context.Context, string, string) (net.Conn, error) {
					t.Error("dialled a destination the policy does not allow")
					return nil, errors.New("no")
				},
			}, route, u)
			c, br := dialProxy(t, addr)
			resp, body := roundTrip(t, c, br, "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1:3129\r\nContent-Length: 2\r\n\r\n{}")
			if resp.StatusCode != 403 || resp.Header.Get(RefusedHeader) != tc.reason {
				t.Errorf("got %s with %s=%q (%q), want 403 and %q", resp.Status, RefusedHeader, resp.Header.Get(RefusedHeader), body, tc.reason)
			}
			wantNoSecret(t, "the refusal", body)
			if n := res.calls.Load(); n != tc.lookups {
				t.Errorf("%d lookups, want %d", n, tc.lookups)
			}
			a := rec.wait(t, 1)[0]
			if a.Gateway != "anthropic" || a.Decision != DecisionRefused || a.Reason != tc.reason || a.Resolved != "" || a.Port != u.port {
				t.Errorf("attempt %+v", a)
			}
		})
	}
	if n := len(u.requests()); n != 0 || u.conns.Load() != 0 {
		t.Errorf("the upstream got %d requests on %d connections", n, u.conns.Load())
	}
}

// A request body reaches the upstream as the engine sends it, and events
// reach the engine as the upstream writes them: each side proceeds only
// once the other has seen the previous piece.
func TestGatewayStreams(t *testing.T) {
	gotPart1, gotEvent1 := make(chan struct{}), make(chan struct{})
	upstreamErr := make(chan error, 1)
	u := startGatewayUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		upstreamErr <- func() error {
			part := make([]byte, len("part1"))
			if _, err := io.ReadFull(r.Body, part); err != nil || string(part) != "part1" {
				return fmt.Errorf("first piece of the body: %q, %v", part, err)
			}
			close(gotPart1)
			rest, err := io.ReadAll(r.Body)
			if err != nil || string(rest) != "part2" {
				return fmt.Errorf("rest of the body: %q, %v", rest, err)
			}
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: one\ndata: {}\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-gotEvent1:
			case <-time.After(5 * time.Second):
				return errors.New("the engine never saw the first event")
			}
			io.WriteString(w, "event: two\ndata: {}\n\n")
			return nil
		}()
	})
	_, addr, rec := startGateway(t, Options{Policy: Policy{Allow: []Rule{u.ipRule()}}}, anthropicRoute(u), u)
	c, br := dialProxy(t, addr)
	io.WriteString(c, "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1:3129\r\nTransfer-Encoding: chunked\r\n\r\n5\r\npart1\r\n")
	select {
	case <-gotPart1:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream never got the first piece of the body")
	}
	io.WriteString(c, "5\r\npart2\r\n0\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	events := bufio.NewReader(resp.Body)
	readEvent := func() string {
		var event strings.Builder
		for {
			line, err := events.ReadString('\n')
			if err != nil {
				t.Fatalf("reading an event: %q, %v", event.String(), err)
			}
			event.WriteString(line)
			if line == "\n" {
				return event.String()
			}
		}
	}
	if e := readEvent(); e != "event: one\ndata: {}\n\n" {
		t.Fatalf("first event %q", e)
	}
	close(gotEvent1)
	if e := readEvent(); e != "event: two\ndata: {}\n\n" {
		t.Fatalf("second event %q", e)
	}
	if rest, err := io.ReadAll(events); err != nil || len(rest) != 0 {
		t.Errorf("after the events: %q, %v", rest, err)
	}
	if err := <-upstreamErr; err != nil {
		t.Fatal(err)
	}
	a := rec.wait(t, 1)[0]
	sameAttempt(t, a, Attempt{Method: "POST", Host: "127.0.0.1", Port: u.port, Resolved: hostPort("127.0.0.1", u.port),
		Gateway: "anthropic", Path: "/v1/messages", Status: 200, Decision: DecisionAllowed, Rule: hostPort("127.0.0.1", u.port),
		BytesUp: 10, BytesDown: int64(len("event: one\ndata: {}\n\nevent: two\ndata: {}\n\n"))})
}

// An upstream whose certificate does not verify gets nothing of the
// request: the handshake fails before any of it is written.
func TestGatewayUpstreamCertificateNotVerified(t *testing.T) {
	u := startGatewayUpstream(t, nil)
	for _, tc := range []struct {
		name     string
		upstream string
		roots    *x509.CertPool
	}{
		{"unknown authority", "https://" + hostPort("127.0.0.1", u.port), x509.NewCertPool()}, // every httptest server has the same certificate
		{"another name", "https://" + hostPort("api.example.net", u.port), u.pool},            // the certificate names example.com
	} {
		t.Run(tc.name, func(t *testing.T) {
			route := anthropicRoute(u)
			route.Upstream = mustURL(tc.upstream)
			_, addr, rec := startGateway(t, Options{
				Policy:     Policy{Allow: []Rule{u.ipRule(), {Host: "api.example.net", Port: u.port, Kind: KindName}}},
				Resolver:   resolver("api.example.net", "127.0.0.1"),
				GatewayTLS: &tls.Config{RootCAs: tc.roots},
			}, route, u)
			c, br := dialProxy(t, addr)
			const marker = "request-body-marker"
			resp, body := roundTrip(t, c, br, fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1:3129\r\n%sContent-Length: %d\r\n\r\n%s",
				engineHeaders, len(marker), marker))
			if resp.StatusCode != 502 || resp.Header.Get(ErrorHeader) != ReasonUpstreamTLSFailed {
				t.Errorf("got %s with %s=%q (%q), want 502 and %s", resp.Status, ErrorHeader, resp.Header.Get(ErrorHeader), body, ReasonUpstreamTLSFailed)
			}
			wantNoSecret(t, "the answer", body)
			a := rec.wait(t, 1)[0]
			if a.Decision != DecisionAllowed || a.Reason != ReasonUpstreamTLSFailed || a.Status != 0 || a.Gateway != "anthropic" || a.BytesDown != 0 {
				t.Errorf("attempt %+v", a)
			}
		})
	}
	raw := string(u.raw.received())
	for _, clear := range []string{"POST", "/v1/messages", "request-body-marker", placeholder, sentinel} {
		if strings.Contains(raw, clear) {
			t.Errorf("the upstream received %q in clear", clear)
		}
	}
	if len(raw) == 0 || len(u.requests()) != 0 {
		t.Errorf("the upstream received %d bytes and %d requests, want a ClientHello and none", len(raw), len(u.requests()))
	}
}

// An upstream that breaks the response: a failure of the destination,
// recorded as one.
func TestGatewayUpstreamFails(t *testing.T) {
	u := startGatewayUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close()
		}
	})
	p, addr, rec := startGateway(t, Options{Policy: Policy{Allow: []Rule{u.ipRule()}}}, anthropicRoute(u), u)
	c, br := dialProxy(t, addr)
	resp, body := roundTrip(t, c, br, "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:3129\r\n\r\n")
	if resp.StatusCode != 502 || resp.Header.Get(ErrorHeader) != ReasonUpstreamFailed {
		t.Errorf("got %s with %s=%q (%q)", resp.Status, ErrorHeader, resp.Header.Get(ErrorHeader), body)
	}
	wantNoSecret(t, "the answer", body)
	a := rec.wait(t, 1)[0]
	if a.Decision != DecisionAllowed || a.Reason != ReasonUpstreamFailed || a.Path != "/v1/models" {
		t.Errorf("attempt %+v", a)
	}
	if st := p.Stats(); len(st.Used) != 1 || st.Used[0].Failed != 1 || st.Used[0].Gateway != "anthropic" {
		t.Errorf("stats %+v", st)
	}
}

// A gateway shares the proxy's limits, records and Close.
func TestGatewayLimitsAndClose(t *testing.T) {
	u := startGatewayUpstream(t, nil)
	p, addr, rec := startGateway(t, Options{
		Policy:        Policy{Allow: []Rule{u.ipRule()}},
		MaxConns:      2,
		HeaderTimeout: 200 * time.Millisecond,
	}, anthropicRoute(u), u)
	// The proxy's own listener on the same Proxy.
	proxyListener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxyServed := make(chan error, 1)
	go func() { proxyServed <- p.Serve(proxyListener) }()

	kept, keptBR := dialProxy(t, addr)
	if resp, _ := roundTrip(t, kept, keptBR, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("first request: %s", resp.Status)
	}
	stalled, stalledBR := dialProxy(t, addr)
	io.WriteString(stalled, "POST /v1/messages HTTP/1.1\r\n") // and no end of head
	busy, busyBR := dialProxy(t, addr)
	resp, body := roundTrip(t, busy, busyBR, "GET /v1/models?key=x HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 503 || resp.Header.Get(RefusedHeader) != ReasonTooManyConnections {
		t.Errorf("third connection: %s %q", resp.Status, body)
	}
	resp, err = http.ReadResponse(stalledBR, nil)
	if err != nil || resp.StatusCode != 408 || resp.Header.Get(RefusedHeader) != ReasonHeaderTimeout {
		t.Errorf("stalled head: %v %v", resp, err)
	}
	byReason := map[string]Attempt{}
	for _, a := range rec.wait(t, 3) {
		byReason[a.Reason] = a
	}
	sameAttempt(t, byReason[ReasonTooManyConnections], Attempt{Method: "GET", Host: "127.0.0.1", Port: u.port, Gateway: "anthropic",
		Path: "/v1/models", Decision: DecisionRefused, Reason: ReasonTooManyConnections})
	sameAttempt(t, byReason[ReasonHeaderTimeout], Attempt{Host: "127.0.0.1", Port: u.port, Gateway: "anthropic",
		Decision: DecisionRefused, Reason: ReasonHeaderTimeout})

	p.Close()
	if _, err := keptBR.ReadByte(); err == nil {
		t.Error("kept-alive connection open after Close")
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Error("the gateway accepts after Close")
	}
	if err := <-proxyServed; !errors.Is(err, ErrClosed) {
		t.Errorf("Serve returned %v", err)
	}
	st := p.Stats()
	if st.Allowed != 1 || st.Refused != 2 || len(st.Used) != 1 || st.Used[0].Gateway != "anthropic" || st.Used[0].BytesDown == 0 ||
		len(st.Refusals) != 2 || st.Refusals[0].Gateway != "anthropic" {
		t.Errorf("stats %+v", st)
	}
}

// A client that sends Expect: 100-continue gets the 100 at once, and the
// upstream gets the body without the field.
func TestGatewayExpectContinue(t *testing.T) {
	u := startGatewayUpstream(t, nil)
	_, addr, rec := startGateway(t, Options{Policy: Policy{Allow: []Rule{u.ipRule()}}}, anthropicRoute(u), u)
	c, br := dialProxy(t, addr)
	io.WriteString(c, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 100 {
		t.Fatalf("want 100 Continue: %v %v", resp, err)
	}
	resp, body := roundTrip(t, c, br, "{}")
	if resp.StatusCode != 200 || body != `{"ok":true}` {
		t.Fatalf("%s %q", resp.Status, body)
	}
	if s := u.requests()[0]; s.body != "{}" || s.header.Get("Expect") != "" {
		t.Errorf("upstream got %q with Expect %q", s.body, s.header.Get("Expect"))
	}
	if a := rec.wait(t, 1)[0]; a.BytesUp != 2 || a.Status != 200 {
		t.Errorf("attempt %+v", a)
	}
}

func TestGatewayRouteValidation(t *testing.T) {
	valid := GatewayRoute{Name: "openai", Upstream: mustURL("https://api.openai.com/v1"), PathPrefixes: []string{"/"},
		Header: "Authorization", Prefix: "Bearer ", Credential: sentinel}
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid route: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*GatewayRoute)
		want   string
	}{
		{"http upstream", func(r *GatewayRoute) { r.Upstream = mustURL("http://api.openai.com/v1") }, "not https://"},
		{"no upstream", func(r *GatewayRoute) { r.Upstream = nil }, "no upstream"},
		{"user info", func(r *GatewayRoute) { r.Upstream = mustURL("https://u:" + sentinel + "@api.openai.com/") }, "user information"},
		{"query", func(r *GatewayRoute) { r.Upstream = mustURL("https://api.openai.com/?key=" + sentinel) }, "without a query"},
		{"bad host", func(r *GatewayRoute) { r.Upstream = mustURL("https://127.1/") }, "numeric label"},
		{"bad port", func(r *GatewayRoute) { r.Upstream = mustURL("https://api.openai.com:0/") }, "port"},
		{"dot segment in upstream", func(r *GatewayRoute) { r.Upstream = mustURL("https://api.openai.com/v1/../admin") }, "dot segment"},
		{"no name", func(r *GatewayRoute) { r.Name = "" }, "name"},
		{"name with space", func(r *GatewayRoute) { r.Name = "open ai" }, "name"},
		{"no prefixes", func(r *GatewayRoute) { r.PathPrefixes = nil }, "no PathPrefixes"},
		{"relative prefix", func(r *GatewayRoute) { r.PathPrefixes = []string{"v1/"} }, "begin with /"},
		{"no header", func(r *GatewayRoute) { r.Header = "" }, "not a header field name"},
		{"header with colon", func(r *GatewayRoute) { r.Header = "x-api-key:" }, "not a header field name"},
		{"hop-by-hop header", func(r *GatewayRoute) { r.Header = "proxy-authorization" }, "cannot carry"},
		{"host header", func(r *GatewayRoute) { r.Header = "Host" }, "cannot carry"},
		{"no credential", func(r *GatewayRoute) { r.Credential = "" }, "no credential"},
		{"trailing newline", func(r *GatewayRoute) { r.Credential = sentinel + "\n" }, "white space"},
		{"line break inside", func(r *GatewayRoute) { r.Credential = sentinel + "\r\nX-Evil: 1" }, "control character"},
		{"control in prefix", func(r *GatewayRoute) { r.Prefix = "Bearer\x00" }, "control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := valid
			tc.change(&r)
			err := r.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want an error with %q", err, tc.want)
			}
			wantNoSecret(t, "the error", err.Error())
			l, lerr := net.Listen("tcp", "127.0.0.1:0")
			if lerr != nil {
				t.Fatal(lerr)
			}
			if serr := New(Options{}).ServeGateway(l, r); serr == nil || serr.Error() != err.Error() {
				t.Errorf("ServeGateway: %v, want %v", serr, err)
			}
			if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
				t.Error("the listener of a refused route is open")
			}
		})
	}
	for _, text := range []string{fmt.Sprint(valid), fmt.Sprintf("%+v", valid), fmt.Sprintf("%#v", valid), fmt.Sprintf("%v", &valid),
		fmt.Sprintf("%+v", struct{ R GatewayRoute }{valid})} {
		wantNoSecret(t, "a formatted route", text)
	}
	g, err := compileRoute(valid)
	if err != nil {
		t.Fatal(err)
	}
	wantNoSecret(t, "a redacted refusal", g.redact(&refusal{http.StatusBadGateway, ReasonUpstreamFailed, "echo: " + sentinel}).detail)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	insecure := New(Options{GatewayTLS: &tls.Config{InsecureSkipVerify: true}})
	if err := insecure.ServeGateway(l, valid); err == nil || !strings.Contains(err.Error(), "skips certificate verification") {
		t.Errorf("ServeGateway with InsecureSkipVerify: %v", err)
	}
}

func TestWithoutKeyParam(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"key=abc", ""},
		{"beta=true&key=abc", "beta=true"},
		{"key=a&alt=sse&Key=b&%6bey=c&key", "alt=sse"},
		{"keys=1&monkey=2&a=key", "keys=1&monkey=2&a=key"},
		{"a=%2F&b=c+d", "a=%2F&b=c+d"}, // the others as sent
	} {
		got, err := withoutKeyParam(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("withoutKeyParam(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := withoutKeyParam("%zz=1"); err == nil {
		t.Error("an unparsable name was kept")
	}
}

// FuzzGatewayPath: a path plainPath accepts under a prefix stays under it
// however a server reads it (decoded, backslashes as slashes, dot segments
// resolved), and withoutKeyParam leaves no key parameter.
func FuzzGatewayPath(f *testing.F) {
	for _, seed := range []string{"/v1/messages", "/v1/../x", "/v1/%2e%2e/x", "/v1/..%2f", "/v1/..;/x", "/v1/a%5c..", "/v1//x", "/v1/%00"} {
		f.Add(seed, "a=1&key=2")
	}
	f.Fuzz(func(t *testing.T, p, query string) {
		if plainPath(p) == nil && strings.HasPrefix(p, "/v1/") {
			decoded, err := url.PathUnescape(p)
			if err != nil {
				t.Fatalf("accepted %q, which does not decode: %v", p, err)
			}
			for _, read := range []string{decoded, strings.ReplaceAll(decoded, "\\", "/")} {
				var segments []string
				for s := range strings.SplitSeq(read, "/") {
					s, _, _ = strings.Cut(s, ";")
					segments = append(segments, s)
				}
				if cleaned := path.Clean(strings.Join(segments, "/")) + "/"; !strings.HasPrefix(cleaned, "/v1/") {
					t.Fatalf("accepted %q, which a server may read as %q", p, cleaned)
				}
			}
		}
		out, err := withoutKeyParam(query)
		if err != nil {
			return
		}
		for param := range strings.SplitSeq(out, "&") {
			name, _, _ := strings.Cut(param, "=")
			if n, _ := url.QueryUnescape(name); strings.EqualFold(n, "key") {
				t.Fatalf("withoutKeyParam(%q) = %q keeps a key", query, out)
			}
		}
	})
}
