package mounts

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	hostfacts "hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/render"
)

// tmpfsFlags are the mount flags of the host tmpfs run dir.
const tmpfsFlags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

// runSubdirs are the directories Create makes in the run dir, relative to it.
var runSubdirs = []string{
	strings.TrimPrefix(render.HomeDir, render.RunDir+"/"),
	strings.TrimPrefix(render.OutDir, render.RunDir+"/"),
}

// Create mounts the run's tmpfs at path on the host: size.Bytes (rounded
// up to whole pages by the kernel) and size.Inodes (nr_inodes: creating
// more files fails with ENOSPC), mode 0700, owned by uid:gid, nosuid,
// nodev, noexec; then creates the home and out directories
// (render.HomeDir, render.OutDir) owned by uid:gid, mode 0700. Missing
// parents of path are created 0700.
//
// Create is idempotent: if a tmpfs with exactly these options is already
// mounted at path, it only makes sure home and out exist. Anything else
// mounted there is ErrMountConflict, as is a non-empty unmounted directory
// (mounting over it would hide files Unmount could not then remove) or a
// symlink at path. If a step after the mount fails, Create unmounts again.
// Needs CAP_SYS_ADMIN.
func Create(path string, size TmpfsSize, uid, gid int) error {
	if err := size.check("tmpfs at " + path); err != nil {
		return err
	}
	if uid < 0 || gid < 0 {
		return fmt.Errorf("%w: tmpfs at %s needs a non-negative owner, got %d:%d", ErrInvalid, path, uid, gid)
	}
	p, err := mountPath(path)
	if err != nil && !isNotExist(err) {
		return err
	}
	if isNotExist(err) {
		if err := os.MkdirAll(path, 0o700); err != nil {
			return fmt.Errorf("creating tmpfs mountpoint: %w", err)
		}
		if p, err = mountPath(path); err != nil {
			return err
		}
	}
	fi, err := os.Lstat(p)
	switch {
	case isNotExist(err):
		if err := os.Mkdir(p, 0o700); err != nil {
			return fmt.Errorf("creating tmpfs mountpoint: %w", err)
		}
	case err != nil:
		return fmt.Errorf("tmpfs mountpoint: %w", err)
	case fi.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%w: tmpfs mountpoint %s is a symlink; pass a real directory path", ErrEscapes, p)
	case !fi.IsDir():
		return fmt.Errorf("%w: tmpfs mountpoint %s is a %s, not a directory; remove it or choose another path", ErrMountConflict, p, fi.Mode().Type())
	}
	e, err := mountAt(p)
	if err != nil {
		return err
	}
	if e != nil {
		if why := differsFrom(e, size, uid, gid); why != "" {
			return fmt.Errorf("%w: %s is already mounted (%s %s, %s); Unmount it or choose another path", ErrMountConflict, p, e.FSType, strings.Join(e.SuperOptions, ","), why)
		}
		return makeRunSubdirs(p, uid, gid)
	}
	if err := requireEmptyDir(p); err != nil {
		return err
	}
	data := fmt.Sprintf("%s,mode=%04o,uid=%d,gid=%d", size.options(), runDirMode, uid, gid)
	if err := unix.Mount("tmpfs", p, "tmpfs", tmpfsFlags, data); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("mounting tmpfs at %s: %w (needs root or CAP_SYS_ADMIN)", p, err)
		}
		return fmt.Errorf("mounting tmpfs at %s: %w", p, err)
	}
	if err := makeRunSubdirs(p, uid, gid); err != nil {
		if uerr := Unmount(p); uerr != nil {
			return errors.Join(err, fmt.Errorf("undoing the tmpfs mount: %w", uerr))
		}
		return err
	}
	return nil
}

// check refuses a size Create or CreateWorkspaceStore cannot mount.
func (s TmpfsSize) check(what string) error {
	if s.Bytes <= 0 || s.Inodes <= 0 {
		return fmt.Errorf("%w: %s needs a positive size and inode limit, got %d bytes and %d inodes", ErrInvalid, what, s.Bytes, s.Inodes)
	}
	return nil
}

// options are s as tmpfs mount data.
func (s TmpfsSize) options() string {
	return fmt.Sprintf("size=%d,nr_inodes=%d", s.Bytes, s.Inodes)
}

