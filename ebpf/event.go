package ebpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
)

// Kind says what an Event records.
type Kind string

const (
	// KindExec is a successful exec (sched_process_exec).
	KindExec Kind = "exec"
	// KindFailed is an execve/execveat that returned an error.
	KindFailed Kind = "failed"
	// KindDenied is an exec the BPF LSM refused in enforce mode
	// (bprm_check_security): the call failed with EPERM and nothing ran.
	// Filename is the path the kernel was asked for, Dev and Ino the file
	// refused (for a #! script, the script or its interpreter, whichever
	// was not allowed); no argv.
	KindDenied Kind = "denied"
	// KindPtraceDenied is a ptrace-class access the BPF LSM refused (EPERM):
	// the task (TGID) asked for attach-strength access (Mode) to process
	// Target (ptrace attach, /proc/<pid>/mem, process_vm_*, pidfd_getfd),
	// or, with FlagTraceme, to be traced by Target.
	KindPtraceDenied Kind = "ptrace-denied"
)

// kinds are the known kinds, by wire number (enum event_kind in
// bpf/hookbox.h).
var kinds = map[uint16]Kind{1: KindExec, 2: KindFailed, 3: KindDenied, 4: KindPtraceDenied}

func (k Kind) known() bool {
	for _, v := range kinds {
		if k == v {
			return true
		}
	}
	return false
}

// Flags are the per-event bits the BPF programs set (enum event_flag in
// bpf/hookbox.h).
type Flags uint16

const (
	// FlagTruncated: argv was longer than Options.ArgvCap; Argv holds the
	// first ArgvCap bytes and ArgvLen the full length.
	FlagTruncated Flags = 1 << 0
	// FlagKilled: enforce queued SIGKILL before the new image ran.
	FlagKilled Flags = 1 << 1
	// FlagKillFailed: enforce wanted to kill and bpf_send_signal failed.
	FlagKillFailed Flags = 1 << 2
	// FlagArgvUnreadable: the kernel could not read argv; Argv is empty.
	FlagArgvUnreadable Flags = 1 << 3
	// FlagExeUnknown: the executed file's identity could not be read
	// (Dev and Ino are 0), or the filename could not.
	FlagExeUnknown Flags = 1 << 4
	// FlagFilenameTruncated: the filename was longer than PATH_MAX-1.
	FlagFilenameTruncated Flags = 1 << 5
	// FlagFilenameMissing: a failed exec without its filename: the call
	// was not recorded at syscall entry (the watch was armed mid-call, or
	// the entry map was full), or the string could not be read at exit.
	FlagFilenameMissing Flags = 1 << 6
	// FlagEnforced: the watch was enforcing when this exec happened.
	FlagEnforced Flags = 1 << 7
	// FlagTraceme: a KindPtraceDenied event for PTRACE_TRACEME; Target is
	// the would-be tracer.
	FlagTraceme Flags = 1 << 8
)

var flagNames = []struct {
	f    Flags
	name string
}{
	{FlagTruncated, "truncated"},
	{FlagKilled, "killed"},
	{FlagKillFailed, "kill-failed"},
	{FlagArgvUnreadable, "argv-unreadable"},
	{FlagExeUnknown, "exe-unknown"},
	{FlagFilenameTruncated, "filename-truncated"},
	{FlagFilenameMissing, "filename-missing"},
	{FlagEnforced, "enforced"},
	{FlagTraceme, "traceme"},
}

// Names lists the set flags by name, in bit order; unknown bits appear as
// "0x..".
func (f Flags) Names() []string {
	var out []string
	rest := f
	for _, n := range flagNames {
		if f&n.f != 0 {
			out = append(out, n.name)
			rest &^= n.f
		}
	}
	if rest != 0 {
		out = append(out, "0x"+strconv.FormatUint(uint64(rest), 16))
	}
	return out
}

func (f Flags) String() string { return strings.Join(f.Names(), ",") }

func parseFlags(names []string) (Flags, error) {
	var f Flags
next:
	for _, s := range names {
		for _, n := range flagNames {
			if s == n.name {
				f |= n.f
				continue next
			}
		}
		if h, ok := strings.CutPrefix(s, "0x"); ok {
			if v, err := strconv.ParseUint(h, 16, 16); err == nil {
				f |= Flags(v)
				continue
			}
		}
		return 0, fmt.Errorf("unknown event flag %q", s)
	}
	return f, nil
}

// Event is one exec, failed exec or refusal the kernel recorded for a
// watch.
type Event struct {
	Kind     Kind
	TGID     uint32 // process id after the exec
	TID      uint32 // thread that called exec (equal to TGID for KindExec)
	PPID     uint32 // real parent's tgid
	UID      uint32 // real uid, in the initial user namespace
	CgroupID uint64
	Time     uint64 // CLOCK_BOOTTIME nanoseconds
	Comm     string // task comm after the exec (at most 15 bytes)
	// Filename is what the kernel executed (KindExec: bprm->filename; a
	// #! script's path, not its interpreter's) or was asked to execute
	// (KindFailed: the syscall's filename argument). Raw bytes.
	Filename string
	// Argv is the argument vector as the kernel holds it, split on NUL:
	// empty arguments are preserved. When Truncated, it holds the first
	// ArgvCap bytes and its last element may be cut.
	Argv      [][]byte
	ArgvLen   uint32 // full argv length in bytes, NULs included
	Truncated bool
	// Dev and Ino identify the executed file (mm->exe_file; KindDenied:
	// the file refused); Dev in the stat(2) st_dev encoding. Zero for
	// KindFailed, KindPtraceDenied and FlagExeUnknown.
	Dev    uint64
	Ino    uint64
	Errno  syscall.Errno // KindFailed; EPERM for the refusals
	Killed bool          // enforce killed this exec before it ran
	// Target and Mode (KindPtraceDenied): the other process's tgid, as
	// the caller's pid namespace does not see it but the host does, and
	// the PTRACE_MODE_* bits asked for (0 for FlagTraceme).
	Target uint32
	Mode   uint32
	Flags  Flags // every bit the kernel set, Truncated and Killed included
}

