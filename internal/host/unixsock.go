package host

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
)

// unixAcceptCon is __SO_ACCEPTCON in /proc/net/unix's Flags: a listening
// socket.
const unixAcceptCon = 0x10000

// ParseUnixListeners reads /proc/net/unix's table (Num RefCount Protocol
// Flags Type St Inode Path) into the socket inode of each listening
// socket bound to a path, by path.
func ParseUnixListeners(r io.Reader) (map[string]uint64, error) {
	listeners := map[string]uint64{}
	sc := bufio.NewScanner(r)
	for first := true; sc.Scan(); first = false {
		f := strings.Fields(sc.Text())
		if first || len(f) < 8 || !strings.HasPrefix(f[7], "/") {
			continue // the header, or a socket with no path
		}
		flags, err1 := strconv.ParseUint(f[3], 16, 32)
		inode, err2 := strconv.ParseUint(f[6], 10, 64)
		if err1 != nil || err2 != nil || flags&unixAcceptCon == 0 {
			continue
		}
		listeners[f[7]] = inode
	}
	return listeners, sc.Err()
}

// UnixListener is the socket inode of the socket listening at path, as
// this network namespace's /proc/net/unix shows it; ok is false when none
// listens there.
func UnixListener(path string) (inode uint64, ok bool, err error) {
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	listeners, err := ParseUnixListeners(f)
	if err != nil {
		return 0, false, err
	}
	inode, ok = listeners[path]
	return inode, ok, nil
}

// HoldsSocket reports whether one of pid's file descriptors is the socket
// of inode (/proc/<pid>/fd/N reads "socket:[inode]").
func HoldsSocket(pid int, inode uint64) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	want := "socket:[" + strconv.FormatUint(inode, 10) + "]"
	for _, e := range entries {
		if target, err := os.Readlink(dir + e.Name()); err == nil && target == want {
			return true
		}
	}
	return false
}