// differsFrom says how mount e differs from the tmpfs Create would make,
// or "" when it is the same.
func differsFrom(e *hostfacts.Mount, size TmpfsSize, uid, gid int) string {
	if e.FSType != "tmpfs" {
		return "not a tmpfs"
	}
	for _, f := range hardening {
		if !slices.Contains(e.Options, f) {
			return "not " + f
		}
	}
	opts := map[string]string{"mode": "1777", "uid": "0", "gid": "0"} // the kernel omits defaults
	for _, o := range e.SuperOptions {
		if k, v, ok := strings.Cut(o, "="); ok {
			opts[k] = v
		}
	}
	page := int64(os.Getpagesize())
	if want := (size.Bytes + page - 1) / page * page; parseSize(opts["size"]) != want {
		return fmt.Sprintf("size %s, want %d bytes", opts["size"], want)
	}
	if got := inodesOption(opts["nr_inodes"]); got != size.Inodes {
		return fmt.Sprintf("nr_inodes %d, want %d", got, size.Inodes)
	}
	if mode, err := strconv.ParseUint(opts["mode"], 8, 32); err != nil || mode != runDirMode {
		return "mode " + opts["mode"] + ", want 700"
	}
	if opts["uid"] != strconv.Itoa(uid) || opts["gid"] != strconv.Itoa(gid) {
		return fmt.Sprintf("owner %s:%s, want %d:%d", opts["uid"], opts["gid"], uid, gid)
	}
	return ""
}

// parseSize reads a tmpfs size= value as the kernel prints it (e.g. 980k),
// or -1.
func parseSize(s string) int64 {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "k"):
		mult = 1 << 10
	case strings.HasSuffix(s, "m"):
		mult = 1 << 20
	case strings.HasSuffix(s, "g"):
		mult = 1 << 30
	}
	n, err := strconv.ParseInt(strings.TrimRight(s, "kmg"), 10, 64)
	if err != nil {
		return -1
	}
	return n * mult
}

// inodesOption reads a tmpfs nr_inodes= value as mountinfo shows it: the
// kernel omits it when it is its default, half the RAM pages
// (shmem_default_max_inodes on a 64-bit kernel). -1 if unknown.
func inodesOption(s string) int64 {
	if s == "" {
		var si unix.Sysinfo_t
		if err := unix.Sysinfo(&si); err != nil {
			return -1
		}
		return int64(si.Totalram) * int64(si.Unit) / int64(os.Getpagesize()) / 2
	}
	return parseSize(s)
}

func requireEmptyDir(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("tmpfs mountpoint: %w", err)
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if len(names) > 0 {
		return fmt.Errorf("%w: tmpfs mountpoint %s is not empty (holds %q); mounting over it would hide files, so empty it or choose another path", ErrMountConflict, p, names[0])
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("reading tmpfs mountpoint %s: %w", p, err)
	}
	return nil
}

// makeRunSubdirs creates home and out in the tmpfs at p, never following
// a symlink.
func makeRunSubdirs(p string, uid, gid int) error {
	rootfd, err := openat2(unix.AT_FDCWD, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		return fmt.Errorf("opening tmpfs %s: %w", p, err)
	}
	defer unix.Close(rootfd)
	for _, name := range runSubdirs {
		if _, err := mkdirOwned(rootfd, name, 0o700, uid, gid); err != nil {
			return fmt.Errorf("creating %s in tmpfs %s: %w", name, p, err)
		}
	}
	return nil
}