// File is the executed file's identity.
func (e Event) File() FileID { return FileID{Dev: e.Dev, Ino: e.Ino} }

// ArgvStrings returns Argv as strings (raw bytes, no validation).
func (e Event) ArgvStrings() []string {
	out := make([]string, len(e.Argv))
	for i, a := range e.Argv {
		out[i] = string(a)
	}
	return out
}

// Wire layout of struct event in bpf/hookbox.h (little-endian). The Go test
// TestEventLayout checks these offsets against the bpf2go-generated type.
const (
	offCookie       = 0
	offCgroupID     = 8
	offKtime        = 16
	offIno          = 24
	offDev          = 32
	offTGID         = 36
	offTID          = 40
	offPPID         = 44
	offUID          = 48
	offErr          = 52
	offArgvLen      = 56
	offArgvSize     = 60
	offFilenameSize = 64
	offTarget       = 68
	offMode         = 72
	offKind         = 76
	offFlags        = 78
	offComm         = 80
	commLen         = 16
	offFilename     = offComm + commLen
	filenameCap     = 4096
	eventHeaderSize = offFilename + filenameCap // sizeof(struct event); argv follows

	wireKindExec         = 1
	wireKindFailed       = 2
	wireKindDenied       = 3
	wireKindPtraceDenied = 4
)

var errShortRecord = errors.New("ring buffer record shorter than an event header")

// recordCookie returns the watch cookie of a raw record, if it has one.
func recordCookie(raw []byte) (uint64, bool) {
	if len(raw) < offCookie+8 {
		return 0, false
	}
	return binary.LittleEndian.Uint64(raw[offCookie:]), true
}

// decodeEvent parses one ring buffer record. It copies what it keeps: raw
// may be reused by the caller.
func decodeEvent(raw []byte) (Event, error) {
	if len(raw) < eventHeaderSize {
		return Event{}, fmt.Errorf("%w: %d bytes, want at least %d", errShortRecord, len(raw), eventHeaderSize)
	}
	le := binary.LittleEndian
	var e Event
	k := le.Uint16(raw[offKind:])
	var ok bool
	if e.Kind, ok = kinds[k]; !ok {
		return Event{}, fmt.Errorf("unknown event kind %d", k)
	}
	e.CgroupID = le.Uint64(raw[offCgroupID:])
	e.Time = le.Uint64(raw[offKtime:])
	e.Ino = le.Uint64(raw[offIno:])
	e.TGID = le.Uint32(raw[offTGID:])
	e.TID = le.Uint32(raw[offTID:])
	e.PPID = le.Uint32(raw[offPPID:])
	e.UID = le.Uint32(raw[offUID:])
	if e.Kind != KindExec {
		e.Errno = syscall.Errno(int32(le.Uint32(raw[offErr:])))
	}
	if e.Kind == KindPtraceDenied {
		e.Target = le.Uint32(raw[offTarget:])
		e.Mode = le.Uint32(raw[offMode:])
	}
	e.Flags = Flags(le.Uint16(raw[offFlags:]))
	e.Truncated = e.Flags&FlagTruncated != 0
	e.Killed = e.Flags&FlagKilled != 0
	if (e.Kind == KindExec || e.Kind == KindDenied) && e.Flags&FlagExeUnknown == 0 {
		e.Dev = devFromKernel(le.Uint32(raw[offDev:]))
	}

	comm := raw[offComm : offComm+commLen]
	if i := bytes.IndexByte(comm, 0); i >= 0 {
		comm = comm[:i]
	}
	e.Comm = string(comm)

	fsize := le.Uint32(raw[offFilenameSize:])
	if fsize >= filenameCap {
		return Event{}, fmt.Errorf("filename size %d exceeds %d", fsize, filenameCap-1)
	}
	e.Filename = string(raw[offFilename : offFilename+int(fsize)])

	e.ArgvLen = le.Uint32(raw[offArgvLen:])
	asize := le.Uint32(raw[offArgvSize:])
	if int(asize) > len(raw)-eventHeaderSize {
		return Event{}, fmt.Errorf("argv size %d exceeds the record's %d bytes", asize, len(raw)-eventHeaderSize)
	}
	if asize > e.ArgvLen {
		return Event{}, fmt.Errorf("argv size %d exceeds argv length %d", asize, e.ArgvLen)
	}
	e.Argv = SplitArgv(raw[eventHeaderSize : eventHeaderSize+int(asize)])
	return e, nil
}

// SplitArgv splits a NUL-terminated argument block (as in
// /proc/<pid>/cmdline) into its arguments, preserving empty ones:
// "a\x00\x00b\x00" is ["a", "", "b"]. A block that does not end in NUL (a
// truncated one) keeps its cut last element. The result does not alias b.
func SplitArgv(b []byte) [][]byte {
	if len(b) == 0 {
		return nil
	}
	b = bytes.Clone(b)
	b = bytes.TrimSuffix(b, []byte{0})
	return bytes.Split(b, []byte{0})
}
