package tracehelper

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"os"
	"strings"
	"time"

	"hookbox.dev/hookbox/ebpf"
)

// A managed tracer is `hookbox tracer serve --managed`: a helper that a
// root hookbox starts itself on its first traced run and that later runs
// reuse, so the BPF programs stay loaded between runs (docs/architecture.md
// "Exec tracer"). It speaks this package's protocol with three additions:
// its socket is root's only (ListenPrivate), it refuses peers other than
// uid 0 (CodeForbidden) and requests for another key (CodeBadKey), and it
// exits once idle (ManagedOptions.IdleTimeout).

// DefaultIdleTimeout is how long a managed tracer serves no connection
// before it exits.
const DefaultIdleTimeout = 5 * time.Minute

// KeyEnv, when set to 1–64 characters of [0-9a-z], replaces ManagedKey:
// integration tests play an upgrade with it. Nothing else should set it.
const KeyEnv = "HOOKBOX_TEST_TRACER_KEY"

// validKey: 1–64 characters of [0-9a-z] (a check, not a regexp: one
// compiled at init costs every hookbox command ~0.1 ms).
func validKey(k string) bool {
	return len(k) >= 1 && len(k) <= 64 && strings.Trim(k, "0123456789abcdefghijklmnopqrstuvwxyz") == ""
}

// ManagedKey names the managed tracer this hookbox may use: the first 128
// bits, in hex, of the sha256 of the embedded BPF objects and the protocol
// version. A hookbox with other programs or another protocol gets another
// key, and so its own tracer, never a stale one.
func ManagedKey() string {
	if k := os.Getenv(KeyEnv); validKey(k) {
		return k
	}
	objects := ebpf.ObjectsDigest()
	h := sha256.New()
	h.Write(objects[:])
	h.Write(binary.LittleEndian.AppendUint64(nil, Version))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// ManagedOptions make a Server a managed tracer.
type ManagedOptions struct {
	// Key is the tracer's ManagedKey: a request naming another is refused.
	Key string
	// IdleTimeout ends Serve once no connection has been open for that
	// long (0: DefaultIdleTimeout).
	IdleTimeout time.Duration
}

// NewManagedServer is NewServer for a managed tracer (see ManagedOptions).
func NewManagedServer(tracer Tracer, logw io.Writer, opts ManagedOptions) *Server {
	s := NewServer(tracer, logw)
	s.key = opts.Key
	s.rootOnly = true
	s.idle = opts.IdleTimeout
	if s.idle <= 0 {
		s.idle = DefaultIdleTimeout
	}
	return s
}