// mkdirOwned makes directory name in dirfd (or accepts an existing one,
// never a symlink) and, when it made it, sets its mode and owner. It
// returns an fd of the directory.
func mkdirOwned(dirfd int, name string, mode uint32, uid, gid int) (int, error) {
	made := true
	if err := unix.Mkdirat(dirfd, name, mode); errors.Is(err, unix.EEXIST) {
		made = false
	} else if err != nil {
		return -1, err
	}
	fd, err := openat2(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, beneathNoSymlinks)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, fmt.Errorf("%w: %s exists and is not a directory (symlinks are never followed)", ErrEscapes, name)
		}
		return -1, err
	}
	if made {
		if err := unix.Fchmod(fd, mode); err != nil {
			unix.Close(fd)
			return -1, err
		}
		if err := unix.Fchown(fd, uid, gid); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// Seed writes the files under render.RunDir into the tmpfs mounted at path
// (their path relative to render.RunDir), owned by uid:gid, with each
// File.Mode's permission bits (0600 when zero; setuid, setgid and sticky
// are dropped). Missing parent directories are made 0700 and owned by
// uid:gid. Existing files are overwritten. Files elsewhere (the config dir)
// are not Seed's and are ignored. A path that is not absolute and clean,
// or is the run dir itself, is refused with ErrEscapes before anything is
// written; no symlink in the tmpfs is ever followed.
func Seed(path string, files []render.File, uid, gid int) error {
	var mine []render.File
	for _, f := range files {
		if !isClean(f.Path) {
			return fmt.Errorf("%w: generated file %q is not an absolute, clean path; fix the render", ErrEscapes, f.Path)
		}
		if f.Path == render.RunDir {
			return fmt.Errorf("%w: generated file %s would replace the run dir itself; name a file under it", ErrEscapes, f.Path)
		}
		if render.Within(f.Path, render.RunDir) {
			mine = append(mine, f)
		}
	}
	if len(mine) == 0 {
		return nil
	}
	rootfd, err := openat2(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		return fmt.Errorf("opening tmpfs %s to seed it: %w", path, err)
	}
	defer unix.Close(rootfd)
	for _, f := range mine {
		if err := seedFile(rootfd, f, uid, gid); err != nil {
			return fmt.Errorf("seeding %s into %s: %w", f.Path, path, err)
		}
	}
	return nil
}

func seedFile(rootfd int, f render.File, uid, gid int) error {
	rel := strings.TrimPrefix(f.Path, render.RunDir+"/")
	dir, base := path.Split(rel)
	dirfd, err := unix.Dup(rootfd)
	if err != nil {
		return err
	}
	defer func() { unix.Close(dirfd) }()
	for _, name := range strings.Split(strings.TrimSuffix(dir, "/"), "/") {
		if name == "" {
			continue
		}
		next, err := mkdirOwned(dirfd, name, 0o700, uid, gid)
		if err != nil {
			return err
		}
		unix.Close(dirfd)
		dirfd = next
	}
	mode := f.Mode & 0o777
	if mode == 0 {
		mode = 0o600
	}
	fd, err := openat2(dirfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW, 0o600, beneathNoSymlinks)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return fmt.Errorf("%w: %s is a symlink in the tmpfs (never followed)", ErrEscapes, rel)
		}
		return err
	}
	file := os.NewFile(uintptr(fd), f.Path)
	defer file.Close()
	if _, err := file.WriteString(f.Content); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return err
	}
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return err
	}
	return file.Close()
}

// Unmount unmounts the tmpfs at path and removes the directory. It is
// retry-safe (docs/contracts.md §2): a path that is missing or not
// mounted counts as unmounted. A busy mount (a process still has a file
// open there) is detached lazily: it disappears from the host at once and
// its memory is freed when the last user lets go. Stacked tmpfs mounts are
// all removed.
// Unmount refuses (ErrMountConflict) to touch a mount that is not a tmpfs,
// and to remove a directory that is not empty once unmounted (something
// wrote into the mountpoint itself, under the tmpfs; inspect it by hand).
func Unmount(path string) error {
	p, err := mountPath(path)
	if isNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for range 16 {
		e, err := mountAt(p)
		if err != nil {
			return err
		}
		if e == nil {
			break
		}
		if e.FSType != "tmpfs" {
			return fmt.Errorf("%w: refusing to unmount %s: it is a %s mount, not a hookbox tmpfs", ErrMountConflict, p, e.FSType)
		}
		err = unix.Unmount(p, unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(p, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmounting tmpfs %s: %w", p, err)
		}
	}
	if e, err := mountAt(p); err != nil {
		return err
	} else if e != nil {
		return fmt.Errorf("%w: %s is still mounted after 16 unmounts; inspect /proc/self/mountinfo", ErrMountConflict, p)
	}
	switch err := unix.Rmdir(p); {
	case err == nil, errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
		return fmt.Errorf("%w: %s is unmounted but not empty (files under the mountpoint); inspect and remove it by hand", ErrMountConflict, p)
	default:
		return fmt.Errorf("removing tmpfs mountpoint %s: %w", p, err)
	}
}

// IsMounted reports whether something is mounted at path (per
// /proc/self/mountinfo). A missing path is not mounted. Symlinks in the
// parent directories are resolved; path itself is taken as is.
func IsMounted(path string) (bool, error) {
	p, err := mountPath(path)
	if isNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	e, err := mountAt(p)
	return e != nil, err
}

// mountPath returns the absolute path mountinfo would show for path: its
// parent with symlinks resolved, then its last component as given. It
// fails with a not-exist error when the parent is missing.
func mountPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if abs == "/" {
		return abs, nil
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", err
	}
	return filepath.Join(parent, filepath.Base(abs)), nil
}

// mountAt returns the topmost mount at mountpoint p (already absolute and
// resolved), or nil.
func mountAt(p string) (*hostfacts.Mount, error) {
	mounts, err := hostfacts.Mounts()
	if err != nil {
		return nil, err
	}
	return hostfacts.TopmostAt(mounts, p), nil
}
