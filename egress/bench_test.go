package egress

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// helloBytes is a real ClientHello, as crypto/tls writes it for
// serverName (none for an IP address).
func helloBytes(tb testing.TB, serverName string) []byte {
	tb.Helper()
	cc := &captureConn{}
	tls.Client(cc, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}).Handshake()
	if len(cc.written) == 0 {
		tb.Fatal("no ClientHello written")
	}
	return cc.written
}

type captureConn struct {
	net.Conn
	written []byte
}

func (c *captureConn) Write(b []byte) (int, error) {
	c.written = append(c.written, b...)
	return len(b), nil
}
func (c *captureConn) Read([]byte) (int, error)    { return 0, errors.New("capture only") }
func (c *captureConn) Close() error                { return nil }
func (c *captureConn) SetDeadline(time.Time) error { return nil }
func (c *captureConn) SetReadDeadline(time.Time) error {
	return nil
}
func (c *captureConn) SetWriteDeadline(time.Time) error { return nil }

// sendingUpstream reads a ClientHello's worth of bytes from each
// connection, then sends size bytes and closes.
func sendingUpstream(tb testing.TB, helloLen int, size int64) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	sendFrom(l, helloLen, size)
	return l.Addr().(*net.TCPAddr).Port
}

// sendFrom serves l as sendingUpstream does.
func sendFrom(l net.Listener, helloLen int, size int64) {
	block := make([]byte, 1<<20)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := io.ReadFull(c, make([]byte, helloLen)); err != nil {
					return
				}
				for left := size; left > 0; {
					n := min(left, int64(len(block)))
					if _, err := c.Write(block[:n]); err != nil {
						return
					}
					left -= n
				}
			}()
		}
	}()
}

// fetch sends hello and reads everything the other side sends, directly
// or through a CONNECT to target at proxyAddr.
func fetch(tb testing.TB, addr, proxyAddr, target string, hello []byte) int64 {
	dial := addr
	if proxyAddr != "" {
		dial = proxyAddr
	}
	c, err := net.Dial("tcp", dial)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	var r io.Reader = c
	if proxyAddr != "" {
		br := bufio.NewReader(c)
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != 200 {
			tb.Fatalf("CONNECT: %v %v", resp, err)
		}
		if br.Buffered() > 0 {
			r = io.MultiReader(br, c)
		}
	}
	if _, err := c.Write(hello); err != nil {
		tb.Fatal(err)
	}
	// A large buffer: io.Discard would read 8 KiB at a time.
	buf := make([]byte, 256<<10)
	var n int64
	for {
		m, err := r.Read(buf)
		n += int64(m)
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkProxyThroughput downloads 256 MiB over loopback directly,
// through a bare relay (the floor of any relay on this host: the bytes
// cross loopback twice) and through a CONNECT tunnel, in turn, and
// reports the rates and the proxy's ratio to both.
func BenchmarkProxyThroughput(b *testing.B) {
	const size = 256 << 20
	hello := helloBytes(b, "127.0.0.1")
	port := sendingUpstream(b, len(hello), size)
	target := hostPort("127.0.0.1", port)
	_, proxyAddr, _ := startProxy(b, Options{
		Policy: Policy{Allow: []Rule{{Host: "127.0.0.1", Port: port, Kind: KindIP}}},
		Record: func(Attempt) {},
	})
	relayAddr := bareRelay(b, target)
	var direct, relayed, proxied time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if n := fetch(b, target, "", "", hello); n != size {
			b.Fatalf("direct: %d bytes", n)
		}
		direct += time.Since(start)
		start = time.Now()
		if n := fetch(b, relayAddr, "", "", hello); n != size {
			b.Fatalf("relayed: %d bytes", n)
		}
		relayed += time.Since(start)
		start = time.Now()
		if n := fetch(b, "", proxyAddr, target, hello); n != size {
			b.Fatalf("proxied: %d bytes", n)
		}
		proxied += time.Since(start)
	}
	mb := float64(size) / (1 << 20) * float64(b.N)
	b.ReportMetric(mb/direct.Seconds(), "direct-MB/s")
	b.ReportMetric(mb/relayed.Seconds(), "bare-relay-MB/s")
	b.ReportMetric(mb/proxied.Seconds(), "proxy-MB/s")
	b.ReportMetric(100*direct.Seconds()/proxied.Seconds(), "proxy/direct-%")
	b.ReportMetric(100*relayed.Seconds()/proxied.Seconds(), "proxy/relay-%")
}

// bareRelay is the floor any relay pays on this host: accept, dial
// target, io.Copy both ways (splice), no checks.
func bareRelay(tb testing.TB, target string) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() {
					io.Copy(up, c)
					up.(*net.TCPConn).CloseWrite()
				}()
				io.Copy(c, up)
			}()
		}
	}()
	return l.Addr().String()
}

