package runfiles

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseShebang(t *testing.T) {
	long := "#!/bin/" + strings.Repeat("x", 300)
	longArg := "#!/bin/sh " + strings.Repeat("a", 300)
	cases := []struct {
		in          string
		interp, arg string
		ok, err     bool
	}{
		{in: "", ok: false},
		{in: "#", ok: false},
		{in: "ELF", ok: false},
		{in: "#!/bin/sh\n", interp: "/bin/sh", ok: true},
		{in: "#!/bin/sh", interp: "/bin/sh", ok: true}, // short file: zero padding terminates
		{in: "#! /bin/sh -e\n", interp: "/bin/sh", arg: "-e", ok: true},
		{in: "#!\t/usr/bin/env  python3 -u  \t\nprint()", interp: "/usr/bin/env", arg: "python3 -u", ok: true},
		{in: "#!/bin/sh\r\n", interp: "/bin/sh\r", ok: true}, // the kernel keeps the CR
		{in: "#!/bin/sh\x00junk\n", interp: "/bin/sh", ok: true},
		{in: "#!/bin/sh -x\x00junk\n", interp: "/bin/sh", arg: "-x", ok: true},
		{in: "#!\n", ok: true, err: true},
		{in: "#!   \t\n", ok: true, err: true},
		{in: "#!\x00/bin/sh\n", ok: true, err: true},
		{in: long, ok: true, err: true},
		{in: longArg, interp: "/bin/sh", arg: strings.Repeat("a", 255-len("#!/bin/sh ")), ok: true},
	}
	for _, c := range cases {
		interp, arg, ok, err := parseShebang([]byte(c.in))
		if interp != c.interp || arg != c.arg || ok != c.ok || (err != nil) != c.err {
			t.Errorf("parseShebang(%q) = %q, %q, %v, %v; want %q, %q, %v, err %v",
				c.in, interp, arg, ok, err, c.interp, c.arg, c.ok, c.err)
		}
		if err != nil && !errors.Is(err, ErrUnsupported) {
			t.Errorf("parseShebang(%q): error %v is not ErrUnsupported", c.in, err)
		}
	}
}

func TestEnvCommand(t *testing.T) {
	for in, want := range map[string]string{
		"python3":                     "python3",
		"python3 -u":                  "python3 -u", // one argument: env looks for that name
		"-S python3 -u":               "python3",
		"-S A=1 -i node --flag":       "node",
		"-S -u HOME -C /tmp bash -e":  "bash",
		"--split-string=deno run":     "deno",
		"-Sperl -w":                   "perl",
		"--split-string A=b sh -c ok": "sh",
	} {
		got, err := envCommand(in)
		if err != nil || got != want {
			t.Errorf("envCommand(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-i python3", "-S", "-S A=1 -u"} {
		if got, err := envCommand(in); err == nil {
			t.Errorf("envCommand(%q) = %q, want an error", in, got)
		}
	}
}

// ldconfigLine is one line of "ldconfig -p".
var ldconfigLine = regexp.MustCompile(`^\s+(\S+) \(([^)]*)\) => (\S+)$`)

func TestParseLdCacheMatchesLdconfig(t *testing.T) {
	b, err := os.ReadFile(ldCachePath)
	if err != nil {
		t.Fatalf("this test needs the host's %s: %v", ldCachePath, err)
	}
	c, err := parseLdCache(b)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(requireTool(t, "ldconfig"), "-p").Output()
	if err != nil {
		t.Fatal(err)
	}
	// ldconfig -p lists every entry in cache order.
	var want, got []string
	for _, line := range strings.Split(string(out), "\n") {
		if m := ldconfigLine.FindStringSubmatch(line); m != nil {
			want = append(want, m[1]+" => "+m[3])
		}
	}
	for _, e := range c.entries {
		got = append(got, e.Name+" => "+e.Path)
	}
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Fatalf("parsed %d entries, ldconfig -p lists %d; first difference:\n%s", len(got), len(want), firstDiff(got, want))
	}
	class, machine := hostMachine()
	if machine == elf.EM_X86_64 {
		for _, line := range strings.Split(string(out), "\n") {
			m := ldconfigLine.FindStringSubmatch(line)
			if m == nil || m[2] != "libc6,x86-64" {
				continue
			}
			if p := c.lookup(m[1], class, machine); p == "" {
				t.Errorf("lookup(%s) found nothing, ldconfig lists %s", m[1], m[3])
			}
		}
	}
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return a[i] + "\n" + b[i]
		}
	}
	return "(one is a prefix of the other)"
}

