package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"sync"
	"syscall"
	"time"
)

// Resolver looks names up. *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options configure a Proxy. Zero values take the defaults named below.
type Options struct {
	Policy Policy
	// Resolver resolves allowed names (default net.DefaultResolver). The
	// proxy dials exactly the addresses it checked and never resolves a
	// name twice for one attempt.
	Resolver Resolver
	// Dial opens upstream connections (default a net.Dialer). It runs on
	// ordinary goroutines, so in this process's network namespace.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxConns caps the client connections handled at once, the
	// gateways' included (default 64). A connection beyond it gets 503
	// too-many-connections.
	MaxConns int
	// IdleTimeout ends a tunnel or a kept-alive connection on which no byte
	// moved (default 5m).
	IdleTimeout time.Duration
	// HeaderTimeout bounds reading a request head or a tunnel's first
	// message (a ClientHello, or a cleartext request head), and
	// how long a tunnel with one direction closed may stay silent
	// (default 10s).
	HeaderTimeout time.Duration
	// DialTimeout bounds resolving a name, and separately dialling it
	// (default 10s).
	DialTimeout time.Duration
	// Record is called once per attempt, allowed or refused, when the
	// attempt ends. Calls are serialized.
	Record func(Attempt)
	// GatewayTLS configures TLS to gateways' upstreams (ServeGateway). nil
	// verifies against the system's roots (Go reads SSL_CERT_FILE and
	// SSL_CERT_DIR). Its ServerName and NextProtos are ignored: each
	// upstream's host is the server name, and HTTP/1.1 is spoken. A config
	// with InsecureSkipVerify serves no gateway.
	GatewayTLS *tls.Config
}

// Defaults of Options.
const (
	DefaultMaxConns      = 64
	DefaultIdleTimeout   = 5 * time.Minute
	DefaultHeaderTimeout = 10 * time.Second
	DefaultDialTimeout   = 10 * time.Second
)

// maxHeadBytes bounds a request head (request line and header fields).
const maxHeadBytes = 64 << 10

// ErrClosed is what Serve returns once Close was called.
var ErrClosed = errors.New("egress: proxy closed")

// Proxy is one HTTP forward proxy enforcing one Policy.
type Proxy struct {
	opts      Options
	policyErr error
	slots     chan struct{}   // one per connection handled
	refusers  chan struct{}   // one per connection being told 503
	transport *http.Transport // the proxy's absolute-form requests
	gateways  *http.Transport // gateways' requests, over TLS
	ctx       context.Context // cancelled by Close
	cancel    context.CancelFunc

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	handlers  sync.WaitGroup

	recordMu sync.Mutex
	stats    statsTable
}

// New returns a proxy for opts. It serves nothing until Serve.
func New(opts Options) *Proxy {
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	if opts.Dial == nil {
		opts.Dial = (&net.Dialer{}).DialContext
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.HeaderTimeout <= 0 {
		opts.HeaderTimeout = DefaultHeaderTimeout
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		opts:      opts,
		policyErr: opts.Policy.Validate(),
		slots:     make(chan struct{}, opts.MaxConns),
		refusers:  make(chan struct{}, opts.MaxConns),
		ctx:       ctx,
		cancel:    cancel,
		listeners: map[net.Listener]struct{}{},
		conns:     map[net.Conn]struct{}{},
	}
	p.transport = p.newTransport()
	p.gateways = p.newGatewayTransport()
	return p
}

// Serve accepts connections on l until Close (then it returns ErrClosed)
// or until l fails. It closes l. Several listeners may be served at once,
// and gateway listeners (ServeGateway) beside them.
func (p *Proxy) Serve(l net.Listener) error { return p.serve(l, proxyRequests{p}) }

// requestServer serves the requests of one kind of listener: the proxy's
// (proxyRequests) or a gateway's.
type requestServer interface {
	// start begins the record of a request whose head starts now.
	start() *Attempt
	// describe fills in what a record says of req before it is judged.
	describe(a *Attempt, req *http.Request)
	// serveRequest serves req, whose head is head, and records it. It
	// reports whether c may carry another request.
	serveRequest(c net.Conn, br *bufio.Reader, head []byte, req *http.Request, a *Attempt) bool
}

// serve is Serve for the requests s serves.
func (p *Proxy) serve(l net.Listener, s requestServer) error {
	if p.policyErr != nil {
		l.Close()
		return fmt.Errorf("egress: invalid policy: %w", p.policyErr)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.Close()
		return ErrClosed
	}
	p.listeners[l] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, l)
		p.mu.Unlock()
		l.Close()
	}()

	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if p.isClosed() {
				return ErrClosed
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("egress: accept on %s: %w", l.Addr(), err)
		}
		backoff = 0
		if !p.startHandler(c) {
			return ErrClosed
		}
		select {
		case p.slots <- struct{}{}:
			go func() {
				defer p.handlers.Done()
				defer func() { <-p.slots }()
				defer p.closeConn(c)
				p.handle(c, s)
			}()
		default:
			p.refuseBusy(c, s)
		}
	}
}

