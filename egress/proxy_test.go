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
	"strings"
	"sync"
	"testing"
	"time"
)

func TestConnectAllowedByIPRule(t *testing.T) {
	s, port := tlsUpstream(t)
	target := hostPort("127.0.0.1", port)
	_, addr, rec := startProxy(t, Options{
		Policy:   Policy{Allow: []Rule{{Host: "127.0.0.1", Port: port, Kind: KindIP}}},
		Resolver: resolver(),
	})
	c, br := dialProxy(t, addr)
	if resp := sendConnect(t, c, br, target); resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %s", target, resp.Status)
	}
	// Go sends no server name for an IP address: allowed for an ip rule.
	body, err := getOverTLS(t, c, br, s, "127.0.0.1")
	if err != nil || body != "hello over tls" {
		t.Fatalf("GET through the tunnel: %q, %v", body, err)
	}
	c.Close()
	a := rec.wait(t, 1)[0]
	if a.BytesUp == 0 || a.BytesDown == 0 {
		t.Errorf("no bytes counted: %+v", a)
	}
	sameAttempt(t, a, Attempt{Method: "CONNECT", Host: "127.0.0.1", Port: port, Resolved: target,
		Decision: DecisionAllowed, Rule: target, Tunnel: TunnelTLS, BytesUp: -1, BytesDown: -1})
}

// A name resolving to loopback is allowed only with an ip rule for that
// exact address and port; without it, the same name is refused.
func TestConnectNameResolvingToLoopback(t *testing.T) {
	s, port := tlsUpstream(t)
	name := hostPort("api.example.com", port)
	loopback := hostPort("127.0.0.1", port)
	for _, withIPRule := range []bool{true, false} {
		t.Run(fmt.Sprint("ip-rule=", withIPRule), func(t *testing.T) {
			rules := []Rule{{Host: "api.example.com", Port: port, Kind: KindName}}
			if withIPRule {
				rules = append(rules, Rule{Host: "127.0.0.1", Port: port, Kind: KindIP})
			}
			res := resolver("api.example.com", "127.0.0.1")
			_, addr, rec := startProxy(t, Options{Policy: Policy{Allow: rules}, Resolver: res})
			c, br := dialProxy(t, addr)
			resp := sendConnect(t, c, br, name)
			if !withIPRule {
				wantRefused(t, resp, http.StatusForbidden, ReasonResolvesToPrivate)
				sameAttempt(t, rec.wait(t, 1)[0], Attempt{Method: "CONNECT", Host: "api.example.com", Port: port,
					Decision: DecisionRefused, Reason: ReasonResolvesToPrivate, Rule: name})
				return
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("CONNECT %s: %s", name, resp.Status)
			}
			body, err := getOverTLS(t, c, br, s, "API.example.com") // SNI compared case-insensitively
			if err != nil || body != "hello over tls" {
				t.Fatalf("GET through the tunnel: %q, %v", body, err)
			}
			c.Close()
			sameAttempt(t, rec.wait(t, 1)[0], Attempt{Method: "CONNECT", Host: "api.example.com", Port: port,
				Resolved: loopback, Decision: DecisionAllowed, Rule: name, Tunnel: TunnelTLS, BytesUp: -1, BytesDown: -1})
		})
	}
}