// buildLdCache writes a cache in the new format, optionally after an old
// compatibility section, in the given byte order.
func buildLdCache(entries []ldCacheEntry, withOld bool, order binary.ByteOrder) []byte {
	var strs bytes.Buffer
	stroff := ldCacheNewHead + len(entries)*ldCacheNewEntry
	off := make([][2]uint32, len(entries))
	for i, e := range entries {
		off[i][0] = uint32(stroff + strs.Len())
		strs.WriteString(e.Name + "\x00")
		off[i][1] = uint32(stroff + strs.Len())
		strs.WriteString(e.Path + "\x00")
	}
	var nw bytes.Buffer
	nw.WriteString(ldCacheMagicNew)
	binary.Write(&nw, order, uint32(len(entries)))
	binary.Write(&nw, order, uint32(strs.Len()))
	endian := byte(2)
	if order == binary.BigEndian {
		endian = 3
	}
	nw.Write([]byte{endian, 0, 0, 0})
	nw.Write(make([]byte, 16)) // extension offset, unused
	for i, e := range entries {
		binary.Write(&nw, order, e.Flags)
		binary.Write(&nw, order, off[i][0])
		binary.Write(&nw, order, off[i][1])
		binary.Write(&nw, order, uint32(0))
		binary.Write(&nw, order, e.HWCap)
	}
	nw.Write(strs.Bytes())
	if !withOld {
		return nw.Bytes()
	}
	var old bytes.Buffer
	old.WriteString(ldCacheMagicOld + "\x00")
	binary.Write(&old, binary.LittleEndian, uint32(1))
	old.Write(make([]byte, ldCacheOldEntry))
	for old.Len()%8 != 0 {
		old.WriteByte(0)
	}
	return append(old.Bytes(), nw.Bytes()...)
}

func TestParseLdCacheFormats(t *testing.T) {
	entries := []ldCacheEntry{
		{Flags: 0x0303, Name: "libfoo.so.1", Path: "/opt/hw/libfoo.so.1", HWCap: 1 << 62},
		{Flags: 0x0003, Name: "libfoo.so.1", Path: "/lib32/libfoo.so.1"},
		{Flags: 0x0303, Name: "libfoo.so.1", Path: "/usr/local/lib/libfoo.so.1"},
		{Flags: 0x0303, Name: "libfoo.so.1", Path: "/usr/lib/libfoo.so.1"},
		{Flags: 0x0a03, Name: "libbar.so", Path: "/lib/aarch64/libbar.so"},
	}
	for _, withOld := range []bool{false, true} {
		for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
			c, err := parseLdCache(buildLdCache(entries, withOld, order))
			if err != nil {
				t.Fatalf("old=%v %v: %v", withOld, order, err)
			}
			if !slices.Equal(c.entries, entries) {
				t.Errorf("old=%v %v: got %+v", withOld, order, c.entries)
			}
			for _, q := range []struct {
				name    string
				class   elf.Class
				machine elf.Machine
				want    string
			}{
				{"libfoo.so.1", elf.ELFCLASS64, elf.EM_X86_64, "/usr/local/lib/libfoo.so.1"},
				{"libfoo.so.1", elf.ELFCLASS32, elf.EM_386, "/lib32/libfoo.so.1"},
				{"libbar.so", elf.ELFCLASS64, elf.EM_AARCH64, "/lib/aarch64/libbar.so"},
				{"libbar.so", elf.ELFCLASS64, elf.EM_X86_64, ""},
				{"libnone.so", elf.ELFCLASS64, elf.EM_X86_64, ""},
			} {
				if got := c.lookup(q.name, q.class, q.machine); got != q.want {
					t.Errorf("lookup(%s, %v, %v) = %q, want %q", q.name, q.class, q.machine, got, q.want)
				}
			}
		}
	}
	good := buildLdCache(entries, false, binary.LittleEndian)
	for name, b := range map[string][]byte{
		"empty":     nil,
		"magic":     []byte("glibc-ld.so.cache1.0" + strings.Repeat("\x00", 40)),
		"truncated": good[:ldCacheNewHead+10],
		"offset":    append(slices.Clone(good[:len(good)-1]), 'x'), // last string unterminated
		"old-only":  []byte(ldCacheMagicOld + "\x00\x00\x00\x00\x00"),
		"endian":    append(append(slices.Clone(good[:28]), 1), good[29:]...),
	} {
		if _, err := parseLdCache(b); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
}

func TestReadELFErrors(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":    nil,
		"text":     []byte("#!/bin/sh\n"),
		"magic":    []byte(elf.ELFMAG),
		"trunc64":  append([]byte(elf.ELFMAG), 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0),
		"garbage1": bytes.Repeat([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1}, 40),
	} {
		if _, err := readELF(bytes.NewReader(b)); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
}

// testELF describes a small synthetic ELF64 little-endian object.
type testELF struct {
	interp, soname, rpath, runpath string
	needed                         []string
	flags1                         uint64
}

