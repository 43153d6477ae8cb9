package runfiles

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
)

// Bounds on what is read from an ELF file, so a hostile file cannot make
// the closure allocate without limit.
const (
	maxInterpLen  = 4096
	maxDynamicLen = 1 << 20
	maxDynStrLen  = 16 << 20
)

// elfInfo is what the loader needs to know about one ELF object.
type elfInfo struct {
	class   elf.Class
	machine elf.Machine
	typ     elf.Type
	interp  string   // PT_INTERP, "" when none
	needed  []string // DT_NEEDED, in order
	soname  string
	rpath   string // DT_RPATH, ignored by the loader when DT_RUNPATH exists
	runpath string
	// hasRunpath: DT_RUNPATH is present (even empty), which disables DT_RPATH.
	hasRunpath bool
	nodeflib   bool // DF_1_NODEFLIB: no ld.so.cache, no default directories
}

// dynamic reports whether the object involves the dynamic loader at all.
func (e *elfInfo) dynamic() bool { return e.interp != "" || len(e.needed) > 0 }

// isELF reports whether head starts with the ELF magic.
func isELF(head []byte) bool { return bytes.HasPrefix(head, []byte(elf.ELFMAG)) }

// readELF reads the program interpreter and the dynamic section the way the
// loader does: through program headers (PT_INTERP, PT_DYNAMIC) and DT_STRTAB
// mapped to a file offset through PT_LOAD, so section headers do not matter
// (and are not read: debug/elf's reading of every section header was about
// a quarter of a closure of hundreds of programs).
func readELF(r io.ReaderAt) (*elfInfo, error) {
	f, err := readProgramHeaders(r)
	if err != nil {
		return nil, err
	}
	info := &elfInfo{class: f.class, machine: f.machine, typ: f.typ}
	var dyn *elfProg
	for i, p := range f.progs {
		switch p.typ {
		case elf.PT_INTERP:
			if p.filesz == 0 || p.filesz > maxInterpLen {
				return nil, fmt.Errorf("PT_INTERP of %d bytes", p.filesz)
			}
			b := make([]byte, p.filesz)
			if err := p.readAt(r, b, 0); err != nil {
				return nil, fmt.Errorf("reading PT_INTERP: %w", err)
			}
			if i := bytes.IndexByte(b, 0); i >= 0 {
				b = b[:i]
			}
			info.interp = string(b)
		case elf.PT_DYNAMIC:
			dyn = &f.progs[i]
		}
	}
	if dyn == nil || dyn.filesz == 0 {
		return info, nil
	}
	if dyn.filesz > maxDynamicLen {
		return nil, fmt.Errorf("PT_DYNAMIC of %d bytes", dyn.filesz)
	}
	raw := make([]byte, dyn.filesz)
	if err := dyn.readAt(r, raw, 0); err != nil {
		return nil, fmt.Errorf("reading PT_DYNAMIC: %w", err)
	}
	entSize := 16
	if f.class == elf.ELFCLASS32 {
		entSize = 8
	}
	var (
		needed                 []uint64
		soname, rpath, runpath uint64
		hasSoname, hasRpath    bool
		strtab, strsz          uint64
		hasStrtab              bool
		flags1                 uint64
		order                  = f.order
	)
	for off := 0; off+entSize <= len(raw); off += entSize {
		var tag, val uint64
		if entSize == 16 {
			tag, val = order.Uint64(raw[off:]), order.Uint64(raw[off+8:])
		} else {
			tag, val = uint64(order.Uint32(raw[off:])), uint64(order.Uint32(raw[off+4:]))
		}
		switch elf.DynTag(tag) {
		case elf.DT_NULL:
			off = len(raw) // end of the dynamic array
		case elf.DT_NEEDED:
			if len(needed) < 4096 {
				needed = append(needed, val)
			}
		case elf.DT_SONAME:
			soname, hasSoname = val, true
		case elf.DT_RPATH:
			rpath, hasRpath = val, true
		case elf.DT_RUNPATH:
			runpath, info.hasRunpath = val, true
		case elf.DT_STRTAB:
			strtab, hasStrtab = val, true
		case elf.DT_STRSZ:
			strsz = val
		case elf.DT_FLAGS_1:
			flags1 = val
		}
	}
	info.nodeflib = flags1&uint64(elf.DF_1_NODEFLIB) != 0
	if len(needed) == 0 && !hasSoname && !hasRpath && !info.hasRunpath {
		return info, nil
	}
	if !hasStrtab || strsz == 0 || strsz > maxDynStrLen {
		return nil, fmt.Errorf("dynamic section without a usable string table")
	}
	seg, base, err := segmentAt(f, strtab, strsz)
	if err != nil {
		return nil, fmt.Errorf("reading DT_STRTAB: %w", err)
	}
	// Only the strings named are read: a large program's table (node's
	// is megabytes of exported symbols) is not read whole on every run.
	str := func(off uint64) (string, error) {
		if off >= strsz {
			return "", fmt.Errorf("dynamic string offset %d beyond DT_STRSZ %d", off, strsz)
		}
		var s []byte
		for pos := off; pos < strsz; {
			chunk := make([]byte, min(256, strsz-pos))
			if err := seg.readAt(r, chunk, base+pos); err != nil {
				return "", fmt.Errorf("reading DT_STRTAB: %w", err)
			}
			if i := bytes.IndexByte(chunk, 0); i >= 0 {
				return string(append(s, chunk[:i]...)), nil
			}
			s = append(s, chunk...)
			pos += uint64(len(chunk))
		}
		return "", fmt.Errorf("dynamic string at %d is not terminated", off)
	}
	for _, n := range needed {
		s, err := str(n)
		if err != nil {
			return nil, err
		}
		info.needed = append(info.needed, s)
	}
	if hasSoname {
		if info.soname, err = str(soname); err != nil {
			return nil, err
		}
	}
	if hasRpath && !info.hasRunpath {
		if info.rpath, err = str(rpath); err != nil {
			return nil, err
		}
	}
	if info.hasRunpath {
		if info.runpath, err = str(runpath); err != nil {
			return nil, err
		}
	}
	return info, nil
}

