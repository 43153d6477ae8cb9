package oci

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/internal/initseccomp"
	"hookbox.dev/hookbox/render"
)

// AnnotationSeccompFilter is the sha256 of the seccomp program hookbox-init
// installs, on a spec whose profile moved there (SeccompInInit).
const AnnotationSeccompFilter = "dev.hookbox.seccomp-filter"

// ErrFilterUnsupported is wrapped by SeccompFilter's errors for a profile
// it cannot express as runc would; runc then builds that profile itself.
var ErrFilterUnsupported = errors.New("oci: the seccomp profile has a form hookbox does not compile")

// SeccompInInit moves s's seccomp profile out of the spec into a program
// that hookbox-init installs before it starts the engine (package
// initseccomp): it returns the program, for the run's config dir, names its
// path in the init's environment and records its digest as an annotation.
// A spec whose process is not hookbox-init, or whose profile SeccompFilter
// does not compile, keeps its profile for runc, and the program is nil.
func SeccompInInit(s *specs.Spec) ([]byte, error) {
	if s.Linux == nil || s.Linux.Seccomp == nil || s.Process == nil || len(s.Process.Args) == 0 || s.Process.Args[0] != render.InitPath {
		return nil, nil
	}
	prog, err := SeccompFilter(s.Linux.Seccomp)
	if errors.Is(err, ErrFilterUnsupported) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(prog)
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[AnnotationSeccompFilter] = "sha256:" + hex.EncodeToString(sum[:])
	s.Process.Env = append(s.Process.Env, initseccomp.EnvName+"="+initseccomp.Path)
	s.Linux.Seccomp = nil
	return prog, nil
}

// SeccompFilter compiles sc into the classic BPF program the kernel runs,
// with the meaning runc and libseccomp give it: the profile's native
// architecture only, every other ABI killing the calling thread (the
// bad-architecture action); a syscall number beyond the highest the profile
// names (newer than the profile) failing with ENOSYS, as runc's own stub
// does, so that a program can fall back; each rule's names taking its
// action when all its argument conditions hold; the rest the default
// action. Names this architecture's table lacks are left out, as libseccomp
// does. The result is initseccomp's file format.
//
// The program finds a syscall's rules in a few steps instead of comparing
// it with every number in turn: the numbers are sorted and split into
// chunks of chunkSize, and a chain of range checks picks the chunk. Every
// syscall's rules are in one block, so no rule's argument loads are ever
// read as a syscall number by another's comparison.
func SeccompFilter(sc *specs.LinuxSeccomp) ([]byte, error) {
	native, ok := nativeArch[runtime.GOARCH]
	audit, hasAudit := auditArch[runtime.GOARCH]
	if !ok || !hasAudit || len(nativeSyscalls) == 0 {
		return nil, fmt.Errorf("%w: no syscall table for %s", ErrFilterUnsupported, runtime.GOARCH)
	}
	if !slices.Equal(sc.Architectures, []specs.Arch{native}) {
		return nil, fmt.Errorf("%w: architectures %v, not the native %s alone", ErrFilterUnsupported, sc.Architectures, native)
	}
	if len(sc.Flags) > 0 || sc.ListenerPath != "" {
		return nil, fmt.Errorf("%w: flags or a listener", ErrFilterUnsupported)
	}
	if sc.DefaultAction != specs.ActErrno || (sc.DefaultErrnoRet != nil && *sc.DefaultErrnoRet != uint(syscall.EPERM)) {
		return nil, fmt.Errorf("%w: default action %s, not EPERM", ErrFilterUnsupported, sc.DefaultAction)
	}
	deny := unix.SECCOMP_RET_ERRNO | uint32(syscall.EPERM)
	// Each syscall's action and conditions (one list per rule, in profile
	// order), by number.
	var table [maxSyscallNr + 1]syscallRules
	var nrs []uint32
	for i, rule := range sc.Syscalls {
		action, err := ruleAction(rule)
		if err == nil {
			err = checkConditions(rule.Args)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: rule %d: %v", ErrFilterUnsupported, i, err)
		}
		conds := rule.Args
		for _, name := range rule.Names {
			nr, known := syscallNr(name)
			if !known {
				continue
			}
			if nr > maxSyscallNr {
				return nil, fmt.Errorf("%w: %s is syscall %d, beyond %d", ErrFilterUnsupported, name, nr, maxSyscallNr)
			}
			e := &table[nr]
			switch {
			case !e.listed:
				e.listed, e.action = true, action
				nrs = append(nrs, nr)
			case e.action != action:
				return nil, fmt.Errorf("%w: %s has two actions", ErrFilterUnsupported, name)
			}
			if len(conds) == 0 {
				e.always = true
			} else {
				e.conds = append(e.conds, conds)
			}
		}
	}
	slices.Sort(nrs)
	highest := uint32(0)
	if len(nrs) > 0 {
		highest = nrs[len(nrs)-1]
	}
	prog := []unix.SockFilter{
		ldAbs(4), // seccomp_data.arch
		jump(unix.BPF_JEQ, audit, 1, 0),
		ret(unix.SECCOMP_RET_KILL_THREAD),
		ldAbs(0), // seccomp_data.nr
		jump(unix.BPF_JGT, highest, 0, 1),
		ret(unix.SECCOMP_RET_ERRNO | uint32(syscall.ENOSYS)),
	}
	// The chunks' bodies, then the range checks that jump to them.
	var bodies [][]unix.SockFilter
	var lasts []uint32
	for c := 0; c < len(nrs); c += chunkSize {
		chunk := nrs[c:min(c+chunkSize, len(nrs))]
		body := make([]unix.SockFilter, 0, 2*len(chunk)+1)
		for _, nr := range chunk {
			at := len(body)
			body = append(body, jump(unix.BPF_JEQ, nr, 0, 0))
			var err error
			if body, err = appendSyscall(body, &table[nr], deny); err != nil {
				return nil, fmt.Errorf("oci: compile the seccomp profile: syscall %d: %w", nr, err)
			}
			body[at].Jf = uint8(len(body) - at - 1) // past the syscall's code
		}
		bodies = append(bodies, append(body, ret(deny)))
		lasts = append(lasts, chunk[len(chunk)-1])
	}
	// Range check k sits at 2k past the dispatch's start; its body after
	// every check and the bodies before it.
	dispatch := 2*len(bodies) + 1
	offset := 0
	for k, body := range bodies {
		at := 2*k + 1 // the ja's index within the dispatch
		prog = append(prog,
			jump(unix.BPF_JGT, lasts[k], 1, 0),
			unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JA, K: uint32(dispatch - at - 1 + offset)})
		offset += len(body)
	}
	prog = append(prog, ret(deny))
	for _, body := range bodies {
		prog = append(prog, body...)
	}
	return initseccomp.Encode(prog), nil
}

