package images

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// The hookbox user: the identity every spawn runs as.
const (
	User = "hookbox"
	UID  = 65532
	GID  = 65532
	// Home is the user's home in /etc/passwd; it lives in the tmpfs run dir
	// (render.HomeDir), so it exists only while a run does.
	Home = "/run/hookbox/home"
)

// SourceDateEpoch is the modification time, in seconds since the Unix epoch,
// of every entry in the image, and the image's "created" time
// (2025-01-01T00:00:00Z). It is fixed so that the image digest depends on the
// definition only. The BuildKit builder passes it as source-date-epoch.
const SourceDateEpoch int64 = 1735689600

// ModTime returns SourceDateEpoch as a time.
func ModTime() time.Time { return time.Unix(SourceDateEpoch, 0).UTC() }

// HostCABundlePath is where [HostDefinition] reads the host's CA bundle, and
// where the bundle appears in the image.
const HostCABundlePath = "/etc/ssl/certs/ca-certificates.crt"

// BaseLabel marks an image as hookbox's base image.
const BaseLabel = "dev.hookbox.base"

// MountPoints is every mount destination a hookbox container spec can use.
// Each must exist as an empty directory in the image: the rootfs is a
// read-only snapshot view, and runc cannot create a missing mountpoint on it
// ("read-only file system" at task create).
//
//   - /proc, /dev, /dev/pts, /dev/shm, /dev/mqueue, /sys, /run: the mounts of
//     containerd's default Linux spec (pkg/oci/mounts.go), which hookbox's
//     spec starts from.
//   - /sys/fs/cgroup: the cgroup mount runtimes add (CRI does).
//   - /run/hookbox, /tmp, /workspace, /hookbox/etc, /grants: hookbox's own
//     mounts (render.RunDir, TmpDir, WorkspaceDir, ConfigDir, GrantsDir);
//     /hookbox is the parent of ConfigDir and kept for future mounts there.
//
// The ones under /dev and /sys are hidden at run time by the tmpfs and sysfs
// mounted over their parents; they are in the image so that a spec which
// drops the parent mount still needs no new mountpoint.
var MountPoints = []string{
	"/dev",
	"/dev/mqueue",
	"/dev/pts",
	"/dev/shm",
	"/grants",
	"/hookbox",
	"/hookbox/etc",
	"/proc",
	"/run",
	"/run/hookbox",
	"/sys",
	"/sys/fs/cgroup",
	"/tmp",
	"/workspace",
}

// EntryType is the type of one filesystem entry. The base image has only
// directories and regular files: no symlinks, devices or hard links.
type EntryType uint8

// Entry types.
const (
	Dir EntryType = iota + 1
	File
)

func (t EntryType) String() string {
	switch t {
	case Dir:
		return "dir"
	case File:
		return "file"
	}
	return fmt.Sprintf("EntryType(%d)", uint8(t))
}

// Entry is one directory or regular file of the image. Every entry is owned
// by 0:0 and has the modification time [ModTime]; those are not fields
// because nothing may vary them.
type Entry struct {
	// Path is absolute and clean, e.g. "/etc/passwd".
	Path string
	Type EntryType
	// Mode holds the permission bits, plus fs.ModeSticky on a directory
	// (/tmp). Nothing else: no setuid, setgid, and no execute bit on a file.
	Mode fs.FileMode
	// Data is a file's content; nil for directories.
	Data []byte
}

// Config is the runtime part of the image config.
type Config struct {
	User       string // "uid:gid", numeric so no lookup is needed
	WorkingDir string
	Env        []string
	Labels     map[string]string
}

// Definition is the base image: its filesystem and its config. Both builders
// consume it; they must not add, drop or alter anything in it.
type Definition struct {
	// Entries in ascending Path order; every parent directory is listed
	// before its children ("/" is implicit).
	Entries  []Entry
	Config   Config
	Platform ocispec.Platform
}

// Errors.
var (
	// ErrInvalidDefinition is wrapped by every error of Definition.Validate.
	ErrInvalidDefinition = errors.New("images: invalid definition")
)

// NewDefinition returns the base image definition. caBundle, when non-empty,
// is installed at HostCABundlePath; it is an input so that tests can pass
// their own bytes. The image digest depends on it: hosts with different CA
// bundles build different base images (the directories /etc/ssl/certs exist
// either way).
//
// The platform is linux on the architecture hookbox was built for: the image
// holds no code, but containerd only unpacks an image whose config matches
// the host platform, so the digest also differs per architecture.
func NewDefinition(caBundle []byte) Definition {
	entries := []Entry{
		{Path: "/etc/passwd", Type: File, Mode: 0o644, Data: []byte(passwd)},
		{Path: "/etc/group", Type: File, Mode: 0o644, Data: []byte(group)},
		{Path: "/etc/nsswitch.conf", Type: File, Mode: 0o644, Data: []byte(nsswitch)},
		{Path: "/etc/hosts", Type: File, Mode: 0o644, Data: []byte(hosts)},
		{Path: "/etc/resolv.conf", Type: File, Mode: 0o644, Data: []byte{}},
	}
	if len(caBundle) > 0 {
		entries = append(entries, Entry{Path: HostCABundlePath, Type: File, Mode: 0o644, Data: slices.Clone(caBundle)})
	}
	dirs := append([]string{"/etc", "/etc/ssl", "/etc/ssl/certs"}, MountPoints...)
	for _, d := range dirs {
		// Parents of mount points (/sys/fs) come in as plain directories.
		for p := d; p != "/"; p = path.Dir(p) {
			entries = append(entries, Entry{Path: p, Type: Dir, Mode: 0o755})
		}
	}
	entries = sortUnique(entries)
	for i := range entries {
		if entries[i].Path == "/tmp" {
			entries[i].Mode = 0o777 | fs.ModeSticky
		}
	}
	return Definition{
		Entries: entries,
		Config: Config{
			User:       fmt.Sprintf("%d:%d", UID, GID),
			WorkingDir: "/workspace",
			Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
			Labels:     map[string]string{BaseLabel: "1"},
		},
		Platform: ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH},
	}
}

