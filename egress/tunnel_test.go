package egress

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// httpUpstream serves HTTP/1.1 on loopback straight from the socket,
// answering each request with its Host and path, and keeps every byte it
// received and the number it sent.
type httpUpstream struct {
	l        net.Listener
	mu       sync.Mutex
	received bytes.Buffer
	sent     int
	done     chan struct{} // closed when the first connection has ended
}

func startHTTPUpstream(t *testing.T) *httpUpstream {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &httpUpstream{l: l, done: make(chan struct{})}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer close(u.done)
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(io.TeeReader(c, u))
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			body := fmt.Sprintf("host=%s path=%s", req.Host, req.URL.Path)
			n, _ := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			u.mu.Lock()
			u.sent += n
			u.mu.Unlock()
		}
	}()
	return u
}

func (u *httpUpstream) Write(b []byte) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.received.Write(b)
}

func (u *httpUpstream) port() int { return u.l.Addr().(*net.TCPAddr).Port }

// wait returns what the upstream received and sent once its connection
// ended.
func (u *httpUpstream) wait(t *testing.T) (string, int) {
	t.Helper()
	select {
	case <-u.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream connection did not end")
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.received.String(), u.sent
}

// Cleartext HTTP through CONNECT, as Node's undici sends it for an http://
// destination behind a proxy: the first request must name the CONNECT
// host, and then every byte, the first request's and the later ones',
// reaches the destination unchanged. The second request names another
// host: it is not parsed, and goes where the CONNECT fixed.
func TestConnectCleartextHTTP(t *testing.T) {
	for _, tc := range []struct {
		name   string
		host   string   // the CONNECT's, with the upstream's port
		first  []string // the first request, written in these pieces
		status string   // the first response's body, %d the port
	}{
		{"ip-with-body", "127.0.0.1", []string{"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: 5\r\n\r\nhello"},
			"host=127.0.0.1:%d path=/v1/messages"},
		{"split-head", "127.0.0.1", []string{"GET /spl", "it HTTP/1.1\r\nHo", "st: 127.0.0.1:%d\r\n", "\r\n"},
			"host=127.0.0.1:%d path=/split"},
		{"name-case-and-dot", "api.example.com", []string{"GET /n HTTP/1.1\r\nHost: API.Example.COM.:%d\r\n\r\n"},
			"host=API.Example.COM.:%d path=/n"},
		{"ipv4-mapped-host", "127.0.0.1", []string{"GET /m HTTP/1.1\r\nHost: [::ffff:127.0.0.1]:%d\r\n\r\n"},
			"host=[::ffff:127.0.0.1]:%d path=/m"},
		{"absolute-form", "api.example.com", []string{"GET http://api.example.com:%d/abs HTTP/1.1\r\nHost: api.example.com:%[1]d\r\n\r\n"},
			"host=api.example.com:%d path=/abs"},
		{"absolute-http10-no-host", "127.0.0.1", []string{"GET http://127.0.0.1:%d/old HTTP/1.0\r\n\r\n"},
			"host=127.0.0.1:%d path=/old"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startHTTPUpstream(t)
			port := up.port()
			target := hostPort(tc.host, port)
			_, addr, rec := startProxy(t, Options{
				Policy: Policy{Allow: []Rule{
					{Host: "api.example.com", Port: port, Kind: KindName},
					{Host: "127.0.0.1", Port: port, Kind: KindIP},
				}},
				Resolver: resolver("api.example.com", "127.0.0.1"),
			})
			c, br := dialProxy(t, addr)
			if resp := sendConnect(t, c, br, target); resp.StatusCode != http.StatusOK {
				t.Fatalf("CONNECT %s: %s", target, resp.Status)
			}
			var sent strings.Builder
			for i, piece := range tc.first {
				if strings.Contains(piece, "%") {
					piece = fmt.Sprintf(piece, port)
				}
				if i > 0 {
					time.Sleep(20 * time.Millisecond)
				}
				io.WriteString(c, piece)
				sent.WriteString(piece)
			}
			readBody(t, br, fmt.Sprintf(tc.status, port))
			second := "GET /second HTTP/1.1\r\nHost: evil.example.net\r\n\r\n"
			io.WriteString(c, second)
			sent.WriteString(second)
			readBody(t, br, "host=evil.example.net path=/second")
			c.Close()

			received, down := up.wait(t)
			if received != sent.String() {
				t.Errorf("the destination received\n%q\nwant exactly\n%q", received, sent.String())
			}
			sameAttempt(t, rec.wait(t, 1)[0], Attempt{Method: "CONNECT", Host: tc.host, Port: port,
				Resolved: hostPort("127.0.0.1", port), Decision: DecisionAllowed, Rule: target, Tunnel: TunnelHTTP,
				BytesUp: int64(sent.Len()), BytesDown: int64(down)})
		})
	}
}