// Refusals decided from the request line: the answer, the record, and
// that no lookup or dial happened when the name decides.
func TestConnectRefusedBeforeDialling(t *testing.T) {
	rules := []Rule{
		{Host: "api.example.com", Port: 443, Kind: KindName},
		{Host: "*.internal.example.com", Port: 443, Kind: KindWildcard},
	}
	for _, tc := range []struct {
		target, host string
		port         int
		status       int
		reason       string
		rule         string
		lookups      int64
	}{
		{"evil.example.net:443", "evil.example.net", 443, 403, ReasonNotAllowed, "", 0},
		{"api.example.com:8443", "api.example.com", 8443, 403, ReasonNotAllowed, "", 0},
		{"internal.example.com:443", "internal.example.com", 443, 403, ReasonNotAllowed, "", 0},
		{"8.8.8.8:443", "8.8.8.8", 443, 403, ReasonIPLiteralNotAllowed, "", 0}, // what api.example.com resolves to
		{"127.0.0.1:443", "127.0.0.1", 443, 403, ReasonIPLiteralNotAllowed, "", 0},
		{"169.254.169.254:443", "169.254.169.254", 443, 403, ReasonIPLiteralNotAllowed, "", 0},
		{"[::1]:443", "::1", 443, 403, ReasonIPLiteralNotAllowed, "", 0},
		{"[::ffff:127.0.0.1]:443", "127.0.0.1", 443, 403, ReasonIPLiteralNotAllowed, "", 0},
		{"db.internal.example.com:443", "db.internal.example.com", 443, 403, ReasonResolvesToPrivate, "*.internal.example.com:443", 1},
		{"127.1:443", "127.1:443", 0, 400, ReasonMalformedRequest, "", 0},
		{"api.example.com", "api.example.com", 0, 400, ReasonMalformedRequest, "", 0},
	} {
		t.Run(tc.target, func(t *testing.T) {
			res := resolver("api.example.com", "8.8.8.8", "db.internal.example.com", "10.0.0.5")
			_, addr, rec := startProxy(t, Options{
				Policy:   Policy{Allow: rules},
				Resolver: res,
				Dial: func(context.Context, string, string) (net.Conn, error) {
					t.Error("dialled for a refused request")
					return nil, errors.New("no")
				},
			})
			c, br := dialProxy(t, addr)
			wantRefused(t, sendConnect(t, c, br, tc.target), tc.status, tc.reason)
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("connection not closed after the refusal: %v", err)
			}
			sameAttempt(t, rec.wait(t, 1)[0], Attempt{Method: "CONNECT", Host: tc.host, Port: tc.port,
				Decision: DecisionRefused, Reason: tc.reason, Rule: tc.rule})
			if got := res.calls.Load(); got != tc.lookups {
				t.Errorf("%d lookups, want %d", got, tc.lookups)
			}
		})
	}
}

