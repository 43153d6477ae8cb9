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
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// staticResolver answers from a map and counts its calls.
type staticResolver struct {
	names map[string][]netip.Addr
	calls atomic.Int64
}

func (r *staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.calls.Add(1)
	addrs, ok := r.names[host]
	if !ok {
		return nil, fmt.Errorf("no such host %s", host)
	}
	return addrs, nil
}

func resolver(pairs ...string) *staticResolver {
	r := &staticResolver{names: map[string][]netip.Addr{}}
	for i := 0; i < len(pairs); i += 2 {
		r.names[pairs[i]] = append(r.names[pairs[i]], netip.MustParseAddr(pairs[i+1]))
	}
	return r
}

// recorder collects Options.Record calls.
type recorder struct {
	mu       sync.Mutex
	attempts []Attempt
	notify   chan struct{}
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 4096)} }

func (r *recorder) record(a Attempt) {
	r.mu.Lock()
	r.attempts = append(r.attempts, a)
	r.mu.Unlock()
	r.notify <- struct{}{}
}

// wait returns the first n attempts once they are recorded.
func (r *recorder) wait(t testing.TB, n int) []Attempt {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		if len(r.attempts) >= n {
			out := append([]Attempt(nil), r.attempts...)
			r.mu.Unlock()
			return out
		}
		r.mu.Unlock()
		select {
		case <-r.notify:
		case <-deadline:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("want %d attempts recorded, have %d: %+v", n, len(r.attempts), r.attempts)
		}
	}
}

// startProxy serves a proxy on a loopback port and closes it when the
// test ends.
func startProxy(t testing.TB, opts Options) (*Proxy, string, *recorder) {
	t.Helper()
	rec := newRecorder()
	if opts.Record == nil {
		opts.Record = rec.record
	}
	p := New(opts)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(l) }()
	t.Cleanup(func() {
		p.Close()
		if err := <-served; !errors.Is(err, ErrClosed) {
			t.Errorf("Serve returned %v, want ErrClosed", err)
		}
	})
	return p, l.Addr().String(), rec
}

// rawUpstream accepts TCP connections and records what each sends.
type rawUpstream struct {
	l        net.Listener
	mu       sync.Mutex
	received int
	accepted int
}

func startRawUpstream(t testing.TB) *rawUpstream {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{l: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.accepted++
			u.mu.Unlock()
			go func() {
				defer c.Close()
				n, _ := io.Copy(io.Discard, c)
				u.mu.Lock()
				u.received += int(n)
				u.mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return u
}

func (u *rawUpstream) port() int { return u.l.Addr().(*net.TCPAddr).Port }

func (u *rawUpstream) bytesReceived() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.received
}

// tlsUpstream is an HTTPS server on loopback whose certificate names
// 127.0.0.1, ::1, example.com and *.example.com.
func tlsUpstream(t testing.TB) (*httptest.Server, int) {
	t.Helper()
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello over tls")
	}))
	t.Cleanup(s.Close)
	return s, s.Listener.Addr().(*net.TCPAddr).Port
}

// dialProxy opens a connection to the proxy with a read deadline.
func dialProxy(t testing.TB, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// sendConnect writes a CONNECT for target and reads the proxy's answer.
func sendConnect(t testing.TB, c net.Conn, br *bufio.Reader, target string) *http.Response {
	t.Helper()
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("reading the answer to CONNECT %s: %v", target, err)
	}
	return resp
}

// bufferedConn reads through a bufio.Reader that may hold bytes already.
type bufferedConn struct {
	net.Conn
	br *bufio.Reader
}

func (b bufferedConn) Read(p []byte) (int, error) { return b.br.Read(p) }

// getOverTLS does a TLS handshake (server name sni) over a tunnel and one
// GET, returning the body.
func getOverTLS(t testing.TB, c net.Conn, br *bufio.Reader, s *httptest.Server, sni string) (string, error) {
	t.Helper()
	cfg := s.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	cfg.ServerName = sni
	tc := tls.Client(bufferedConn{c, br}, cfg)
	if err := tc.Handshake(); err != nil {
		return "", err
	}
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", sni)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// wantRefused checks a proxy answer: status and reason header.
func wantRefused(t testing.TB, resp *http.Response, status int, reason string) {
	t.Helper()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status || resp.Header.Get(RefusedHeader) != reason {
		t.Fatalf("got %s with %s=%q (%q), want %d and %q", resp.Status, RefusedHeader, resp.Header.Get(RefusedHeader), body, status, reason)
	}
}

// sameAttempt compares an attempt with want on every field but Time and
// DurationMS (and the byte counts when want leaves them -1).
func sameAttempt(t testing.TB, got, want Attempt) {
	t.Helper()
	if got.Time.IsZero() || got.DurationMS < 0 {
		t.Errorf("attempt without time or with negative duration: %+v", got)
	}
	got.Time, got.DurationMS = time.Time{}, 0
	if want.BytesUp < 0 {
		got.BytesUp = -1
	}
	if want.BytesDown < 0 {
		got.BytesDown = -1
	}
	if got != want {
		t.Errorf("attempt:\n got  %+v\n want %+v", got, want)
	}
}
