// Command hookbox-scripted-api serves the scripted Anthropic Messages API
// (internal/testapi/anthropic) from a script file, for tests whose engine
// cannot reach the test process: the cluster tests run it as a pod, the
// Jobs' engines reach it through their egress allowlist. Each request it
// received is one JSON line on stdout (credentials never: only whether a
// key was sent and its digest), for the test to read from the pod's log.
//
//	hookbox-scripted-api --listen 0.0.0.0:8080 --script script.json
//
// The script is a JSON array of turns: {"Text": "...", "ToolUse": {"Name":
// "Write", "Input": {...}}}. It is built static, so its image is one file.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"

	"hookbox.dev/hookbox/internal/testapi/anthropic"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	scriptFile := flag.String("script", "", "the script: a JSON array of turns")
	flag.Parse()
	if err := run(*listen, *scriptFile); err != nil {
		fmt.Fprintln(os.Stderr, "hookbox-scripted-api:", err)
		os.Exit(1)
	}
}

func run(listen, scriptFile string) error {
	if scriptFile == "" {
		return errors.New("--script is required: a JSON array of turns")
	}
	data, err := os.ReadFile(scriptFile)
	if err != nil {
		return err
	}
	var script anthropic.Script
	if err := json.Unmarshal(data, &script); err != nil {
		return fmt.Errorf("%s: %w", scriptFile, err)
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "hookbox-scripted-api: %d turns, listening on %s\n", len(script), l.Addr())
	return http.Serve(l, newLogger(anthropic.NewServer(script)))
}

// logger prints every request the server recorded, once, after it has
// been answered.
type logger struct {
	s       *anthropic.Server
	mu      sync.Mutex
	printed int
	enc     *json.Encoder
}

func newLogger(s *anthropic.Server) *logger {
	s.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	return &logger{s: s, enc: json.NewEncoder(os.Stdout)}
}

func (l *logger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.s.ServeHTTP(w, r)
	l.mu.Lock()
	defer l.mu.Unlock()
	reqs := l.s.Requests()
	for _, req := range reqs[l.printed:] {
		l.enc.Encode(req)
	}
	l.printed = len(reqs)
}