// segmentAt returns the PT_LOAD segment that maps size bytes at virtual
// address addr, and their offset in it.
func segmentAt(f *elfFile, addr, size uint64) (*elfProg, uint64, error) {
	for i, p := range f.progs {
		if p.typ != elf.PT_LOAD || addr < p.vaddr || addr-p.vaddr >= p.filesz {
			continue
		}
		off := addr - p.vaddr
		if size > p.filesz-off {
			return nil, 0, fmt.Errorf("%d bytes at %#x run past their segment", size, addr)
		}
		return &f.progs[i], off, nil
	}
	return nil, 0, fmt.Errorf("address %#x is not in a PT_LOAD segment", addr)
}

// elfFile is an ELF object's header and program headers.
type elfFile struct {
	class   elf.Class
	machine elf.Machine
	typ     elf.Type
	order   binary.ByteOrder
	progs   []elfProg
}

// elfProg is a program header: the part of the file a segment holds.
type elfProg struct {
	typ                elf.ProgType
	off, vaddr, filesz uint64
}

// readAt reads len(b) bytes at offset off of the segment, which must hold
// them.
func (p *elfProg) readAt(r io.ReaderAt, b []byte, off uint64) error {
	if off > p.filesz || uint64(len(b)) > p.filesz-off || p.off+off < p.off {
		return fmt.Errorf("%d bytes at %d run past a segment of %d", len(b), off, p.filesz)
	}
	_, err := r.ReadAt(b, int64(p.off+off))
	return err
}

// maxProgramHeaders bounds e_phnum*e_phentsize (the kernel takes 64 KiB).
const maxProgramHeaders = 64 << 10

