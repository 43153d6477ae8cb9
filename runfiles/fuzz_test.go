package runfiles

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"slices"
	"strings"
	"testing"
)

// Fuzz targets: the parsers of host-controlled bytes must never panic.
// Run each with: go test ./runfiles/ -run '^$' -fuzz '^FuzzX$' -fuzztime 30s

func FuzzParseLdCache(f *testing.F) {
	entries := []ldCacheEntry{
		{Flags: 0x0303, Name: "libc.so.6", Path: "/lib/x86_64-linux-gnu/libc.so.6"},
		{Flags: 0x0003, Name: "libc.so.6", Path: "/lib32/libc.so.6", HWCap: 1 << 62},
	}
	f.Add(buildLdCache(entries, false, binary.LittleEndian))
	f.Add(buildLdCache(entries, true, binary.LittleEndian))
	f.Add(buildLdCache(entries, false, binary.BigEndian))
	f.Add(buildLdCache(nil, false, binary.LittleEndian))
	f.Add([]byte(ldCacheMagicOld + "\x00\xff\xff\xff\x7f"))
	// The host's cache, cut down to a few entries: large seeds make the
	// fuzzer spend its time minimizing instead of fuzzing.
	if b, err := os.ReadFile(ldCachePath); err == nil {
		if c, err := parseLdCache(b); err == nil {
			f.Add(buildLdCache(c.entries[:min(len(c.entries), 6)], false, binary.LittleEndian))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseLdCache(b)
		if err != nil {
			return
		}
		for _, e := range c.entries {
			// Strings come from the input and end at their NUL.
			if strings.IndexByte(e.Name, 0) >= 0 || strings.IndexByte(e.Path, 0) >= 0 {
				t.Fatalf("entry with NUL: %+v", e)
			}
			c.lookup(e.Name, elf.ELFCLASS64, elf.EM_X86_64)
		}
	})
}

func FuzzParseShebang(f *testing.F) {
	for _, s := range []string{
		"#!/bin/sh\n", "#! /usr/bin/env -S python3 -u\n", "#!\n", "#!/bin/sh", "#!\t/x y z\r\n",
		"#!" + strings.Repeat("/a", 200), "#!/bin/sh \x00 x\n", "\x7fELF", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		interp, arg, ok, err := parseShebang(b)
		if !ok && (interp != "" || arg != "" || err != nil) {
			t.Fatalf("not a script but %q %q %v", interp, arg, err)
		}
		if err == nil && ok {
			if interp == "" || strings.ContainsAny(interp, " \t\n\x00") || strings.ContainsAny(arg, "\n\x00") {
				t.Fatalf("bad split of %q: %q %q", b, interp, arg)
			}
			if len(interp)+len(arg) > shebangBufSize {
				t.Fatalf("longer than the kernel reads: %q %q", interp, arg)
			}
			if interp == "/usr/bin/env" {
				envCommand(arg)
			}
		}
	})
}

func FuzzReadELF(f *testing.F) {
	f.Add(testELF{interp: "/lib64/ld-linux-x86-64.so.2", needed: []string{"libc.so.6"}, runpath: "$ORIGIN/../lib"}.build())
	f.Add(testELF{soname: "libx.so.1", needed: []string{"a", "b"}, rpath: "/x:${ORIGIN}", flags1: 0x800}.build())
	f.Add([]byte(elf.ELFMAG))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := readELF(bytes.NewReader(b))
		if err == nil {
			for _, d := range []string{info.rpath, info.runpath} {
				expandSearchPath(d, "/origin")
			}
		}
		elfHeaderMatches(bytes.NewReader(b), elf.ELFCLASS64, elf.EM_X86_64)
	})
}

// FuzzDecodeIndex: an assembly index is read from the store, which its
// owner (or a crash) may have left in any state: decoding must never
// panic, and what decodes must survive encoding and decoding again.
func FuzzDecodeIndex(f *testing.F) {
	idx := &assemblyIndex{
		digest: strings.Repeat("cd", 32),
		root:   treeSeal{Dev: 1, Ino: 2, Mode: 0o40555},
		plan: []plannedEntry{{path: "/a", typ: 1, mode: 0o755}, {path: "/a/b", key: statKey{Ino: 5, Size: 9}, readNS: 7, sha: strings.Repeat("0", 64)},
			{path: "/a/c", typ: 2, mode: 0o777, target: "b"}},
		seals: []treeSeal{{Ino: 3}, {Ino: 4, Size: 9}, {}},
	}
	f.Add(idx.encode())
	f.Add([]byte(indexMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeIndex(b)
		if err != nil {
			return
		}
		again, err := decodeIndex(got.encode())
		if err != nil || again.digest != got.digest || again.root != got.root ||
			!slices.Equal(again.plan, got.plan) || !slices.Equal(again.seals, got.seals) {
			t.Fatalf("decoded %+v, re-encoded and decoded %+v (%v)", got, again, err)
		}
	})
}