// After the 200, the first bytes must be a TLS ClientHello or an HTTP/1.x
// request head for the CONNECT host; otherwise nothing reaches the
// destination, and the client is told in what it speaks.
func TestConnectFirstMessageChecks(t *testing.T) {
	up := startRawUpstream(t)
	port := up.port()
	name := hostPort("api.example.com", port)
	loopback := hostPort("127.0.0.1", port)
	policy := Policy{Allow: []Rule{
		{Host: "api.example.com", Port: port, Kind: KindName},
		{Host: "127.0.0.1", Port: port, Kind: KindIP},
	}}
	handshake := func(sni string) func(net.Conn, *bufio.Reader) error {
		return func(c net.Conn, br *bufio.Reader) error {
			return tls.Client(bufferedConn{c, br}, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
		}
	}
	// send writes the tunnel's first bytes (from a goroutine: the proxy
	// may answer before reading them all) and reads the HTTP answer.
	send := func(first string) func(net.Conn, *bufio.Reader) error {
		return func(c net.Conn, br *bufio.Reader) error {
			go io.WriteString(c, first)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return err
			}
			return fmt.Errorf("%d %s", resp.StatusCode, resp.Header.Get(RefusedHeader))
		}
	}
	request := func(target, fields string) func(net.Conn, *bufio.Reader) error {
		return send("GET " + target + " HTTP/1.1\r\n" + fields + "\r\n")
	}
	for _, tc := range []struct {
		name, target, host, rule, reason, tunnel string
		client                                   func(net.Conn, *bufio.Reader) error
		wantErr                                  string
	}{
		{"sni-mismatch", name, "api.example.com", name, ReasonSNIMismatch, TunnelTLS, handshake("evil.example.net"), "access denied"},
		{"no-sni", name, "api.example.com", name, ReasonNoSNI, TunnelTLS, handshake(""), "access denied"},
		{"name-sni-for-ip", loopback, "127.0.0.1", loopback, ReasonSNIMismatch, TunnelTLS, handshake("api.example.com"), "access denied"},
		{"closed-early", name, "api.example.com", name, ReasonNoClientHello, "", func(c net.Conn, br *bufio.Reader) error {
			c.Write([]byte{22, 3, 1}) // the start of a record header, then nothing
			c.(*net.TCPConn).CloseWrite()
			_, err := br.ReadByte()
			return err
		}, "EOF"},

		// Neither TLS nor HTTP/1.x. The SSH client waits for the server's
		// banner: refused on its first line, not at the timeout.
		{"binary", name, "api.example.com", name, ReasonNotTLS, "", send("\x00\x01\x02\x03\x04\x05garbage"), "403 not-tls"},
		{"text", name, "api.example.com", name, ReasonNotTLS, "", send("garbage\r\n\r\n"), "403 not-tls"},
		{"ssh", name, "api.example.com", name, ReasonNotTLS, "", send("SSH-2.0-OpenSSH_9.6\r\n"), "403 not-tls"},
		{"http2-preface", name, "api.example.com", name, ReasonNotTLS, "", send("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), "403 not-tls"},
		{"bad-field", name, "api.example.com", name, ReasonNotTLS, "", request("/", "Host: "+name+"\r\nNo colon\r\n"), "403 not-tls"},

		// HTTP that does not name the CONNECT's destination.
		{"host-other-name", name, "api.example.com", name, ReasonHostMismatch, TunnelHTTP,
			request("/", "Host: "+hostPort("evil.example.net", port)+"\r\n"), "403 host-mismatch"},
		{"host-without-port", name, "api.example.com", name, ReasonHostMismatch, TunnelHTTP,
			request("/", "Host: api.example.com\r\n"), "403 host-mismatch"}, // means port 80
		{"host-other-port", name, "api.example.com", name, ReasonHostMismatch, TunnelHTTP,
			request("/", "Host: "+hostPort("api.example.com", port+1)+"\r\n"), "403 host-mismatch"},
		{"no-host", name, "api.example.com", name, ReasonHostMismatch, TunnelHTTP, request("/", ""), "403 host-mismatch"},
		{"two-hosts", name, "api.example.com", name, ReasonHostMismatch, TunnelHTTP,
			request("/", "Host: "+name+"\r\nHost: "+name+"\r\n"), "403 host-mismatch"},
		{"name-host-for-ip", loopback, "127.0.0.1", loopback, ReasonHostMismatch, TunnelHTTP,
			request("/", "Host: "+name+"\r\n"), "403 host-mismatch"},
		{"absolute-other-host", name, "api.example.com", name, ReasonHostMismatch, TunnelHTTP,
			request("http://"+hostPort("evil.example.net", port)+"/", "Host: "+name+"\r\n"), "403 host-mismatch"},
		{"absolute-https", name, "api.example.com", name, ReasonHostMismatch, TunnelHTTP,
			request("https://"+name+"/", "Host: "+name+"\r\n"), "403 host-mismatch"},
		{"nested-connect", name, "api.example.com", name, ReasonHostMismatch, TunnelHTTP,
			send("CONNECT " + name + " HTTP/1.1\r\nHost: " + name + "\r\n\r\n"), "403 host-mismatch"},

		// An HTTP head the proxy cannot read whole.
		{"head-too-large", name, "api.example.com", name, ReasonHeadersTooLarge, "",
			request("/", "X: "+strings.Repeat("a", maxHeadBytes)+"\r\n"), "431 headers-too-large"},
		{"head-cut-short", name, "api.example.com", name, ReasonMalformedRequest, "", func(c net.Conn, br *bufio.Reader) error {
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+name)
			c.(*net.TCPConn).CloseWrite()
			return send("")(c, br)
		}, "400 malformed-request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, addr, rec := startProxy(t, Options{Policy: policy, Resolver: resolver("api.example.com", "127.0.0.1")})
			c, br := dialProxy(t, addr)
			if resp := sendConnect(t, c, br, tc.target); resp.StatusCode != http.StatusOK {
				t.Fatalf("CONNECT: %s", resp.Status)
			}
			err := tc.client(c, br)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("client saw %v, want %q", err, tc.wantErr)
			}
			sameAttempt(t, rec.wait(t, 1)[0], Attempt{Method: "CONNECT", Host: tc.host, Port: port, Resolved: loopback,
				Decision: DecisionRefused, Reason: tc.reason, Rule: tc.rule, Tunnel: tc.tunnel})
			time.Sleep(50 * time.Millisecond)
			if n := up.bytesReceived(); n != 0 {
				t.Errorf("the destination received %d bytes of a refused tunnel", n)
			}
		})
	}
}