// readProgramHeaders reads the ELF header and the program headers, with
// the checks debug/elf makes of them: the ELF magic, a known class, byte
// order and version, and program headers of their class's size, all in
// the file.
func readProgramHeaders(r io.ReaderAt) (*elfFile, error) {
	head := make([]byte, 4096)
	n, err := r.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	head = head[:n]
	if len(head) < elf.EI_NIDENT || !isELF(head) {
		return nil, errors.New("bad magic number")
	}
	f := &elfFile{class: elf.Class(head[elf.EI_CLASS]), order: byteOrder(head)}
	if f.order == nil {
		return nil, fmt.Errorf("unknown ELF data encoding %d", head[elf.EI_DATA])
	}
	if v := elf.Version(head[elf.EI_VERSION]); v != elf.EV_CURRENT {
		return nil, fmt.Errorf("unknown ELF version %d", v)
	}
	var phoff, phentsize, phnum, want uint64
	switch f.class {
	case elf.ELFCLASS64:
		if len(head) < 64 {
			return nil, io.ErrUnexpectedEOF
		}
		phoff, phentsize, phnum, want = f.order.Uint64(head[32:]), uint64(f.order.Uint16(head[54:])), uint64(f.order.Uint16(head[56:])), 56
	case elf.ELFCLASS32:
		if len(head) < 52 {
			return nil, io.ErrUnexpectedEOF
		}
		phoff, phentsize, phnum, want = uint64(f.order.Uint32(head[28:])), uint64(f.order.Uint16(head[42:])), uint64(f.order.Uint16(head[44:])), 32
	default:
		return nil, fmt.Errorf("unknown ELF class %d", f.class)
	}
	f.typ, f.machine = elf.Type(f.order.Uint16(head[16:])), elf.Machine(f.order.Uint16(head[18:]))
	if phnum == 0 {
		return f, nil
	}
	if phentsize != want || phnum*want > maxProgramHeaders || phoff > math.MaxInt64-maxProgramHeaders {
		return nil, fmt.Errorf("invalid program headers: %d of %d bytes at %d", phnum, phentsize, phoff)
	}
	size := phnum * want
	var ph []byte
	if phoff+size <= uint64(len(head)) {
		ph = head[phoff : phoff+size]
	} else {
		ph = make([]byte, size)
		if _, err := r.ReadAt(ph, int64(phoff)); err != nil {
			return nil, fmt.Errorf("reading program headers: %w", err)
		}
	}
	f.progs = make([]elfProg, phnum)
	for i := range f.progs {
		b := ph[uint64(i)*want:]
		p := &f.progs[i]
		p.typ = elf.ProgType(f.order.Uint32(b))
		if f.class == elf.ELFCLASS64 {
			p.off, p.vaddr, p.filesz = f.order.Uint64(b[8:]), f.order.Uint64(b[16:]), f.order.Uint64(b[32:])
		} else {
			p.off, p.vaddr, p.filesz = uint64(f.order.Uint32(b[4:])), uint64(f.order.Uint32(b[8:])), uint64(f.order.Uint32(b[16:]))
		}
	}
	return f, nil
}

// elfHeaderMatches reports whether the file at r is an ELF object of the
// given class and machine: the check the loader makes on every candidate
// before accepting it (open_verify).
func elfHeaderMatches(r io.ReaderAt, class elf.Class, machine elf.Machine) bool {
	return elfHeaderOf(r).matches(class, machine)
}

// elfHeader is what the loader's check of a candidate reads of it: ok is
// false when r is not an ELF object it can read the machine of.
type elfHeader struct {
	ok      bool
	class   elf.Class
	machine elf.Machine
}

func (h elfHeader) matches(class elf.Class, machine elf.Machine) bool {
	return h.ok && h.class == class && h.machine == machine
}

func elfHeaderOf(r io.ReaderAt) elfHeader {
	var h [20]byte
	if _, err := r.ReadAt(h[:], 0); err != nil || !isELF(h[:]) {
		return elfHeader{}
	}
	order := byteOrder(h[:])
	if order == nil {
		return elfHeader{}
	}
	return elfHeader{ok: true, class: elf.Class(h[elf.EI_CLASS]), machine: elf.Machine(order.Uint16(h[18:]))}
}

