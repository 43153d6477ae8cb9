package ebpf

import (
	"fmt"
	"strconv"
	"strings"
)

// FileID identifies a file the way the kernel does: the device of its
// filesystem and its inode number. Dev uses the user-space dev_t encoding
// (stat(2) st_dev, glibc makedev).
type FileID struct {
	Dev uint64
	Ino uint64
}

// Major is the device's major number.
func (f FileID) Major() uint32 {
	return uint32((f.Dev>>8)&0xfff) | uint32((f.Dev>>32)&^0xfff)
}

// Minor is the device's minor number.
func (f FileID) Minor() uint32 {
	return uint32(f.Dev&0xff) | uint32((f.Dev>>12)&^0xff)
}

// DevString is the device as major:minor.
func (f FileID) DevString() string {
	return strconv.FormatUint(uint64(f.Major()), 10) + ":" + strconv.FormatUint(uint64(f.Minor()), 10)
}

// String is major:minor/inode.
func (f FileID) String() string { return f.DevString() + "/" + strconv.FormatUint(f.Ino, 10) }

// mkdev encodes major and minor as user-space dev_t (glibc makedev).
func mkdev(major, minor uint32) uint64 {
	return uint64(major&0xfff)<<8 | uint64(major&^0xfff)<<32 |
		uint64(minor&0xff) | uint64(minor&^0xff)<<12
}

// Kernel-internal dev_t (include/linux/kdev_t.h): 12 bits of major above
// 20 bits of minor.
const (
	kernelMinorBits = 20
	kernelMinorMask = 1<<kernelMinorBits - 1
)

// devFromKernel converts a kernel-internal dev_t (super_block.s_dev) to
// the user-space encoding.
func devFromKernel(k uint32) uint64 {
	return mkdev(k>>kernelMinorBits, k&kernelMinorMask)
}

// kernelDev converts the device to the kernel-internal encoding the BPF
// program compares against; false if it does not fit (major ≥ 4096 or
// minor ≥ 2^20, which the kernel cannot produce).
func (f FileID) kernelDev() (uint32, bool) {
	major, minor := f.Major(), f.Minor()
	if major >= 1<<(32-kernelMinorBits) || minor > kernelMinorMask || mkdev(major, minor) != f.Dev {
		return 0, false
	}
	return major<<kernelMinorBits | minor, true
}

// parseDev reads "major:minor".
func parseDev(s string) (uint64, error) {
	maj, min, ok := strings.Cut(s, ":")
	if !ok {
		return 0, fmt.Errorf("device %q: want major:minor", s)
	}
	a, err1 := strconv.ParseUint(maj, 10, 32)
	b, err2 := strconv.ParseUint(min, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("device %q: want major:minor", s)
	}
	return mkdev(uint32(a), uint32(b)), nil
}