// plainUpstream is an HTTP server on loopback reached as plain.test.
func plainUpstream(t *testing.T) (Options, int) {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "path=%s host=%s proxy-auth=%q conn=%q", r.URL.Path, r.Host, r.Header.Get("Proxy-Authorization"), r.Header.Get("X-Per-Hop"))
	}))
	t.Cleanup(s.Close)
	port := s.Listener.Addr().(*net.TCPAddr).Port
	return Options{
		Policy: Policy{Allow: []Rule{
			{Host: "plain.test", Port: port, Kind: KindName},
			{Host: "127.0.0.1", Port: port, Kind: KindIP},
		}},
		Resolver: resolver("plain.test", "127.0.0.1", "evil.test", "127.0.0.1"),
	}, port
}

func TestForwardJudgesEveryRequest(t *testing.T) {
	opts, port := plainUpstream(t)
	_, addr, rec := startProxy(t, opts)
	c, br := dialProxy(t, addr)
	authority := hostPort("plain.test", port)
	fmt.Fprintf(c, "GET http://%s/first HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic eA==\r\nConnection: X-Per-Hop\r\nX-Per-Hop: 1\r\n\r\n", authority, authority)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	want := fmt.Sprintf("path=/first host=%s proxy-auth=\"\" conn=\"\"", authority)
	if resp.StatusCode != 200 || string(body) != want {
		t.Fatalf("first request: %s %q, want 200 %q", resp.Status, body, want)
	}
	// Same connection, a destination the policy does not allow (evil.test
	// even resolves to the same loopback address).
	evil := hostPort("evil.test", port)
	fmt.Fprintf(c, "GET http://%s/second HTTP/1.1\r\nHost: %s\r\n\r\n", evil, evil)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, resp, http.StatusForbidden, ReasonNotAllowed)
	resp.Body.Close()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("connection not closed after the refusal: %v", err)
	}
	got := rec.wait(t, 2)
	sameAttempt(t, got[0], Attempt{Method: "GET", Host: "plain.test", Port: port, Resolved: hostPort("127.0.0.1", port),
		Status: 200, Decision: DecisionAllowed, Rule: authority, BytesUp: 0, BytesDown: int64(len(want))})
	sameAttempt(t, got[1], Attempt{Method: "GET", Host: "evil.test", Port: port, Decision: DecisionRefused, Reason: ReasonNotAllowed})
}

func TestForwardRefusals(t *testing.T) {
	opts, port := plainUpstream(t)
	authority := hostPort("plain.test", port)
	for _, tc := range []struct {
		name, request string
		status        int
		want          Attempt
	}{
		{"host-header-mismatch", fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: evil.test:%d\r\n\r\n", authority, port),
			400, Attempt{Method: "GET", Host: "plain.test", Port: port, Reason: ReasonHostHeaderMismatch}},
		{"host-header-other-port", fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: plain.test\r\n\r\n", authority),
			400, Attempt{Method: "GET", Host: "plain.test", Port: port, Reason: ReasonHostHeaderMismatch}},
		{"origin-form", "GET / HTTP/1.1\r\nHost: " + authority + "\r\n\r\n",
			400, Attempt{Method: "GET", Reason: ReasonOriginFormRequest}},
		{"https-scheme", "GET https://" + authority + "/ HTTP/1.1\r\nHost: " + authority + "\r\n\r\n",
			400, Attempt{Method: "GET", Host: authority, Reason: ReasonUnsupportedScheme}},
		{"garbage", "\x16\x03\x01garbage\r\n\r\n",
			400, Attempt{Reason: ReasonMalformedRequest}},
		{"ip-literal", fmt.Sprintf("GET http://10.1.2.3:%d/ HTTP/1.1\r\n\r\n", port),
			403, Attempt{Method: "GET", Host: "10.1.2.3", Port: port, Reason: ReasonIPLiteralNotAllowed}},
		{"huge-head", "GET http://" + authority + "/ HTTP/1.1\r\nX: " + strings.Repeat("a", maxHeadBytes) + "\r\n\r\n",
			431, Attempt{Reason: ReasonHeadersTooLarge}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, addr, rec := startProxy(t, opts)
			c, br := dialProxy(t, addr)
			go io.WriteString(c, tc.request)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			wantRefused(t, resp, tc.status, tc.want.Reason)
			tc.want.Decision = DecisionRefused
			sameAttempt(t, rec.wait(t, 1)[0], tc.want)
		})
	}
}

