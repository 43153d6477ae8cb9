package egress

import (
	"net"
	"strconv"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/testnet"
)

// BenchmarkDownloadFromTestHost downloads 1 GiB from a test host (a
// network namespace behind a veth pair, as the integration tests' model
// APIs are) directly and through a CONNECT tunnel of the proxy, in turn,
// and reports both rates, their ratio, and the time to the first byte of a
// fresh connection each way. Root only (the test host).
func BenchmarkDownloadFromTestHost(b *testing.B) {
	const size = 1 << 30
	h := testnet.NewHost(b)
	hello := helloBytes(b, h.Addr().String())
	bulk, first := 9000, 9001
	sendFrom(h.Listen(b, bulk), len(hello), size)
	sendFrom(h.Listen(b, first), len(hello), 1)
	addr := func(port int) string { return net.JoinHostPort(h.Addr().String(), strconv.Itoa(port)) }
	_, proxyAddr, _ := startProxy(b, Options{
		Policy: Policy{Allow: []Rule{
			{Host: h.Addr().String(), Port: bulk, Kind: KindIP},
			{Host: h.Addr().String(), Port: first, Kind: KindIP},
		}},
		Record: func(Attempt) {},
	})
	var direct, proxied time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if n := fetch(b, addr(bulk), "", "", hello); n != size {
			b.Fatalf("direct: %d bytes", n)
		}
		direct += time.Since(start)
		start = time.Now()
		if n := fetch(b, "", proxyAddr, addr(bulk), hello); n != size {
			b.Fatalf("proxied: %d bytes", n)
		}
		proxied += time.Since(start)
	}
	b.StopTimer()
	const rounds = 20
	var directFirst, proxiedFirst time.Duration
	for range rounds {
		start := time.Now()
		fetch(b, addr(first), "", "", hello)
		directFirst += time.Since(start)
		start = time.Now()
		fetch(b, "", proxyAddr, addr(first), hello)
		proxiedFirst += time.Since(start)
	}
	mb := float64(size) / (1 << 20) * float64(b.N)
	b.ReportMetric(mb/direct.Seconds(), "direct-MB/s")
	b.ReportMetric(mb/proxied.Seconds(), "proxy-MB/s")
	b.ReportMetric(100*direct.Seconds()/proxied.Seconds(), "proxy/direct-%")
	b.ReportMetric(float64(directFirst.Microseconds())/rounds, "direct-first-byte-µs")
	b.ReportMetric(float64(proxiedFirst.Microseconds())/rounds, "proxy-first-byte-µs")
}