// build writes the object: ELF header, PT_LOAD (the whole file at vaddr
// 0), PT_INTERP and PT_DYNAMIC, then the strings and the dynamic array.
// No section headers: the loader does not need them, and neither may we.
func (e testELF) build() []byte {
	le := binary.LittleEndian
	nph := 2
	if e.interp != "" {
		nph = 3
	}
	dataOff := 64 + 56*nph
	var strtab bytes.Buffer
	strtab.WriteByte(0)
	str := func(s string) uint64 {
		off := strtab.Len()
		strtab.WriteString(s + "\x00")
		return uint64(off)
	}
	type dyn struct{ tag, val uint64 }
	var dyns []dyn
	for _, n := range e.needed {
		dyns = append(dyns, dyn{uint64(elf.DT_NEEDED), str(n)})
	}
	if e.soname != "" {
		dyns = append(dyns, dyn{uint64(elf.DT_SONAME), str(e.soname)})
	}
	if e.rpath != "" {
		dyns = append(dyns, dyn{uint64(elf.DT_RPATH), str(e.rpath)})
	}
	if e.runpath != "" {
		dyns = append(dyns, dyn{uint64(elf.DT_RUNPATH), str(e.runpath)})
	}
	if e.flags1 != 0 {
		dyns = append(dyns, dyn{uint64(elf.DT_FLAGS_1), e.flags1})
	}
	interpOff := dataOff
	interpLen := 0
	if e.interp != "" {
		interpLen = len(e.interp) + 1
	}
	strOff := interpOff + interpLen
	dynOff := strOff + strtab.Len()
	dynOff = (dynOff + 7) &^ 7
	dyns = append(dyns, dyn{uint64(elf.DT_STRTAB), uint64(strOff)}, dyn{uint64(elf.DT_STRSZ), uint64(strtab.Len())}, dyn{0, 0})
	total := dynOff + 16*len(dyns)

	b := make([]byte, total)
	copy(b, elf.ELFMAG)
	b[elf.EI_CLASS], b[elf.EI_DATA], b[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), 1
	le.PutUint16(b[16:], uint16(elf.ET_DYN))
	le.PutUint16(b[18:], uint16(elf.EM_X86_64))
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[32:], 64) // e_phoff
	le.PutUint16(b[52:], 64) // e_ehsize
	le.PutUint16(b[54:], 56) // e_phentsize
	le.PutUint16(b[56:], uint16(nph))
	ph := func(i int, typ elf.ProgType, off, size int) {
		p := b[64+56*i:]
		le.PutUint32(p[0:], uint32(typ))
		le.PutUint32(p[4:], uint32(elf.PF_R))
		le.PutUint64(p[8:], uint64(off))   // p_offset
		le.PutUint64(p[16:], uint64(off))  // p_vaddr
		le.PutUint64(p[24:], uint64(off))  // p_paddr
		le.PutUint64(p[32:], uint64(size)) // p_filesz
		le.PutUint64(p[40:], uint64(size)) // p_memsz
		le.PutUint64(p[48:], 8)
	}
	ph(0, elf.PT_LOAD, 0, total)
	ph(1, elf.PT_DYNAMIC, dynOff, 16*len(dyns))
	if e.interp != "" {
		ph(2, elf.PT_INTERP, interpOff, interpLen)
		copy(b[interpOff:], e.interp)
	}
	copy(b[strOff:], strtab.Bytes())
	for i, d := range dyns {
		le.PutUint64(b[dynOff+16*i:], d.tag)
		le.PutUint64(b[dynOff+16*i+8:], d.val)
	}
	return b
}

func TestReadELFSynthetic(t *testing.T) {
	for _, c := range []testELF{
		{interp: "/lib64/ld-linux-x86-64.so.2", needed: []string{"libc.so.6", "libz.so.1"}, runpath: "$ORIGIN/../lib"},
		{soname: "libx.so.1", needed: []string{"liby.so"}, rpath: "/opt/lib:$ORIGIN", flags1: uint64(elf.DF_1_NODEFLIB)},
		{soname: "libboth.so", rpath: "/ignored", runpath: "/used"},
		{},
	} {
		info, err := readELF(bytes.NewReader(c.build()))
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		wantRpath := c.rpath
		if c.runpath != "" {
			wantRpath = "" // DT_RPATH is ignored when DT_RUNPATH exists
		}
		if info.interp != c.interp || info.soname != c.soname || info.rpath != wantRpath || info.runpath != c.runpath ||
			info.hasRunpath != (c.runpath != "") || !slices.Equal(info.needed, c.needed) ||
			info.nodeflib != (c.flags1 != 0) || info.class != elf.ELFCLASS64 || info.machine != elf.EM_X86_64 {
			t.Errorf("%+v: read %+v", c, info)
		}
	}
}

// TestReadShebangFIFO: a FIFO named as a program is not a script, and
// reading it does not wait for a writer (it hung the compile).
func TestReadShebangFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o755); err != nil {
		t.Fatal(err)
	}
	done := make(chan bool)
	go func() {
		_, ok, err := ReadShebang(p)
		done <- ok || err != nil
	}()
	select {
	case bad := <-done:
		if bad {
			t.Error("a FIFO was taken for a script")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadShebang blocks on a FIFO")
	}
}