func TestStalledClientTimesOut(t *testing.T) {
	up := startRawUpstream(t)
	target := hostPort("127.0.0.1", up.port())
	_, addr, rec := startProxy(t, Options{
		Policy:        Policy{Allow: []Rule{{Host: "127.0.0.1", Port: up.port(), Kind: KindIP}}},
		HeaderTimeout: 200 * time.Millisecond,
	})
	start := time.Now()
	_, silentBR := dialProxy(t, addr)
	half, halfBR := dialProxy(t, addr)
	io.WriteString(half, "CONNECT "+target+" HTTP/1.1\r\n") // and no end of head
	resp, err := http.ReadResponse(silentBR, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, resp, http.StatusRequestTimeout, ReasonHeaderTimeout)
	resp, err = http.ReadResponse(halfBR, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, resp, http.StatusRequestTimeout, ReasonHeaderTimeout)
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("stalled clients freed after %v", elapsed)
	}
	// A tunnel whose client never sends its ClientHello.
	c, br := dialProxy(t, addr)
	if resp := sendConnect(t, c, br, target); resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("stalled tunnel not closed: %v", err)
	}
	// Tunnels whose first request head never ends: inside its first line,
	// and after it. The client reads the 408 inside the tunnel.
	for _, slow := range []string{"GET / HT", "GET / HTTP/1.1\r\nHost: " + target + "\r\n"} {
		start := time.Now()
		c, br := dialProxy(t, addr)
		if resp := sendConnect(t, c, br, target); resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %s", resp.Status)
		}
		io.WriteString(c, slow)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("after %q: %v", slow, err)
		}
		wantRefused(t, resp, http.StatusRequestTimeout, ReasonHeaderTimeout)
		if elapsed := time.Since(start); elapsed > 2*time.Second {
			t.Errorf("slow tunnel %q freed after %v", slow, elapsed)
		}
	}
	got := rec.wait(t, 5)
	for _, a := range got[:2] {
		sameAttempt(t, a, Attempt{Decision: DecisionRefused, Reason: ReasonHeaderTimeout})
	}
	sameAttempt(t, got[2], Attempt{Method: "CONNECT", Host: "127.0.0.1", Port: up.port(), Resolved: target,
		Decision: DecisionRefused, Reason: ReasonNoClientHello, Rule: target})
	for _, a := range got[3:] {
		sameAttempt(t, a, Attempt{Method: "CONNECT", Host: "127.0.0.1", Port: up.port(), Resolved: target,
			Decision: DecisionRefused, Reason: ReasonHeaderTimeout, Rule: target})
	}
	if n := up.bytesReceived(); n != 0 {
		t.Errorf("the destination received %d bytes of stalled tunnels", n)
	}
}

