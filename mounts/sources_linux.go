package mounts

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/render"
)

// Validate checks a plan before the runtime sees it: first its shape
// (destinations absolute, clean, not under /proc, /sys or /dev, unique,
// parents first; types and options as MountPlan makes them), then, if the
// shape is sound, every bind source on the host: it exists, resolves inside
// its declared root (see the package doc), and is the kind of file its
// destination is. The run dir source must be a tmpfs mountpoint. Every
// problem is reported, joined; errors.Is selects categories.
func Validate(p Plan) error {
	return validate(p, func(Mount) bool { return false })
}

// ValidateBeforeLaunch is Validate for a plan shown before any run
// (`hookbox render --format oci`): the sources a run creates itself, host's
// run dir tmpfs, config dir and workspace store, do not exist yet and are
// skipped;
// every other check applies, so a plan it accepts fails at launch only if
// the host changed in between.
func ValidateBeforeLaunch(p Plan, host HostPaths) error {
	return validate(p, func(m Mount) bool {
		return (m.Type == TypeBind && (m.Source == host.RunDir || m.Source == host.ConfigDir)) ||
			(m.Type == TypeOverlay && m.Overlay != nil && filepath.Dir(m.Overlay.Upper) == host.WorkspaceStore)
	})
}

func validate(p Plan, createdByRun func(Mount) bool) error {
	if err := validateShape(p); err != nil {
		return err
	}
	var errs []error
	for i, m := range p.Mounts {
		if m.Type == TypeOverlay {
			errs = append(errs, checkOverlaySources(m, createdByRun(m))...)
			continue
		}
		if m.Type != TypeBind || createdByRun(m) {
			continue
		}
		if err := checkSource(m, declaredRoot(p, i)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkOverlaySources checks a workspace overlay's layers on the host: the
// lower layer like a workspace bind source (a real directory, not a
// symlink), and, unless the run has yet to create it, the workspace store:
// a tmpfs mountpoint holding real upper and work directories.
func checkOverlaySources(m Mount, storePending bool) []error {
	l := m.Overlay
	var errs []error
	if err := checkSource(Mount{Destination: m.Destination, Type: TypeBind, Source: l.Lower, DestKind: KindDir}, ""); err != nil {
		errs = append(errs, err)
	}
	if storePending {
		return errs
	}
	store := filepath.Dir(l.Upper)
	if e, err := mountAt(store); err != nil {
		errs = append(errs, fmt.Errorf("checking the workspace store %s: %w", store, err))
	} else if e == nil || e.FSType != "tmpfs" {
		errs = append(errs, fmt.Errorf("%w: the workspace store %s is not a tmpfs mountpoint; CreateWorkspaceStore there first", ErrWritable, store))
	}
	for _, dir := range []string{l.Upper, l.Work} {
		fd, err := openat2(unix.AT_FDCWD, dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: overlay layer %s for %s is not a real directory (%v); CreateWorkspaceStore makes it", ErrMissingSource, dir, m.Destination, err))
			continue
		}
		unix.Close(fd)
	}
	return errs
}

// rootSource is the host directory a mount declares: a bind's source, an
// overlay's lower layer.
func rootSource(m Mount) (string, bool) {
	switch {
	case m.Type == TypeBind:
		return m.Source, true
	case m.Type == TypeOverlay && m.Overlay != nil:
		return m.Overlay.Lower, true
	}
	return "", false
}

// declaredRoot returns the nearest other bind source that lexically
// contains mount i's source, or "" when the source is its own root.
func declaredRoot(p Plan, i int) string {
	src := p.Mounts[i].Source
	root := ""
	for j, m := range p.Mounts {
		declared, ok := rootSource(m)
		if j == i || !ok || declared == src || !render.Within(src, declared) {
			continue
		}
		if len(declared) > len(root) {
			root = declared
		}
	}
	return root
}

// checkSource opens m's source as Validate describes and checks its kind.
func checkSource(m Mount, root string) error {
	var fd int
	var err error
	if root == "" {
		// Its own root: the last component must not be a symlink; the
		// components above are the host layout the user chose.
		fd, err = openat2(unix.AT_FDCWD, m.Source, unix.O_PATH|unix.O_NOFOLLOW, 0, unix.RESOLVE_NO_MAGICLINKS)
	} else {
		var rootfd int
		rootfd, err = openat2(unix.AT_FDCWD, root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, unix.RESOLVE_NO_MAGICLINKS)
		if err != nil {
			return fmt.Errorf("%w: bind source %s for %s lies in %s, which cannot be opened as a real directory (%v); fix %s first", ErrMissingSource, m.Source, m.Destination, root, err, root)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(m.Source, root), "/")
		fd, err = openat2(rootfd, rel, unix.O_PATH, 0, beneathOnly)
		unix.Close(rootfd)
	}
	if err != nil {
		return sourceError(m, root, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("bind source %s for %s: %w", m.Source, m.Destination, err)
	}
	kind := st.Mode & unix.S_IFMT
	if kind == unix.S_IFLNK {
		target := make([]byte, unix.PathMax)
		n, _ := unix.Readlinkat(fd, "", target)
		return fmt.Errorf("%w: bind source %s for %s is a symlink to %q; declare the directory it points to instead", ErrEscapes, m.Source, m.Destination, target[:max(n, 0)])
	}
	want := uint32(unix.S_IFDIR)
	if m.DestKind == KindFile {
		want = unix.S_IFREG
	}
	if kind != want {
		return fmt.Errorf("%w: bind source %s is a %s but %s is a %s in the container; bind a %s there", ErrKindMismatch, m.Source, kindName(st.Mode), m.Destination, kindName(want), kindName(want))
	}
	if m.Destination == render.RunDir && !m.ReadOnly() {
		e, err := mountAt(m.Source)
		if err != nil {
			return fmt.Errorf("checking the run dir source %s: %w", m.Source, err)
		}
		if e == nil || e.FSType != "tmpfs" {
			return fmt.Errorf("%w: the writable run dir source %s is not a tmpfs mountpoint; Create the tmpfs there first", ErrWritable, m.Source)
		}
	}
	return nil
}

// sourceError turns an open error into a category with a fix.
func sourceError(m Mount, root string, err error) error {
	switch {
	case errors.Is(err, ErrNotSupported):
		return err
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%w: bind source %s for %s does not exist; create it or fix the path in the spec", ErrMissingSource, m.Source, m.Destination)
	case root != "" && errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%w: bind source %s for %s follows a symlink out of %s, the directory that declares it; grant the target directory itself, or remove the link", ErrEscapes, m.Source, m.Destination, root)
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%w: bind source %s for %s goes through a /proc magic link or a symlink loop; declare a plain host path", ErrEscapes, m.Source, m.Destination)
	}
	return fmt.Errorf("bind source %s for %s: %w", m.Source, m.Destination, err)
}