// The instructions the program is made of (classic BPF, linux/filter.h).
func ldAbs(off uint32) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
}
func jump(op uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_JMP | op | unix.BPF_K, Jt: jt, Jf: jf, K: k}
}
func ret(k uint32) unix.SockFilter { return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: k} }
func and(k uint32) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: k}
}

// chunkSize is how many syscall numbers one range check of the program
// covers.
const chunkSize = 16

// auditArch is the kernel's AUDIT_ARCH_* of each nativeArch.
var auditArch = map[string]uint32{
	"amd64": unix.AUDIT_ARCH_X86_64, "arm64": unix.AUDIT_ARCH_AARCH64, "riscv64": unix.AUDIT_ARCH_RISCV64,
	"s390x": unix.AUDIT_ARCH_S390X, "loong64": unix.AUDIT_ARCH_LOONGARCH64,
}

// syscallNumber is one entry of a syscall table (zsysnum_<arch>.go).
type syscallNumber struct {
	Name string
	Nr   uint32
}

// syscallNr looks a name up in the native table.
func syscallNr(name string) (uint32, bool) {
	i := sort.Search(len(nativeSyscalls), func(i int) bool { return nativeSyscalls[i].Name >= name })
	if i < len(nativeSyscalls) && nativeSyscalls[i].Name == name {
		return nativeSyscalls[i].Nr, true
	}
	return 0, false
}

// syscallRules is what the profile says of one syscall: its action,
// always or when one of conds (a rule's conditions, all of which must hold)
// does.
type syscallRules struct {
	listed, always bool
	action         uint32
	conds          [][]specs.LinuxSeccompArg
}

// maxSyscallNr bounds the syscall numbers of the native tables.
const maxSyscallNr = 1023

// appendSyscall appends the code of one syscall's rules, entered with its
// number matched: each rule in turn, its first failing condition going on
// to the next; none holding, deny. It must fit a BPF jump (255).
func appendSyscall(code []unix.SockFilter, e *syscallRules, deny uint32) ([]unix.SockFilter, error) {
	if e.always {
		return append(code, ret(e.action)), nil
	}
	start := len(code)
	var fails []failJump
	for _, conds := range e.conds {
		fails = fails[:0]
		for _, c := range conds {
			code, fails = appendCondition(code, fails, c)
		}
		code = append(code, ret(e.action))
		for _, f := range fails {
			skip := len(code) - 1 - f.at // to the instruction after the rule
			if skip > 255 {
				return nil, errors.New("a rule too long for a BPF jump")
			}
			if f.onTrue {
				code[f.at].Jt = uint8(skip)
			} else {
				code[f.at].Jf = uint8(skip)
			}
		}
	}
	code = append(code, ret(deny))
	if len(code)-start > 255 {
		return nil, errors.New("rules too long for a BPF jump")
	}
	return code, nil
}