// 1,000 clients at once against MaxConns 64: exactly 64 are served, every
// other one is refused and recorded, and the proxy answers again once the
// held connections end.
func TestConnectionCap(t *testing.T) {
	const clients, maxConns = 1000, 64
	up := startRawUpstream(t)
	target := hostPort("127.0.0.1", up.port())
	p, addr, rec := startProxy(t, Options{
		Policy:        Policy{Allow: []Rule{{Host: "127.0.0.1", Port: up.port(), Kind: KindIP}}},
		MaxConns:      maxConns,
		HeaderTimeout: time.Minute, // held tunnels wait for a ClientHello that never comes
	})
	var (
		mu        sync.Mutex
		held      []net.Conn
		refused   int
		unread    int
		slowest   time.Duration
		wg        sync.WaitGroup
		startGate = make(chan struct{})
	)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startGate
			start := time.Now()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			c.SetDeadline(time.Now().Add(30 * time.Second))
			br := bufio.NewReader(c)
			fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
			resp, err := http.ReadResponse(br, nil)
			mu.Lock()
			defer mu.Unlock()
			slowest = max(slowest, time.Since(start))
			switch {
			case err != nil:
				unread++ // closed unread: beyond the refusers' own bound
				c.Close()
			case resp.StatusCode == 200:
				held = append(held, c)
			case resp.StatusCode == 503 && resp.Header.Get(RefusedHeader) == ReasonTooManyConnections:
				refused++
				c.Close()
			default:
				t.Errorf("unexpected answer %s", resp.Status)
				c.Close()
			}
		}()
	}
	close(startGate)
	wg.Wait()
	t.Logf("%d held, %d answered 503, %d closed unread; slowest answer %v", len(held), refused, unread, slowest)
	if len(held) != maxConns || refused+unread != clients-maxConns {
		t.Fatalf("%d held and %d refused, want %d and %d", len(held), refused+unread, maxConns, clients-maxConns)
	}
	got := rec.wait(t, clients-maxConns)
	for _, a := range got {
		if a.Decision != DecisionRefused || a.Reason != ReasonTooManyConnections {
			t.Fatalf("unexpected attempt %+v", a)
		}
	}
	for _, c := range held {
		c.Close()
	}
	rec.wait(t, clients) // the held tunnels end as no-client-hello
	c, br := dialProxy(t, addr)
	if resp := sendConnect(t, c, br, target); resp.StatusCode != 200 {
		t.Fatalf("after the flood: %s", resp.Status)
	}
	st := p.Stats()
	if st.Refused != clients {
		t.Errorf("stats: %+v", st)
	}
}

func TestCloseEndsEverything(t *testing.T) {
	s, port := tlsUpstream(t)
	target := hostPort("127.0.0.1", port)
	p, addr, rec := startProxy(t, Options{Policy: Policy{Allow: []Rule{{Host: "127.0.0.1", Port: port, Kind: KindIP}}}})
	tunnel, tunnelBR := dialProxy(t, addr)
	if resp := sendConnect(t, tunnel, tunnelBR, target); resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	cfg := s.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	cfg.ServerName = "127.0.0.1"
	tc := tls.Client(bufferedConn{tunnel, tunnelBR}, cfg)
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	_, idleBR := dialProxy(t, addr)
	done := make(chan struct{})
	go func() {
		p.Close()
		p.Close() // idempotent
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	if _, err := tc.Read(make([]byte, 1)); err == nil {
		t.Error("tunnel still open after Close")
	}
	if _, err := idleBR.ReadByte(); err == nil {
		t.Error("idle connection still open after Close")
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Error("listener still accepting after Close")
	}
	a := rec.wait(t, 1)[0]
	if a.Decision != DecisionAllowed || a.BytesUp == 0 {
		t.Errorf("the tunnel's attempt: %+v", a)
	}
}

func TestStats(t *testing.T) {
	opts, port := plainUpstream(t)
	p, addr, rec := startProxy(t, opts)
	for _, host := range []string{"plain.test", "plain.test", "evil.test"} {
		c, br := dialProxy(t, addr)
		fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\n\r\n", hostPort(host, port))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		c.Close()
	}
	rec.wait(t, 3)
	st := p.Stats()
	if st.Allowed != 2 || st.Refused != 1 || len(st.Used) != 1 || len(st.Refusals) != 1 ||
		st.Used[0].Attempts != 2 || st.Used[0].BytesDown == 0 || st.Used[0].Rule != hostPort("plain.test", port) ||
		st.Refusals[0] != (Refusal{Host: "evil.test", Port: port, Reason: ReasonNotAllowed, Attempts: 1}) {
		t.Errorf("stats: %+v", st)
	}
}

func TestInvalidPolicyDoesNotServe(t *testing.T) {
	p := New(Options{Policy: Policy{Allow: []Rule{{Host: "*.com", Port: 443, Kind: KindWildcard}}}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Serve(l); err == nil || !strings.Contains(err.Error(), "two labels") {
		t.Errorf("Serve: %v", err)
	}
}
