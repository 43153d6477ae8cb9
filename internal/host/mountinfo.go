package host

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// Mount is one mount of a mount table (a line of /proc/<pid>/mountinfo,
// proc(5)), with its option lists split.
type Mount struct {
	ID, Parent   int      // mount ids; Parent is the mount this one is on
	Major, Minor int      // device of the filesystem's superblock (s_dev)
	Root         string   // directory of the filesystem mounted here ("/" for all of it)
	MountPoint   string   // where it is mounted, relative to the reader's root
	Options      []string // per-mount: rw, nosuid, nodev, noexec, relatime…
	FSType       string   // tmpfs, cgroup2, fuse.sshfs…
	Source       string   // filesystem-specific: /dev/sda1, tmpfs, none
	SuperOptions []string // per-superblock: size=…k, mode=…, cgroup v1 controllers
}

// Mounts reads this process's mount table.
func Mounts() ([]Mount, error) {
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, fmt.Errorf("reading this process's mount table: %w", err)
	}
	return fromInfos(infos), nil
}

// ReadMounts reads the mount table in a mountinfo file: another process's
// /proc/<pid>/mountinfo, or a fixture laid out like /proc.
func ReadMounts(path string) ([]Mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mounts, err := ParseMounts(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return mounts, nil
}

// ParseMounts parses mountinfo text. A line it cannot read fails the whole
// parse, so that "is this mounted?" never hears "no" from a line it could
// not read.
func ParseMounts(r io.Reader) ([]Mount, error) {
	infos, err := mountinfo.GetMountsFromReader(r, nil)
	if err != nil {
		return nil, err
	}
	return fromInfos(infos), nil
}

func fromInfos(infos []*mountinfo.Info) []Mount {
	out := make([]Mount, len(infos))
	for i, in := range infos {
		out[i] = Mount{
			ID: in.ID, Parent: in.Parent, Major: in.Major, Minor: in.Minor,
			Root: in.Root, MountPoint: in.Mountpoint, Options: splitOptions(in.Options),
			FSType: in.FSType, Source: in.Source, SuperOptions: splitOptions(in.VFSOptions),
		}
	}
	return out
}

func splitOptions(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// TopmostAt returns the mount at mount point p that hides the others
// there (the last one listed), or nil when nothing is mounted at p.
func TopmostAt(mounts []Mount, p string) *Mount {
	for i := len(mounts) - 1; i >= 0; i-- {
		if mounts[i].MountPoint == p {
			return &mounts[i]
		}
	}
	return nil
}

// MountByID returns the mount with mount id id (statx STATX_MNT_ID), or
// nil.
func MountByID(mounts []Mount, id uint64) *Mount {
	for i := range mounts {
		if uint64(mounts[i].ID) == id {
			return &mounts[i]
		}
	}
	return nil
}

// TracefsMount returns where the root of a tracefs is mounted, "" when
// none is: the first such mount, as cilium/ebpf finds it (wherever it
// sits, so a container's bind mount at another path serves too).
func TracefsMount(mounts []Mount) string {
	for _, m := range mounts {
		if m.FSType == "tracefs" && m.Root == "/" {
			return m.MountPoint
		}
	}
	return ""
}