// readBody reads one response and requires status 200 and body want.
func readBody(t *testing.T, br *bufio.Reader, want string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || string(body) != want {
		t.Fatalf("response %s %q (%v), want 200 %q", resp.Status, body, err, want)
	}
}

// The comparison of a tunnelled request with its CONNECT, port rules
// first: a Host without a port means 80.
func TestCheckHTTPStart(t *testing.T) {
	name80 := destination{host: "api.example.com", port: 80}
	ip8080 := destination{host: "10.213.0.2", port: 8080, ip: true}
	ip6 := destination{host: "::1", port: 443, ip: true}
	const ok, mismatch, notHTTP = "", ReasonHostMismatch, ReasonNotTLS
	for _, tc := range []struct {
		d      destination
		head   string
		reason string
	}{
		{name80, "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n", ok},
		{name80, "GET / HTTP/1.1\r\nHost: api.example.com:80\r\n\r\n", ok},
		{name80, "GET / HTTP/1.1\r\nHost: API.EXAMPLE.COM.\r\n\r\n", ok},
		{name80, "GET / HTTP/1.1\nHost: api.example.com\n\n", ok},
		{name80, "GET / HTTP/1.1\r\nHost: api.example.com:8080\r\n\r\n", mismatch},
		{name80, "GET / HTTP/1.1\r\nHost: api.example.com..\r\n\r\n", mismatch},
		{name80, "GET / HTTP/1.1\r\nHost: other.example.com\r\n\r\n", mismatch},
		{name80, "GET / HTTP/1.1\r\nHost: x.api.example.com\r\n\r\n", mismatch},
		{name80, "GET / HTTP/1.1\r\nHost: \r\n\r\n", mismatch},
		{name80, "GET http://api.example.com/x HTTP/1.1\r\n\r\n", ok},
		{name80, "GET http://api.example.com:80/x HTTP/1.1\r\nHost: api.example.com\r\n\r\n", ok},
		{name80, "GET http://api.example.com/x HTTP/1.1\r\nHost: other.example.com\r\n\r\n", mismatch},
		{name80, "GET http://other.example.com/x HTTP/1.1\r\nHost: api.example.com\r\n\r\n", mismatch},
		{name80, "GET ftp://api.example.com/x HTTP/1.1\r\nHost: api.example.com\r\n\r\n", mismatch},
		{name80, "CONNECT api.example.com:80 HTTP/1.1\r\nHost: api.example.com\r\n\r\n", mismatch},
		{ip8080, "GET / HTTP/1.1\r\nHost: 10.213.0.2:8080\r\n\r\n", ok},
		{ip8080, "OPTIONS * HTTP/1.1\r\nHost: 10.213.0.2:8080\r\n\r\n", ok},
		{ip8080, "GET / HTTP/1.1\r\nHost: [::ffff:10.213.0.2]:8080\r\n\r\n", ok},
		{ip8080, "GET / HTTP/1.1\r\nHost: 10.213.0.2\r\n\r\n", mismatch},
		{ip8080, "GET / HTTP/1.1\r\nHost: 10.213.0.2:80\r\n\r\n", mismatch},
		{ip8080, "GET / HTTP/1.1\r\nHost: 010.213.0.2:8080\r\n\r\n", mismatch},
		{ip8080, "GET / HTTP/1.1\r\nHost: model.internal:8080\r\n\r\n", mismatch},
		{ip8080, "GET http://10.213.0.2/x HTTP/1.1\r\nHost: 10.213.0.2:8080\r\n\r\n", mismatch},
		{ip8080, "GET / HTTP/1.0\r\n\r\n", mismatch},
		{ip6, "GET / HTTP/1.1\r\nHost: [::1]:443\r\n\r\n", ok},
		{ip6, "GET / HTTP/1.1\r\nHost: [0:0::1]:443\r\n\r\n", ok},
		{ip6, "GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n", mismatch},
		{ip6, "GET / HTTP/1.1\r\nHost: ::1:443\r\n\r\n", mismatch},
		{name80, "GET / HTTP/2.0\r\nHost: api.example.com\r\n\r\n", notHTTP},
		{name80, "GET /\r\nHost: api.example.com\r\n\r\n", notHTTP},
		{name80, "GET / HTTP/1.1 extra\r\nHost: api.example.com\r\n\r\n", notHTTP},
	} {
		br := bufio.NewReaderSize(strings.NewReader(tc.head), maxHeadBytes)
		kind, pending, r := checkHTTPStart(br, time.Second, tc.d)
		reason := ""
		if r != nil {
			reason = r.reason
		}
		if reason != tc.reason {
			t.Errorf("%s for %s: %v, want %q", strings.ReplaceAll(tc.head, "\r\n", "|"), tc.d.hostPort(), r, tc.reason)
			continue
		}
		switch {
		case reason == ok && (kind != TunnelHTTP || string(pending) != tc.head):
			t.Errorf("%q: allowed as %q with pending %q, want http and every byte", tc.head, kind, pending)
		case reason == mismatch && kind != TunnelHTTP, reason == notHTTP && kind != "":
			t.Errorf("%q: refused %s as tunnel %q", tc.head, reason, kind)
		case reason != ok && pending != nil:
			t.Errorf("%q: refused, but %q would go upstream", tc.head, pending)
		}
	}
}

