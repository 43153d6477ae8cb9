package tracehelper

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"hookbox.dev/hookbox/ebpf"
)

func TestManagedKey(t *testing.T) {
	t.Setenv(KeyEnv, "")
	k := ManagedKey()
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(k) || k != ManagedKey() {
		t.Fatalf("ManagedKey() = %q, want 32 stable hex digits", k)
	}
	t.Setenv(KeyEnv, "upgraded")
	if got := ManagedKey(); got != "upgraded" {
		t.Errorf("with %s: %q", KeyEnv, got)
	}
	for _, bad := range []string{"../escape", "Upper", strings.Repeat("a", 65), "a b"} {
		t.Setenv(KeyEnv, bad)
		if got := ManagedKey(); got != k {
			t.Errorf("an override that is not 1-64 of [0-9a-z] must be ignored: %q gave %q", bad, got)
		}
	}
	t.Setenv(KeyEnv, strings.Repeat("z9", 32))
	if got := ManagedKey(); got != strings.Repeat("z9", 32) {
		t.Errorf("a 64-character override: %q", got)
	}
}

// managedServer is startServer as a managed tracer of key.
func managedServer(t *testing.T, key string, idle time.Duration) *harness {
	if os.Getuid() != 0 {
		t.Skip("a managed tracer serves root only: run as root")
	}
	return startServer(t, newFakeTracer(), func(s *Server) {
		s.key, s.rootOnly, s.idle = key, true, idle
	})
}

// TestManagedKeyChecked: a managed tracer serves only clients of its key,
// and a client of a key never uses a tracer that does not echo it.
func TestManagedKeyChecked(t *testing.T) {
	h := managedServer(t, "k1", time.Hour)
	dir := t.TempDir()
	c, err := DialManaged(h.sock, "k1")
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(dir, ebpf.Policy{})
	if err != nil {
		t.Fatalf("the tracer's own key: %v", err)
	}
	if _, err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"k2", ""} {
		c, err := DialManaged(h.sock, key)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Watch(dir, ebpf.Policy{})
		if code := refusedCode(t, err); code != CodeBadKey {
			t.Errorf("key %q: refused with %s, want %s", key, code, CodeBadKey)
		}
	}

	plain := startServer(t, newFakeTracer(), nil)
	c, err = DialManaged(plain.sock, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Watch(dir, ebpf.Policy{}); err == nil {
		t.Fatal("a client of key k1 used a helper that has no key")
	}
	waitLog(t, plain.log, "end=disconnect")
}

// TestManagedIdle: a managed tracer ends Serve once idle, not while a
// connection is open.
func TestManagedIdle(t *testing.T) {
	h := managedServer(t, "k1", time.Hour)
	c, err := DialManaged(h.sock, "k1")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		h.srv.mu.Lock()
		open := h.srv.openConns
		h.srv.mu.Unlock()
		if open == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the connection was not accepted")
		}
	}
	if h.srv.StopIfIdle() {
		t.Fatal("StopIfIdle stopped a tracer with a connection open")
	}
	c.Close()
	for deadline := time.Now().Add(5 * time.Second); !h.srv.StopIfIdle(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("StopIfIdle never stopped the idle tracer")
		}
	}
	if err := recv(t, h.served, "Serve to return"); err != nil {
		t.Errorf("Serve: %v", err)
	}
	h.served <- nil // for the cleanup

	// And by itself once the idle timeout passes.
	timed := managedServer(t, "k1", 10*time.Millisecond)
	if err := recv(t, timed.served, "Serve to return once idle"); err != nil {
		t.Errorf("Serve: %v", err)
	}
	timed.served <- nil
	if _, err := DialManaged(timed.sock, "k1"); err == nil {
		t.Error("the idle tracer still listens")
	}
}
