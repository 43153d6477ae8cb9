// Package initseccomp carries a run's seccomp filter from hookbox to
// hookbox-init. hookbox compiles the run's profile into a classic BPF
// program (oci.SeccompFilter) and writes it into the run's read-only config
// dir; the OCI spec names it in hookbox-init's environment (EnvName) and
// holds no profile of its own. hookbox-init installs the program on itself,
// on every thread, before it starts the engine, and refuses to start the
// engine when it cannot: the engine and everything it starts run under it,
// and nothing can take a seccomp filter away.
//
// runc builds the same profile into a program with libseccomp at every
// start, which cost 4-5 ms of a trivial run's task create and start on a
// 2-vCPU VM (docs/architecture.md); installing a program already built
// costs one syscall.
//
// The file is the program as the kernel takes it: struct sock_filter
// entries (u16 code, u8 jt, u8 jf, u32 k) in the host's byte order.
package initseccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// EnvName is the variable that gives hookbox-init the path of the filter
// (Path in a run). hookbox-init removes it from the engine's environment.
const EnvName = "HOOKBOX_INIT_SECCOMP"

// FileName is the filter's name in the run's config dir, and Path where
// the container sees it (render.ConfigDir + "/" + FileName).
const (
	FileName = "seccomp.bpf"
	Path     = "/hookbox/etc/" + FileName
)

// maxInstructions is the kernel's limit on one classic BPF program
// (BPF_MAXINSNS).
const maxInstructions = 4096

// instructionSize is the size of struct sock_filter.
const instructionSize = 8

// Expected returns the filter's path named in environ, or "", and environ
// without the variable: the engine must not see it.
func Expected(environ []string) (path string, rest []string) {
	rest = make([]string, 0, len(environ))
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, EnvName+"="); ok {
			path = v
			continue
		}
		rest = append(rest, kv)
	}
	return path, rest
}

// Encode returns prog as the filter file holds it.
func Encode(prog []unix.SockFilter) []byte {
	out := make([]byte, 0, len(prog)*instructionSize)
	for _, ins := range prog {
		out = binary.NativeEndian.AppendUint16(out, ins.Code)
		out = append(out, ins.Jt, ins.Jf)
		out = binary.NativeEndian.AppendUint32(out, ins.K)
	}
	return out
}

// Decode reads a filter file's program.
func Decode(data []byte) ([]unix.SockFilter, error) {
	n := len(data) / instructionSize
	switch {
	case len(data)%instructionSize != 0:
		return nil, fmt.Errorf("%d bytes is not a whole number of %d-byte BPF instructions", len(data), instructionSize)
	case n == 0:
		return nil, errors.New("the program is empty")
	case n > maxInstructions:
		return nil, fmt.Errorf("%d instructions, more than the kernel's %d", n, maxInstructions)
	}
	prog := make([]unix.SockFilter, n)
	for i := range prog {
		b := data[i*instructionSize:]
		prog[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.NativeEndian.Uint32(b[4:])}
	}
	return prog, nil
}

// Load reads the filter at path and installs it on every thread of the
// calling process (SECCOMP_FILTER_FLAG_TSYNC), setting no_new_privs first
// as the kernel requires of a process without CAP_SYS_ADMIN. The filter
// then holds for every process the caller starts.
func Load(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("seccomp filter: %w", err)
	}
	prog, err := Decode(data)
	if err != nil {
		return fmt.Errorf("seccomp filter %s: %w", path, err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp filter: set no_new_privs: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	// With TSYNC a positive return is the id of a thread that could not
	// take the filter; none of the process's threads has it then.
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	switch {
	case errno != 0:
		return fmt.Errorf("seccomp filter %s: install: %w", path, errno)
	case r != 0:
		return fmt.Errorf("seccomp filter %s: thread %d could not take it", path, r)
	}
	return nil
}
