package host

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseUnixListeners(t *testing.T) {
	table := `Num       RefCount Protocol Flags    Type St Inode Path
0000000007f48069: 00000002 00000000 00010000 0001 01 1228791 /run/containerd/containerd.sock.ttrpc
0000000028a7ec7b: 00000003 00000000 00000000 0001 03  1238
000000002da6794e: 00000003 00000000 00000000 0001 03 1276122 /run/containerd/s/b497
000000001cdb3ce1: 00000002 00000000 00010000 0001 01 1230866 /run/containerd/s/8223
00000000aaaaaaaa: 00000002 00000000 00010000 0001 01 77 @abstract
`
	got, err := ParseUnixListeners(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"/run/containerd/containerd.sock.ttrpc": 1228791, "/run/containerd/s/8223": 1230866}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v (a connected socket at a path is not its listener)", got, want)
	}
	for p, ino := range want {
		if got[p] != ino {
			t.Errorf("%s: inode %d, want %d", p, got[p], ino)
		}
	}
}

// The listener this process opens is found at its path and in its fds;
// another process does not hold it.
func TestUnixListenerOfThisProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	inode, ok, err := UnixListener(path)
	if err != nil || !ok {
		t.Fatalf("UnixListener(%s) = %d, %v, %v", path, inode, ok, err)
	}
	if !HoldsSocket(os.Getpid(), inode) {
		t.Errorf("this process does not hold socket %d", inode)
	}
	if HoldsSocket(1, inode) {
		t.Errorf("pid 1 holds this process's socket %d", inode)
	}
	l.Close()
	if _, ok, _ := UnixListener(path); ok {
		t.Errorf("a closed listener is still found")
	}
}
