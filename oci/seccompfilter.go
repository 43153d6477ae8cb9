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
	"golang.org/x/net/bpf"
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
	rules := map[uint32][]compiledRule{} // by syscall number, in profile order
	actions := map[uint32]uint32{}
	for i, rule := range sc.Syscalls {
		action, err := ruleAction(rule)
		if err != nil {
			return nil, fmt.Errorf("%w: rule %d: %v", ErrFilterUnsupported, i, err)
		}
		conds, err := ruleConditions(rule.Args)
		if err != nil {
			return nil, fmt.Errorf("%w: rule %d: %v", ErrFilterUnsupported, i, err)
		}
		for _, name := range rule.Names {
			nr, known := syscallNr(name)
			if !known {
				continue
			}
			if a, seen := actions[nr]; seen && a != action {
				return nil, fmt.Errorf("%w: %s has two actions", ErrFilterUnsupported, name)
			}
			actions[nr] = action
			rules[nr] = append(rules[nr], compiledRule{action: action, conds: conds})
		}
	}
	nrs := make([]uint32, 0, len(rules))
	for nr := range rules {
		nrs = append(nrs, nr)
	}
	slices.Sort(nrs)
	highest := uint32(0)
	if len(nrs) > 0 {
		highest = nrs[len(nrs)-1]
	}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: audit, SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_KILL_THREAD},
		bpf.LoadAbsolute{Off: 0, Size: 4}, // seccomp_data.nr
		bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: highest, SkipFalse: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(syscall.ENOSYS)},
	}
	// The chunks' bodies, then the range checks that jump to them.
	var bodies [][]bpf.Instruction
	var lasts []uint32
	for c := 0; c < len(nrs); c += chunkSize {
		chunk := nrs[c:min(c+chunkSize, len(nrs))]
		var body []bpf.Instruction
		for _, nr := range chunk {
			block, err := syscallBlock(rules[nr], deny)
			if err != nil {
				return nil, fmt.Errorf("oci: compile the seccomp profile: syscall %d: %w", nr, err)
			}
			body = append(body, bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipFalse: uint8(len(block))})
			body = append(body, block...)
		}
		bodies = append(bodies, append(body, bpf.RetConstant{Val: deny}))
		lasts = append(lasts, chunk[len(chunk)-1])
	}
	// Range check k sits at 2k past the dispatch's start; its body after
	// every check and the bodies before it.
	dispatch := 2*len(bodies) + 1
	offset := 0
	for k, body := range bodies {
		at := 2*k + 1 // the ja's index within the dispatch
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: lasts[k], SkipTrue: 1},
			bpf.Jump{Skip: uint32(dispatch - at - 1 + offset)})
		offset += len(body)
	}
	prog = append(prog, bpf.RetConstant{Val: deny})
	for _, body := range bodies {
		prog = append(prog, body...)
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("oci: assemble the seccomp program: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return initseccomp.Encode(filter), nil
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

// compiledRule is one rule of one syscall: its action when every condition
// holds.
type compiledRule struct {
	action uint32
	conds  []specs.LinuxSeccompArg
}

// syscallBlock is the code of one syscall's rules, entered with its number
// matched: each rule in turn, its first failing condition going on to the
// next; an unconditional rule decides alone; none holding, deny.
func syscallBlock(rules []compiledRule, deny uint32) ([]bpf.Instruction, error) {
	var block []bpf.Instruction
	for _, r := range rules {
		if len(r.conds) == 0 {
			return []bpf.Instruction{bpf.RetConstant{Val: r.action}}, nil
		}
	}
	for _, r := range rules {
		var code []bpf.Instruction
		var fails []int // jumps whose false branch fails the rule
		for _, c := range r.conds {
			code, fails = appendCondition(code, fails, c)
		}
		code = append(code, bpf.RetConstant{Val: r.action})
		for _, i := range fails {
			skip := len(code) - 1 - i // to the instruction after the rule
			if skip > 255 {
				return nil, errors.New("a rule too long for a BPF jump")
			}
			j := code[i].(bpf.JumpIf)
			j.SkipFalse = uint8(skip)
			code[i] = j
		}
		block = append(block, code...)
	}
	block = append(block, bpf.RetConstant{Val: deny})
	if len(block) > 255 {
		return nil, errors.New("rules too long for a BPF jump")
	}
	return block, nil
}

// appendCondition adds the test of one condition on a 64-bit argument, as
// two 32-bit halves: it falls through when the condition holds, and every
// jump it lists in fails leaves the rule on its false branch.
func appendCondition(code []bpf.Instruction, fails []int, c specs.LinuxSeccompArg) ([]bpf.Instruction, []int) {
	lo, hi := argOffsets(c.Index)
	vhi, vlo := uint32(c.Value>>32), uint32(c.Value)
	fail := func(j bpf.JumpIf) {
		fails = append(fails, len(code))
		code = append(code, j)
	}
	ld := func(off uint32) { code = append(code, bpf.LoadAbsolute{Off: off, Size: 4}) }
	switch c.Op {
	case specs.OpEqualTo:
		ld(hi)
		fail(bpf.JumpIf{Cond: bpf.JumpEqual, Val: vhi})
		ld(lo)
		fail(bpf.JumpIf{Cond: bpf.JumpEqual, Val: vlo})
	case specs.OpNotEqual:
		// Holds when the high halves differ (skip the low test).
		ld(hi)
		code = append(code, bpf.JumpIf{Cond: bpf.JumpEqual, Val: vhi, SkipFalse: 2})
		ld(lo)
		fail(bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: vlo})
	case specs.OpMaskedEqual: // (arg & Value) == ValueTwo
		mhi, mlo := vhi, vlo
		dhi, dlo := uint32(c.ValueTwo>>32), uint32(c.ValueTwo)
		ld(hi)
		code = append(code, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: mhi})
		fail(bpf.JumpIf{Cond: bpf.JumpEqual, Val: dhi})
		ld(lo)
		code = append(code, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: mlo})
		fail(bpf.JumpIf{Cond: bpf.JumpEqual, Val: dlo})
	default: // the orderings: decided by the high halves unless equal
		ld(hi)
		var lowTest bpf.JumpTest
		switch c.Op {
		case specs.OpLessThan, specs.OpLessEqual:
			// hi > vhi fails; hi < vhi holds (skip to past the low test).
			fail(bpf.JumpIf{Cond: bpf.JumpLessOrEqual, Val: vhi})
			code = append(code, bpf.JumpIf{Cond: bpf.JumpEqual, Val: vhi, SkipFalse: 2})
			lowTest = bpf.JumpLessThan
			if c.Op == specs.OpLessEqual {
				lowTest = bpf.JumpLessOrEqual
			}
		default: // OpGreaterThan, OpGreaterEqual
			fail(bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: vhi})
			code = append(code, bpf.JumpIf{Cond: bpf.JumpEqual, Val: vhi, SkipFalse: 2})
			lowTest = bpf.JumpGreaterThan
			if c.Op == specs.OpGreaterEqual {
				lowTest = bpf.JumpGreaterOrEqual
			}
		}
		ld(lo)
		fail(bpf.JumpIf{Cond: lowTest, Val: vlo})
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

// ruleConditions checks a rule's argument conditions: the comparisons
// libseccomp has, on arguments 0-5.
func ruleConditions(args []specs.LinuxSeccompArg) ([]specs.LinuxSeccompArg, error) {
	for _, a := range args {
		switch {
		case a.Index > 5:
			return nil, fmt.Errorf("argument %d", a.Index)
		case !slices.Contains([]specs.LinuxSeccompOperator{specs.OpNotEqual, specs.OpLessThan, specs.OpLessEqual,
			specs.OpEqualTo, specs.OpGreaterEqual, specs.OpGreaterThan, specs.OpMaskedEqual}, a.Op):
			return nil, fmt.Errorf("argument %d: operator %s", a.Index, a.Op)
		}
	}
	return args, nil
}
