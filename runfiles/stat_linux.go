//go:build linux

package runfiles

import (
	"io/fs"
	"syscall"
)

// statKeyOf returns the identity of a file's current content as the kernel
// reports it. Any write changes mtime and ctime; chmod, chown and link
// changes change ctime; ctime cannot be set from user space.
func statKeyOf(fi fs.FileInfo) statKey {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return statKey{Size: fi.Size(), MtimeNS: fi.ModTime().UnixNano()}
	}
	return statKey{
		Dev:     uint64(st.Dev),
		Ino:     uint64(st.Ino),
		Size:    st.Size,
		MtimeNS: st.Mtim.Nano(),
		CtimeNS: st.Ctim.Nano(),
	}
}
