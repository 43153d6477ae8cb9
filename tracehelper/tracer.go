package tracehelper

import (
	"errors"
	"fmt"
	"sync"

	"hookbox.dev/hookbox/ebpf"
)

// Tracer is what the server needs of the exec tracer: BPFTracer in the
// helper, a fake in tests. Watch has ebpf.Tracer.Watch's contract; the
// server maps ebpf.ErrWatched to CodeBusy, ebpf.ErrInvalid to
// CodeBadRequest, and ErrTracerUnavailable, ebpf.ErrNotSupported and
// ebpf.ErrClosed to CodeTracerUnavailable.
type Tracer interface {
	Watch(cgroupID uint64, policy ebpf.Policy) (TracerWatch, error)
}

// TracerWatch is one armed cgroup, as ebpf.Watch: Events closes after
// Stop once every event is delivered; Stop is idempotent.
type TracerWatch interface {
	Events() <-chan ebpf.Event
	Stop() (ebpf.Stats, error)
}

// ErrTracerUnavailable: the helper's exec tracer could not be loaded (or
// was closed). Clients are refused with CodeTracerUnavailable.
var ErrTracerUnavailable = errors.New("exec tracer unavailable")

// BPFTracer is the helper's Tracer: one ebpf.Tracer, loaded on first use.
type BPFTracer struct {
	load func() (*ebpf.Tracer, error)
	once sync.Once
	t    *ebpf.Tracer
	err  error
}

// NewBPFTracer returns a BPFTracer that loads with opts (mounting tracefs
// first if needed) on its first Load or Watch.
func NewBPFTracer(opts ebpf.Options) *BPFTracer {
	return &BPFTracer{load: func() (*ebpf.Tracer, error) {
		// cilium/ebpf remembers a missing tracefs for the life of the
		// process: mount it before the first load.
		if err := ebpf.EnsureTracefs(); err != nil {
			return nil, err
		}
		// Best effort: without securityfs the tracer cannot tell
		// whether the BPF LSM is active and leaves its programs out.
		_ = ebpf.EnsureSecurityfs()
		return ebpf.Load(opts)
	}}
}

// Load loads the tracer if no Load has been tried yet. A failure is final
// (wrapping ErrTracerUnavailable): the host lacks something, and the
// helper must be restarted once it is fixed.
func (b *BPFTracer) Load() error {
	b.once.Do(func() {
		b.t, b.err = b.load()
		if b.err != nil {
			b.err = fmt.Errorf("%w: %w", ErrTracerUnavailable, b.err)
		}
	})
	return b.err
}

// Watch loads the tracer if needed and arms the cgroup.
func (b *BPFTracer) Watch(cgroupID uint64, policy ebpf.Policy) (TracerWatch, error) {
	if err := b.Load(); err != nil {
		return nil, err
	}
	w, err := b.t.Watch(cgroupID, policy)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// Close closes the tracer if it was loaded, ending every watch (their
// Stop returns ebpf.ErrClosed). It keeps a tracer from loading later.
func (b *BPFTracer) Close() error {
	b.once.Do(func() { b.err = fmt.Errorf("%w: closed", ErrTracerUnavailable) })
	if b.t == nil {
		return nil
	}
	return b.t.Close()
}
