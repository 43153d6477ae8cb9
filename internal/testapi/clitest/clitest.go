// Package clitest holds what the real-engine tests of internal/testapi
// share: a git repository for an agent to read, a forward proxy that
// records (and by default refuses) whatever a CLI sends beyond its model
// API, and a run helper that reports a failing CLI's output. It is
// imported only by tests.
package clitest

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os/exec"
	"sync"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/testenv"
)

// GitInstalled requires git on PATH, for GitRepo.
var GitInstalled = testenv.Requirement{Name: "git", Check: func() string {
	if _, err := exec.LookPath("git"); err != nil {
		return "no git on PATH (apt-get install git)"
	}
	return ""
}}

// GitRepo makes a repository in a new temporary directory with one empty
// commit whose subject is subject, and returns its path.
func GitRepo(t testing.TB, subject string) string {
	t.Helper()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q"},
		{"-c", "user.name=test", "-c", "user.email=test@example.invalid", "commit", "-q", "--allow-empty", "-m", subject},
	} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", args[0], err, out)
		}
	}
	return dir
}

// RecordingProxy is a forward proxy on loopback that records each request
// line and forwards absolute-form requests for allowed (host:port) only;
// it refuses CONNECT and every other host with 403 (all of them when
// allowed is ""). It returns the proxy's URL and the lines seen so far.
func RecordingProxy(t testing.TB, allowed string) (string, func() []string) {
	var mu sync.Mutex
	var lines []string
	forward := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.Out.URL, pr.Out.Host = pr.In.URL, pr.In.Host },
		Transport: &http.Transport{}, // no proxy of its own, whatever the environment says
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		lines = append(lines, r.Method+" "+r.RequestURI+" "+r.Proto)
		mu.Unlock()
		if r.Method == http.MethodConnect || r.URL.Scheme != "http" || r.URL.Host != allowed || allowed == "" {
			http.Error(w, "refused by the test's proxy", http.StatusForbidden)
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), lines...)
	}
}

// ProxyEnv points every HTTP client convention at proxy, except for
// loopback, where the scripted API listens.
func ProxyEnv(proxy string) []string {
	return []string{
		"HTTP_PROXY=" + proxy, "HTTPS_PROXY=" + proxy, "http_proxy=" + proxy, "https_proxy=" + proxy,
		"NO_PROXY=127.0.0.1", "no_proxy=127.0.0.1",
	}
}

// Run runs argv in dir with exactly env and stdin empty, giving it two
// minutes, and returns its standard output. A failure to start, a
// non-zero exit or the timeout fails the test with both outputs.
func Run(t testing.TB, dir string, env []string, argv ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", argv[0], err, out, stderr.Bytes())
	}
	if stderr.Len() > 0 {
		t.Logf("%s wrote to stderr:\n%s", argv[0], stderr.Bytes())
	}
	return out
}
