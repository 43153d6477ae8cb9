// Package scripted holds what the scripted model API servers of
// internal/testapi share: serving a handler on a listener for the length of
// a test, a loopback listener, the tool-call arguments of a script turn
// marshalled once, and reading a server-sent event stream in their tests.
// Each API's own format stays in its package.
package scripted

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Serve serves h on l until the test ends and returns its base URL
// (http://addr).
func Serve(t testing.TB, l net.Listener, h http.Handler) string {
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: h}}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// Loopback is a listener on a free loopback port.
func Loopback(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening on loopback: %v", err)
	}
	return l
}

// ObjectJSON marshals the arguments of a scripted tool call, which every
// API takes as a JSON object; nil is {}. It panics otherwise: the script
// (turn of api's server) is wrong.
func ObjectJSON(api string, turn int, v any) json.RawMessage {
	if v == nil {
		return json.RawMessage("{}")
	}
	b, err := json.Marshal(v)
	if err != nil || b[0] != '{' {
		panic(fmt.Sprintf("%s: turn %d: tool arguments %#v are not a JSON object (%v)", api, turn, v, err))
	}
	return b
}

// Event is one server-sent event: its name ("" when the stream names
// none) and its data decoded as a JSON object.
type Event struct {
	Name string
	Data map[string]any
}

// ReadEvents reads a server-sent event stream to its end.
func ReadEvents(t testing.TB, r io.Reader) []Event {
	t.Helper()
	var events []Event
	var name string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var data map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &data); err != nil {
				t.Fatalf("event %q: %v", name, err)
			}
			events = append(events, Event{name, data})
			name = ""
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the event stream: %v", err)
	}
	return events
}

// KeyDigest is the hex sha256 of the credential values a request carried
// in one header (joined by NUL; "" when there were none), so a server can
// record which key arrived without holding it.
func KeyDigest(values []string) string {
	if len(values) == 0 {
		return ""
	}
	sum := sha256.Sum256([]byte(strings.Join(values, "\x00")))
	return hex.EncodeToString(sum[:])
}

// Session is what every scripted server keeps while it serves: the
// requests it received, in order, and how far into its script (of turns
// turns) it is. The zero Session is not usable; use NewSession.
type Session[R any] struct {
	mu       sync.Mutex
	turns    int
	next     int
	requests []R
}

// NewSession is a session over a script of turns turns.
func NewSession[R any](turns int) *Session[R] { return &Session[R]{turns: turns} }

// Record records a request that takes no turn.
func (s *Session[R]) Record(r R) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r)
}

// Next records a model request and gives it the script's next turn: its
// index, or ok false (index = the number of turns) once the script is
// used up.
func (s *Session[R]) Next(r R) (index int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r)
	if s.next >= s.turns {
		return s.turns, false
	}
	s.next++
	return s.next - 1, true
}

// Requests returns every request recorded so far, in order.
func (s *Session[R]) Requests() []R {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]R(nil), s.requests...)
}