// BenchmarkConnectLatency measures what the proxy adds to opening a
// connection: dial, CONNECT, 200, ClientHello check, first byte back,
// against dial, ClientHello, first byte back.
func BenchmarkConnectLatency(b *testing.B) {
	hello := helloBytes(b, "127.0.0.1")
	port := sendingUpstream(b, len(hello), 1)
	target := hostPort("127.0.0.1", port)
	_, proxyAddr, _ := startProxy(b, Options{
		Policy: Policy{Allow: []Rule{{Host: "127.0.0.1", Port: port, Kind: KindIP}}},
		Record: func(Attempt) {},
	})
	var direct, proxied time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		fetch(b, target, "", "", hello)
		direct += time.Since(start)
		start = time.Now()
		fetch(b, "", proxyAddr, target, hello)
		proxied += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(float64(direct.Microseconds())/n, "direct-µs/conn")
	b.ReportMetric(float64(proxied.Microseconds())/n, "proxy-µs/conn")
	b.ReportMetric(float64((proxied-direct).Microseconds())/n, "added-µs/conn")
}

// BenchmarkGateway measures what the gateway adds: small requests over
// kept-alive connections (the engine's side plain HTTP, the upstream's
// TLS), and a 64 MiB streamed response, each directly to the TLS upstream
// and through the gateway, in turn.
func BenchmarkGateway(b *testing.B) {
	const large = 64 << 20
	block := make([]byte, 32<<10)
	u := startGatewayUpstream(b, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path != "/v1/stream" {
			io.WriteString(w, `{"ok":true}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for left := large; left > 0; left -= len(block) {
			w.Write(block)
			w.(http.Flusher).Flush()
		}
	})
	_, addr, _ := startGateway(b, Options{Policy: Policy{Allow: []Rule{u.ipRule()}}, Record: func(Attempt) {}}, anthropicRoute(u), u)
	direct := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: u.pool}, DisableCompression: true}}
	viaGateway := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	b.Cleanup(direct.CloseIdleConnections)
	b.Cleanup(viaGateway.CloseIdleConnections)
	post := func(c *http.Client, base, path string) int64 {
		resp, err := c.Post(base+path, "application/json", strings.NewReader(`{"model":"m","max_tokens":1}`))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		n, err := io.CopyBuffer(io.Discard, resp.Body, make([]byte, 256<<10))
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("%s: %s, %v", path, resp.Status, err)
		}
		return n
	}
	directBase, gatewayBase := "https://"+hostPort("127.0.0.1", u.port), "http://"+addr
	post(direct, directBase, "/v1/messages") // open the kept-alive connections
	post(viaGateway, gatewayBase, "/v1/messages")
	const small = 200
	var directSmall, gatewaySmall, directLarge, gatewayLarge time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		for range small {
			post(direct, directBase, "/v1/messages")
		}
		directSmall += time.Since(start)
		start = time.Now()
		for range small {
			post(viaGateway, gatewayBase, "/v1/messages")
		}
		gatewaySmall += time.Since(start)
		start = time.Now()
		if n := post(direct, directBase, "/v1/stream"); n != large {
			b.Fatalf("direct stream: %d bytes", n)
		}
		directLarge += time.Since(start)
		start = time.Now()
		if n := post(viaGateway, gatewayBase, "/v1/stream"); n != large {
			b.Fatalf("gateway stream: %d bytes", n)
		}
		gatewayLarge += time.Since(start)
	}
	requests, mb := float64(small*b.N), float64(large)/(1<<20)*float64(b.N)
	b.ReportMetric(float64(directSmall.Microseconds())/requests, "direct-µs/req")
	b.ReportMetric(float64(gatewaySmall.Microseconds())/requests, "gateway-µs/req")
	b.ReportMetric(mb/directLarge.Seconds(), "direct-MB/s")
	b.ReportMetric(mb/gatewayLarge.Seconds(), "gateway-MB/s")
}