// Close stops every listener (the gateways' too), ends every connection,
// and waits for their handlers. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		p.cancel()
		for l := range p.listeners {
			l.Close()
		}
		for c := range p.conns {
			c.Close()
		}
	}
	p.mu.Unlock()
	p.transport.CloseIdleConnections()
	p.gateways.CloseIdleConnections()
	p.handlers.Wait()
	return nil
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// startHandler registers an accepted connection and one handler for it,
// or closes it when the proxy is closed.
func (p *Proxy) startHandler(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	p.handlers.Add(1)
	return true
}

// trackConn registers an upstream connection so that Close ends it.
func (p *Proxy) trackConn(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) closeConn(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// refuseBusy answers a connection beyond MaxConns with 503. Reading its
// request head first (to record what it asked, and so that closing does
// not reset a request the client is still sending) is itself bounded:
// beyond MaxConns such readers at once, the connection gets the 503
// unread, and closing it may reset it before the client reads the answer.
func (p *Proxy) refuseBusy(c net.Conn, s requestServer) {
	r := &refusal{http.StatusServiceUnavailable, ReasonTooManyConnections,
		fmt.Sprintf("the proxy already handles %d connections", p.opts.MaxConns)}
	select {
	case p.refusers <- struct{}{}:
	default:
		// A fresh socket's send buffer is empty: this write does not wait.
		c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
		writeRefusal(c, r)
		p.record(s.start(), r)
		p.closeConn(c)
		p.handlers.Done()
		return
	}
	go func() {
		defer p.handlers.Done()
		defer func() { <-p.refusers }()
		defer p.closeConn(c)
		a := s.start()
		c.SetDeadline(a.Time.Add(time.Second))
		br := bufio.NewReaderSize(c, 4096)
		if _, err := readHead(br); err == nil {
			if req, err := http.ReadRequest(br); err == nil {
				s.describe(a, req)
			}
		}
		writeRefusal(c, r)
		p.record(a, r)
	}()
}

// handle serves one client connection: request after request until one is
// refused, the client closes, or the connection idles out.
func (p *Proxy) handle(c net.Conn, s requestServer) {
	br := bufio.NewReaderSize(c, maxHeadBytes)
	for first := true; ; first = false {
		if !first {
			c.SetReadDeadline(time.Now().Add(p.opts.IdleTimeout))
			if _, err := br.Peek(1); err != nil {
				return
			}
		}
		a := s.start()
		c.SetReadDeadline(a.Time.Add(p.opts.HeaderTimeout))
		head, err := readHead(br)
		if err != nil {
			if errors.Is(err, errNoRequest) {
				return // closed between requests, or before any: no attempt
			}
			r := headRefusal(err, p.opts.HeaderTimeout)
			c.SetWriteDeadline(time.Now().Add(p.opts.HeaderTimeout))
			writeRefusal(c, r)
			p.record(a, r)
			return
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			r := &refusal{http.StatusBadRequest, ReasonMalformedRequest, fmt.Sprintf("unparsable request: %v", err)}
			c.SetWriteDeadline(time.Now().Add(p.opts.HeaderTimeout))
			writeRefusal(c, r)
			p.record(a, r)
			return
		}
		if !s.serveRequest(c, br, head, req, a) {
			return
		}
	}
}

// proxyRequests are the proxy's: CONNECT, or an absolute-form request.
type proxyRequests struct{ p *Proxy }

func (proxyRequests) start() *Attempt { return &Attempt{Time: time.Now()} }

func (proxyRequests) describe(a *Attempt, req *http.Request) {
	a.Method = req.Method
	a.Host, a.Port = requestTarget(req)
}

func (s proxyRequests) serveRequest(c net.Conn, br *bufio.Reader, head []byte, req *http.Request, a *Attempt) bool {
	a.Method = req.Method
	hosts, err := hostHeaders(head)
	if err != nil {
		r := &refusal{http.StatusBadRequest, ReasonMalformedRequest, fmt.Sprintf("unparsable request: %v", err)}
		c.SetWriteDeadline(time.Now().Add(s.p.opts.HeaderTimeout))
		writeRefusal(c, r)
		s.p.record(a, r)
		return false
	}
	if req.Method == http.MethodConnect {
		s.p.connect(c, br, req, hosts, a)
		return false
	}
	return s.p.forward(c, req, hosts, a)
}

var (
	errHeadTooLarge = errors.New("request head too large")
	errNoRequest    = errors.New("connection closed before a request")
)

// readHead peeks at a request head (up to and including the empty line
// that ends it) without consuming it. It fails with errNoRequest when the
// connection ends before a single byte (a stall is a timeout instead),
// errHeadTooLarge when the head does not fit br's buffer.
func readHead(br *bufio.Reader) ([]byte, error) { return peekThrough(br, headEnd) }

// peekThrough peeks at br until end finds where what it waits for ends
// (end(buf, from) > 0), without consuming anything, and fails as readHead
// does. end may look back up to two bytes before from.
func peekThrough(br *bufio.Reader, end func(buf []byte, from int) int) ([]byte, error) {
	searched := 0
	for {
		buf, _ := br.Peek(br.Buffered()) // what is buffered, without reading
		if n := end(buf, searched); n > 0 {
			return buf[:n], nil
		}
		searched = max(len(buf)-2, 0)
		if len(buf) == br.Size() {
			return nil, errHeadTooLarge
		}
		if _, err := br.Peek(len(buf) + 1); err != nil {
			if len(buf) == 0 && !isTimeout(err) {
				return nil, errNoRequest // closed, reset, or the proxy is closing
			}
			return nil, err
		}
	}
}

// headRefusal is the refusal for a request head readHead could not read
// (errNoRequest aside: that is no request at all).
func headRefusal(err error, timeout time.Duration) *refusal {
	switch {
	case errors.Is(err, errHeadTooLarge):
		return &refusal{http.StatusRequestHeaderFieldsTooLarge, ReasonHeadersTooLarge,
			fmt.Sprintf("the request head exceeds %d bytes", maxHeadBytes)}
	case isTimeout(err):
		return &refusal{http.StatusRequestTimeout, ReasonHeaderTimeout,
			fmt.Sprintf("no complete request head within %v", timeout)}
	}
	return &refusal{http.StatusBadRequest, ReasonMalformedRequest, "the connection ended inside a request head"}
}

// lineEnd returns the length of the first line in buf (through its LF),
// or 0; bytes before from were searched already.
func lineEnd(buf []byte, from int) int {
	if i := bytes.IndexByte(buf[from:], '\n'); i >= 0 {
		return from + i + 1
	}
	return 0
}

// headEnd returns the length of the head in buf (through the first empty
// line, CRLF or bare LF), or 0; bytes before from were searched already.
func headEnd(buf []byte, from int) int {
	for i := from; i < len(buf); i++ {
		if buf[i] != '\n' {
			continue
		}
		switch {
		case i+1 < len(buf) && buf[i+1] == '\n':
			return i + 2
		case i+2 < len(buf) && buf[i+1] == '\r' && buf[i+2] == '\n':
			return i + 3
		}
	}
	return 0
}

// hostHeaders reads the Host field values of a head. http.ReadRequest
// drops them for absolute-form requests, and the proxy must compare them.
func hostHeaders(head []byte) ([]string, error) {
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	if _, err := tp.ReadLine(); err != nil {
		return nil, err
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, err
	}
	return h.Values("Host"), nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
