package runfiles

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// ldCachePath is where glibc's loader looks for its cache.
const ldCachePath = "/etc/ld.so.cache"

// ld.so.cache formats (glibc sysdeps/generic/dl-cache.h).
const (
	ldCacheMagicOld = "ld.so-1.7.0"          // libc5-era header, may precede the new one
	ldCacheMagicNew = "glibc-ld.so.cache1.1" // magic "glibc-ld.so.cache" + version "1.1"
	ldCacheOldEntry = 12                     // int32 flags, uint32 key, uint32 value
	ldCacheNewHead  = 48
	ldCacheNewEntry = 24 // int32 flags, uint32 key, value, osversion; uint64 hwcap
)

// Cache entry flags (glibc elf/ldconfig.h).
const (
	ldFlagTypeMask     = 0x00ff
	ldFlagELF          = 0x0001
	ldFlagELFLibc6     = 0x0003
	ldFlagRequiredMask = 0xff00
	ldFlagX8664Lib64   = 0x0300
	ldFlagX8664Libx32  = 0x0800
	ldFlagAArch64Lib64 = 0x0a00
)

// ldCacheEntry is one library of the cache.
type ldCacheEntry struct {
	Flags int32
	Name  string // soname, the lookup key
	Path  string
	HWCap uint64 // non-zero: only for some CPUs (hwcap subdirectories)
}

// ldCache is a parsed /etc/ld.so.cache: its entries in file order.
type ldCache struct {
	entries []ldCacheEntry
	byName  map[string][]int
}

// parseLdCache parses the "glibc-ld.so.cache1.1" format, alone or after a
// compatibility "ld.so-1.7.0" section (whose own entries are ignored, as
// glibc ignores them when the new format is present). String offsets are
// relative to the start of the new header.
func parseLdCache(b []byte) (*ldCache, error) {
	start := 0
	if bytes.HasPrefix(b, []byte(ldCacheMagicOld)) {
		// magic (11 bytes, padded to 12), uint32 nlibs, entries; the new
		// header follows, aligned to 8.
		if len(b) < 16 {
			return nil, fmt.Errorf("ld.so.cache: truncated old header")
		}
		n := uint64(binary.LittleEndian.Uint32(b[12:]))
		end := 16 + n*ldCacheOldEntry
		end = (end + 7) &^ 7
		if end > uint64(len(b)) {
			return nil, fmt.Errorf("ld.so.cache: old section of %d entries exceeds the file", n)
		}
		start = int(end)
	}
	data := b[start:]
	if len(data) < ldCacheNewHead || !bytes.HasPrefix(data, []byte(ldCacheMagicNew)) {
		return nil, fmt.Errorf("ld.so.cache: no %q header", ldCacheMagicNew)
	}
	var order binary.ByteOrder
	switch data[28] & 3 {
	case 0, 2: // unset (older ldconfig: host order, little on every glibc we target), little
		order = binary.LittleEndian
	case 3:
		order = binary.BigEndian
	default:
		return nil, fmt.Errorf("ld.so.cache: invalid endianness flag")
	}
	n := uint64(order.Uint32(data[20:]))
	if ldCacheNewHead+n*ldCacheNewEntry > uint64(len(data)) {
		return nil, fmt.Errorf("ld.so.cache: %d entries exceed the file", n)
	}
	str := func(off uint32) (string, error) {
		if uint64(off) >= uint64(len(data)) {
			return "", fmt.Errorf("ld.so.cache: string offset %d beyond the file", off)
		}
		s := data[off:]
		i := bytes.IndexByte(s, 0)
		if i < 0 {
			return "", fmt.Errorf("ld.so.cache: string at %d is not terminated", off)
		}
		return string(s[:i]), nil
	}
	c := &ldCache{entries: make([]ldCacheEntry, 0, n), byName: make(map[string][]int)}
	for i := uint64(0); i < n; i++ {
		e := data[ldCacheNewHead+i*ldCacheNewEntry:]
		name, err := str(order.Uint32(e[4:]))
		if err != nil {
			return nil, err
		}
		path, err := str(order.Uint32(e[8:]))
		if err != nil {
			return nil, err
		}
		c.byName[name] = append(c.byName[name], len(c.entries))
		c.entries = append(c.entries, ldCacheEntry{
			Flags: int32(order.Uint32(e[0:])),
			Name:  name,
			Path:  path,
			HWCap: order.Uint64(e[16:]),
		})
	}
	return c, nil
}

// lookup returns the path the loader takes from the cache for name, for an
// object of the given class and machine: the first entry in file order
// whose flags suit the object and that needs no hwcap subdirectory. "" when
// there is none. The caller still checks the file (the loader does too, and
// falls back to the default directories when it fails).
func (c *ldCache) lookup(name string, class elf.Class, machine elf.Machine) string {
	if c == nil {
		return ""
	}
	for _, i := range c.byName[name] {
		e := c.entries[i]
		if e.HWCap == 0 && ldCacheFlagsMatch(e.Flags, class, machine) {
			return e.Path
		}
	}
	return ""
}

// ldCacheFlagsMatch mirrors glibc's _dl_cache_check_flags for the machines
// it knows; for others it accepts any ELF libc6 entry and leaves the check
// to the candidate's ELF header.
func ldCacheFlagsMatch(flags int32, class elf.Class, machine elf.Machine) bool {
	typ, req := flags&ldFlagTypeMask, flags&ldFlagRequiredMask
	if typ != ldFlagELFLibc6 && typ != ldFlagELF {
		return false
	}
	switch {
	case machine == elf.EM_X86_64 && class == elf.ELFCLASS64:
		return flags == ldFlagELFLibc6|ldFlagX8664Lib64
	case machine == elf.EM_X86_64 && class == elf.ELFCLASS32:
		return flags == ldFlagELFLibc6|ldFlagX8664Libx32
	case machine == elf.EM_386:
		return req == 0
	case machine == elf.EM_AARCH64:
		return flags == ldFlagELFLibc6|ldFlagAArch64Lib64
	}
	return typ == ldFlagELFLibc6
}