// HostDefinition is NewDefinition with the host's CA bundle from
// HostCABundlePath, or none when the host has no file there.
func HostDefinition() (Definition, error) {
	ca, err := os.ReadFile(HostCABundlePath)
	if errors.Is(err, fs.ErrNotExist) {
		return NewDefinition(nil), nil
	}
	if err != nil {
		return Definition{}, fmt.Errorf("images: reading the host CA bundle: %w", err)
	}
	return NewDefinition(ca), nil
}

// sortUnique sorts entries by path and drops later duplicates of a path.
func sortUnique(entries []Entry) []Entry {
	slices.SortStableFunc(entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	return slices.CompactFunc(entries, func(a, b Entry) bool { return a.Path == b.Path })
}

// Paths lists the entries' paths in order.
func (d Definition) Paths() []string {
	out := make([]string, len(d.Entries))
	for i, e := range d.Entries {
		out[i] = e.Path
	}
	return out
}

// Validate checks what both builders rely on: clean absolute paths in
// strictly ascending order, parents before children, only directories and
// regular files, no execute bit on any file, no special bit but a
// directory's sticky bit, every MountPoints path present as a directory, and
// a complete config.
func (d Definition) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidDefinition, fmt.Sprintf(format, args...))
	}
	dirs := map[string]bool{"/": true}
	for i, e := range d.Entries {
		if !path.IsAbs(e.Path) || path.Clean(e.Path) != e.Path || e.Path == "/" {
			return bad("%q is not a clean absolute path below /", e.Path)
		}
		if i > 0 && d.Entries[i-1].Path >= e.Path {
			return bad("%q is out of order or repeated", e.Path)
		}
		if !dirs[path.Dir(e.Path)] {
			return bad("%q has no parent directory entry before it", e.Path)
		}
		switch e.Type {
		case Dir:
			if e.Mode&^(fs.ModePerm|fs.ModeSticky) != 0 {
				return bad("directory %s has mode %v: only permission bits and sticky allowed", e.Path, e.Mode)
			}
			if e.Data != nil {
				return bad("directory %s has data", e.Path)
			}
			dirs[e.Path] = true
		case File:
			if e.Mode&^fs.ModePerm != 0 {
				return bad("file %s has mode %v: only permission bits allowed", e.Path, e.Mode)
			}
			if e.Mode&0o111 != 0 {
				return bad("file %s has an execute bit (%v): the base image carries no executables", e.Path, e.Mode)
			}
		default:
			return bad("%s has type %v", e.Path, e.Type)
		}
	}
	for _, m := range MountPoints {
		if !dirs[m] {
			return bad("mount point %s is not a directory entry", m)
		}
	}
	if d.Config.User == "" || d.Config.WorkingDir == "" {
		return bad("config needs User and WorkingDir")
	}
	if d.Platform.OS == "" || d.Platform.Architecture == "" {
		return bad("platform needs OS and Architecture")
	}
	return nil
}

// ImageConfig returns the OCI image config without rootfs and history,
// which each builder fills from its own layer.
func (d Definition) ImageConfig() ocispec.Image {
	created := ModTime()
	return ocispec.Image{
		Created:  &created,
		Platform: d.Platform,
		Config: ocispec.ImageConfig{
			User:       d.Config.User,
			Env:        slices.Clone(d.Config.Env),
			WorkingDir: d.Config.WorkingDir,
			Labels:     d.Config.Labels,
		},
	}
}

// UnixMode returns m as the mode bits of a tar header or chmod(2): the
// permission bits, with S_ISVTX (01000) for fs.ModeSticky.
func UnixMode(m fs.FileMode) int64 {
	u := int64(m.Perm())
	if m&fs.ModeSticky != 0 {
		u |= 0o1000
	}
	return u
}

// File contents. Root's home does not exist in the image; nobody logs in.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"hookbox:x:65532:65532:hookbox:" + Home + ":/sbin/nologin\n"
	group = "root:x:0:\n" +
		"hookbox:x:65532:\n"
	// Every database from files only, except hosts, which falls back to
	// DNS: the dns service is built into glibc ≥ 2.34 (no module to load),
	// and without it a spawn with network access could not resolve a name
	// even after the launcher mounts a real resolv.conf. With the image's
	// empty resolv.conf glibc asks 127.0.0.1, which fails fast in a
	// container without network.
	nsswitch = "passwd: files\n" +
		"group: files\n" +
		"shadow: files\n" +
		"gshadow: files\n" +
		"hosts: files dns\n" +
		"networks: files\n" +
		"protocols: files\n" +
		"services: files\n" +
		"ethers: files\n" +
		"rpc: files\n" +
		"netgroup: files\n"
	hosts = "127.0.0.1\tlocalhost\n" +
		"::1\tlocalhost ip6-localhost ip6-loopback\n"
)
