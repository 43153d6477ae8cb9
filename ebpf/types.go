package ebpf

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrNotSupported: this host (kernel, privileges, mounts) cannot run the
	// tracer. Errors wrapping it say what is missing; callers report the
	// trace as unchecked, never as empty.
	ErrNotSupported = errors.New("exec tracer not supported here")
	// ErrClosed: the Tracer was closed.
	ErrClosed = errors.New("exec tracer closed")
	// ErrWatched: the cgroup is already watched by this Tracer.
	ErrWatched = errors.New("cgroup already watched")
	// ErrInvalid: an option or policy the tracer cannot apply.
	ErrInvalid = errors.New("invalid tracer option")
)

// Limits and defaults.
const (
	DefaultArgvCap      = 4096
	MinArgvCap          = 256
	MaxArgvCap          = 32 << 10
	DefaultRingSize     = 4 << 20
	DefaultPollInterval = 50 * time.Millisecond
	// MaxWatches is how many cgroups one Tracer can watch at once.
	MaxWatches = 1024
	// maxAllowedFiles is the capacity of allowed_files, shared by all
	// watches.
	maxAllowedFiles = 65536
)

// Options configure Load. Zero values take the defaults.
type Options struct {
	// ArgvCap is how many bytes of argv each exec event keeps (NULs
	// included), MinArgvCap..MaxArgvCap; default DefaultArgvCap. Longer
	// argvs are truncated and flagged.
	ArgvCap int
	// RingSize is the ring buffer size in bytes: a power of two that holds
	// at least one exec event; default DefaultRingSize. An exec event
	// occupies 4,208 bytes + ArgvCap (8.1 KiB by default: ~500 events in
	// the default ring) until the consumer reads it; a failed exec or a
	// refusal 4,208 bytes.
	RingSize int
	// PollInterval is the consumer's read deadline while a watch is armed:
	// the BPF side wakes the consumer only once the ring is a quarter
	// full, so events wait up to this long in the ring (the latency of a
	// live trace) unless a burst fills it faster. Default
	// DefaultPollInterval.
	PollInterval time.Duration
}

func (o Options) withDefaults() (Options, error) {
	if o.ArgvCap == 0 {
		o.ArgvCap = DefaultArgvCap
	}
	if o.RingSize == 0 {
		o.RingSize = DefaultRingSize
	}
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	switch {
	case o.ArgvCap < MinArgvCap || o.ArgvCap > MaxArgvCap:
		return o, fmt.Errorf("%w: ArgvCap %d outside %d..%d", ErrInvalid, o.ArgvCap, MinArgvCap, MaxArgvCap)
	case o.RingSize < 4096 || o.RingSize&(o.RingSize-1) != 0 || o.RingSize > 1<<30:
		return o, fmt.Errorf("%w: RingSize %d is not a power of two between 4 KiB and 1 GiB", ErrInvalid, o.RingSize)
	case o.RingSize < recordSize(o.ArgvCap):
		return o, fmt.Errorf("%w: RingSize %d cannot hold one exec event of %d bytes (ArgvCap %d)", ErrInvalid, o.RingSize, recordSize(o.ArgvCap), o.ArgvCap)
	case o.PollInterval < 0:
		return o, fmt.Errorf("%w: negative PollInterval", ErrInvalid)
	}
	return o, nil
}

// Policy is what a watch does besides recording. Every watch also has
// ptrace-class access from its cgroup denied where the BPF LSM is active
// (Tracer.LSM).
type Policy struct {
	// Enforce refuses (BPF LSM: EPERM from exec) or else kills (SIGKILL
	// before the new image runs) every exec in the cgroup whose file is not
	// in Allowed.
	Enforce bool
	// Allowed are the executables the cgroup may run when enforcing: the
	// identity of the executed file (for a #! script, its interpreter; the
	// BPF LSM also checks the script itself, so both must be allowed).
	// Ignored without Enforce.
	Allowed []FileID
}

// Counters are the kernel's counts, summed over CPUs. The tracer-wide
// counters (Tracer.Counters) count across all watches; a watch's counters
// (in Stats) count only its cgroup.
type Counters struct {
	Seen           uint64 `json:"seen"`            // successful execs on the host (tracer-wide only)
	Matched        uint64 `json:"matched"`         // events attempted for watched cgroups
	Lost           uint64 `json:"lost"`            // events dropped: no ring buffer space
	Truncated      uint64 `json:"truncated"`       // exec events with truncated argv
	Killed         uint64 `json:"killed"`          // execs killed by enforce
	KillFailed     uint64 `json:"kill_failed"`     // execs enforce could not kill
	ReadErrors     uint64 `json:"read_errors"`     // events with an unreadable field (argv, file identity, filename)
	PendingDropped uint64 `json:"pending_dropped"` // execve calls not recorded at syscall entry (their failure would lack the filename)
	Denied         uint64 `json:"denied"`          // execs refused by the BPF LSM (enforce)
	PtraceDenied   uint64 `json:"ptrace_denied"`   // ptrace-class accesses refused by the BPF LSM
	// Missed counts runs of the tracer's BPF programs the kernel skipped
	// (recursion protection): execs that were never seen. Not attributable
	// to a cgroup.
	Missed uint64 `json:"missed"`
}

// Stats account for one watch, from Watch to Stop. The JSON form (for
// the trace's final line) uses snake_case names, the counters inline.
type Stats struct {
	Counters            // this watch's kernel counters; Missed is tracer-wide during the watch
	Delivered    uint64 `json:"delivered"`     // events decoded and queued on Events
	DecodeErrors uint64 `json:"decode_errors"` // records of this watch that could not be decoded
	// Unaccounted is Matched - Delivered - Lost - DecodeErrors when Stop
	// stopped waiting: events the kernel attempted that never arrived (a
	// BPF program still running when Stop gave up). 0 normally.
	Unaccounted uint64 `json:"unaccounted"`
	// Denies is what the kernel refused for this watch rather than only
	// recorded; all false where the BPF LSM programs are not attached
	// (enforce then kills).
	Denies Denies `json:"denies"`
}

// Denies says which accesses the BPF LSM programs refused for a watch.
type Denies struct {
	// Ptrace: attach-strength ptrace-class access from the cgroup to
	// another process fails with EPERM.
	Ptrace bool `json:"ptrace"`
	// Exec (Policy.Enforce): an exec outside Policy.Allowed fails with
	// EPERM.
	Exec bool `json:"exec"`
}

// Incomplete lists why this watch's events may not be everything that
// happened in its cgroup, by name ("lost", "missed", …); empty when the
// kernel and the consumer account for every exec. It is a fact about the
// record, not a verdict. Truncated argvs are not listed: each event says
// so (Event.Truncated).
func (s Stats) Incomplete() []string {
	var out []string
	add := func(n uint64, why string) {
		if n > 0 {
			out = append(out, why)
		}
	}
	add(s.Lost, "lost")
	add(s.Missed, "missed")
	add(s.Unaccounted, "unaccounted")
	add(s.DecodeErrors, "decode-errors")
	add(s.ReadErrors, "read-errors")
	add(s.PendingDropped, "pending-dropped")
	add(s.KillFailed, "kill-failed")
	return out
}

// recordSize is the ring space one exec event takes: the record and the
// ring's 8-byte header, rounded up to 8.
func recordSize(argvCap int) int {
	return (eventHeaderSize + argvCap + 8 + 7) &^ 7
}