// failJump is a jump of a rule whose branch (true, or false) fails the
// rule: its offset is known once the rule is complete.
type failJump struct {
	at     int
	onTrue bool
}

// appendCondition adds the test of one condition on a 64-bit argument, as
// two 32-bit halves: it falls through when the condition holds, and every
// jump it lists in fails leaves the rule. Classic BPF compares with =, >,
// >= and a bit test; the other orderings take the opposite branch.
func appendCondition(code []unix.SockFilter, fails []failJump, c specs.LinuxSeccompArg) ([]unix.SockFilter, []failJump) {
	lo, hi := argOffsets(c.Index)
	vhi, vlo := uint32(c.Value>>32), uint32(c.Value)
	// holdsIf: the condition holds when op's test is true (false: when
	// it is false); the other branch fails the rule.
	test := func(op uint16, k uint32, holdsIf bool) {
		fails = append(fails, failJump{at: len(code), onTrue: !holdsIf})
		code = append(code, jump(op, k, 0, 0))
	}
	ld := func(off uint32) { code = append(code, ldAbs(off)) }
	// decidedHigh: the high halves differ, so the high test alone decided
	// (skip the low half's load and test).
	decidedHigh := func() { code = append(code, jump(unix.BPF_JEQ, vhi, 0, 2)) }
	switch c.Op {
	case specs.OpEqualTo:
		ld(hi)
		test(unix.BPF_JEQ, vhi, true)
		ld(lo)
		test(unix.BPF_JEQ, vlo, true)
	case specs.OpNotEqual:
		ld(hi)
		decidedHigh()
		ld(lo)
		test(unix.BPF_JEQ, vlo, false)
	case specs.OpMaskedEqual: // (arg & Value) == ValueTwo
		ld(hi)
		code = append(code, and(vhi))
		test(unix.BPF_JEQ, uint32(c.ValueTwo>>32), true)
		ld(lo)
		code = append(code, and(vlo))
		test(unix.BPF_JEQ, uint32(c.ValueTwo), true)
	case specs.OpLessThan, specs.OpLessEqual:
		ld(hi)
		test(unix.BPF_JGT, vhi, false) // high above: fails
		decidedHigh()                  // high below: holds
		ld(lo)
		if c.Op == specs.OpLessThan {
			test(unix.BPF_JGE, vlo, false)
		} else {
			test(unix.BPF_JGT, vlo, false)
		}
	default: // OpGreaterThan, OpGreaterEqual
		ld(hi)
		test(unix.BPF_JGE, vhi, true) // high below: fails
		decidedHigh()                 // high above: holds
		ld(lo)
		if c.Op == specs.OpGreaterThan {
			test(unix.BPF_JGT, vlo, true)
		} else {
			test(unix.BPF_JGE, vlo, true)
		}
	}
	return code, fails
}

// argOffsets are where argument i's low and high 32 bits are in struct
// seccomp_data (args at 16, eight bytes each, in the host's byte order).
func argOffsets(i uint) (lo, hi uint32) {
	off := 16 + 8*uint32(i)
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 {
		return off, off + 4
	}
	return off + 4, off
}

// ruleAction is a rule's action as the kernel takes it: allow, or fail
// with its errno (EPERM when it names none, as runc does).
func ruleAction(rule specs.LinuxSyscall) (uint32, error) {
	switch rule.Action {
	case specs.ActAllow:
		return unix.SECCOMP_RET_ALLOW, nil
	case specs.ActErrno:
		errno := uint(syscall.EPERM)
		if rule.ErrnoRet != nil {
			errno = *rule.ErrnoRet
		}
		if errno == 0 || errno > unix.SECCOMP_RET_DATA {
			return 0, fmt.Errorf("errno %d", errno)
		}
		return unix.SECCOMP_RET_ERRNO | uint32(errno), nil
	}
	return 0, fmt.Errorf("action %s", rule.Action)
}

// checkConditions refuses argument conditions other than the comparisons
// libseccomp has, on arguments 0-5.
func checkConditions(args []specs.LinuxSeccompArg) error {
	for _, a := range args {
		switch {
		case a.Index > 5:
			return fmt.Errorf("argument %d", a.Index)
		case !slices.Contains([]specs.LinuxSeccompOperator{specs.OpNotEqual, specs.OpLessThan, specs.OpLessEqual,
			specs.OpEqualTo, specs.OpGreaterEqual, specs.OpGreaterThan, specs.OpMaskedEqual}, a.Op):
			return fmt.Errorf("argument %d: operator %s", a.Index, a.Op)
		}
	}
	return nil
}