// byteOrder is the byte order e_ident (head) gives, nil for an unknown one.
func byteOrder(head []byte) binary.ByteOrder {
	switch elf.Data(head[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		return binary.LittleEndian
	case elf.ELFDATA2MSB:
		return binary.BigEndian
	}
	return nil
}

// expandSearchPath splits a DT_RPATH or DT_RUNPATH value into directories,
// expanding $ORIGIN and ${ORIGIN} to origin. Elements using $LIB or
// $PLATFORM, and empty or relative elements (relative to whatever the
// working directory is at run time), are dropped: the container could not
// reproduce them. Any other '$' is kept literally, as glibc does.
func expandSearchPath(list, origin string) []string {
	var dirs []string
	for _, el := range strings.Split(list, ":") {
		d, ok := expandDST(el, origin)
		if !ok || d == "" || !strings.HasPrefix(d, "/") {
			continue
		}
		dirs = append(dirs, d)
	}
	return dirs
}

func expandDST(el, origin string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(el); i++ {
		if el[i] != '$' {
			b.WriteByte(el[i])
			continue
		}
		rest := el[i+1:]
		switch {
		case dstIs(rest, "ORIGIN") > 0:
			b.WriteString(origin)
			i += dstIs(rest, "ORIGIN")
		case dstIs(rest, "LIB") > 0, dstIs(rest, "PLATFORM") > 0:
			return "", false
		default:
			b.WriteByte('$')
		}
	}
	return b.String(), true
}

// dstIs returns how many bytes after '$' form the token name ("NAME" or
// "{NAME}"), or 0 when rest does not start with it. A bare name must not
// run on into more identifier characters.
func dstIs(rest, name string) int {
	if strings.HasPrefix(rest, "{"+name+"}") {
		return len(name) + 2
	}
	if !strings.HasPrefix(rest, name) {
		return 0
	}
	if len(rest) > len(name) {
		c := rest[len(name)]
		if c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			return 0
		}
	}
	return len(name)
}

// defaultLibDirs are the directories searched last for an object of the
// given class and machine, in order. Candidates of another class or machine
// are skipped anyway, so listing a directory too many only costs a stat.
func defaultLibDirs(class elf.Class, machine elf.Machine) []string {
	multiarch := func(triplet string, more ...string) []string {
		return append([]string{"/lib/" + triplet, "/usr/lib/" + triplet}, more...)
	}
	switch {
	case machine == elf.EM_X86_64 && class == elf.ELFCLASS64:
		return multiarch("x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
	case machine == elf.EM_X86_64 && class == elf.ELFCLASS32:
		return multiarch("x86_64-linux-gnux32", "/libx32", "/usr/libx32", "/lib", "/usr/lib")
	case machine == elf.EM_386:
		return multiarch("i386-linux-gnu", "/lib32", "/usr/lib32", "/lib", "/usr/lib")
	case machine == elf.EM_AARCH64:
		return multiarch("aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
	case machine == elf.EM_ARM:
		return multiarch("arm-linux-gnueabihf", "/lib", "/usr/lib")
	case machine == elf.EM_RISCV && class == elf.ELFCLASS64:
		return multiarch("riscv64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
	case machine == elf.EM_PPC64:
		return multiarch("powerpc64le-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
	case machine == elf.EM_S390:
		return multiarch("s390x-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
	case class == elf.ELFCLASS64:
		return []string{"/lib64", "/usr/lib64", "/lib", "/usr/lib"}
	default:
		return []string{"/lib", "/usr/lib"}
	}
}

// hostMachine is the ELF machine of the running program, used to pick which
// ELF files inside declared directories are chased (Options.TreeELF).
func hostMachine() (elf.Class, elf.Machine) {
	switch runtime.GOARCH {
	case "amd64":
		return elf.ELFCLASS64, elf.EM_X86_64
	case "386":
		return elf.ELFCLASS32, elf.EM_386
	case "arm64":
		return elf.ELFCLASS64, elf.EM_AARCH64
	case "arm":
		return elf.ELFCLASS32, elf.EM_ARM
	case "riscv64":
		return elf.ELFCLASS64, elf.EM_RISCV
	case "ppc64le":
		return elf.ELFCLASS64, elf.EM_PPC64
	case "s390x":
		return elf.ELFCLASS64, elf.EM_S390
	}
	return elf.ELFCLASSNONE, elf.EM_NONE
}