func TestLineEnd(t *testing.T) {
	for _, tc := range []struct {
		in         string
		from, want int
	}{
		{"GET / HTTP/1.1\r\nHost: x\r\n", 0, 16},
		{"GET / HTTP/1.1\nHost: x\n", 0, 15},
		{"GET / HTTP/1.1\nHost: x\n", 14, 15},
		{"GET / HTTP/1.1", 0, 0},
		{"", 0, 0},
	} {
		if got := lineEnd([]byte(tc.in), tc.from); got != tc.want {
			t.Errorf("lineEnd(%q, %d) = %d, want %d", tc.in, tc.from, got, tc.want)
		}
	}
}

// Whatever a tunnel's client sends, checkHTTPStart consumes nothing,
// forwards only what the client sent, and allows only a request naming
// the destination.
func FuzzCheckHTTPStart(f *testing.F) {
	f.Add("GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\nbody")
	f.Add("GET http://api.example.com/ HTTP/1.0\r\n\r\n")
	f.Add("POST /v1 HTTP/1.1\r\nHost: API.example.com.:80\r\nContent-Length: 2\r\n\r\nhi")
	f.Add("GET / HTTP/1.1\r\nHost: a\r\nHost: api.example.com\r\n\r\n")
	f.Add("SSH-2.0-x\r\n")
	f.Add("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	d := destination{host: "api.example.com", port: 80}
	f.Fuzz(func(t *testing.T, in string) {
		if in == "" || !isTokenByte(in[0]) {
			return // the TLS path's
		}
		br := bufio.NewReaderSize(strings.NewReader(in), maxHeadBytes)
		kind, pending, r := checkHTTPStart(br, time.Second, d)
		if rest, _ := io.ReadAll(br); string(rest) != in {
			t.Fatalf("consumed from the client: %q left of %q", rest, in)
		}
		if r != nil {
			if pending != nil {
				t.Fatalf("refused %v, but %q would go upstream", r, pending)
			}
			return
		}
		if kind != TunnelHTTP || !strings.HasPrefix(in, string(pending)) {
			t.Fatalf("allowed as %q, forwarding %q of %q", kind, pending, in)
		}
		head := pending[:headEnd(pending, 0)]
		req, err := parseRequestHead(head)
		if err != nil {
			t.Fatalf("allowed an unparsable head %q: %v", head, err)
		}
		hosts, _ := hostHeaders(head)
		if len(hosts) == 1 {
			if h, p, err := splitAuthority(hosts[0], 80); err != nil || h != d.host || p != d.port {
				t.Fatalf("allowed Host %q for %s", hosts[0], d.hostPort())
			}
		} else if len(hosts) > 1 || req.URL.Host == "" {
			t.Fatalf("allowed %q with Host fields %q", head, hosts)
		}
	})
}
