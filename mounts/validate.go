package mounts

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"hookbox.dev/hookbox/render"
)

// Error categories. Every error wraps one of them and names the path
// concerned and how to fix it; errors.Is selects the category.
var (
	// ErrInvalid: a malformed plan, render, host path or argument.
	ErrInvalid = errors.New("invalid mount")
	// ErrInvalidDestination: a destination that is not absolute and clean.
	ErrInvalidDestination = errors.New("invalid mount destination")
	// ErrForbiddenDestination: a destination at or under /proc, /sys, /dev,
	// or the root itself.
	ErrForbiddenDestination = errors.New("forbidden mount destination")
	// ErrDuplicate: two mounts at one destination.
	ErrDuplicate = errors.New("duplicate mount destination")
	// ErrOrder: a mount listed before the mount of its parent directory.
	ErrOrder = errors.New("mount listed before its parent")
	// ErrWritable: a writable mount other than the tmpfs run dir, or a run
	// dir source that is not a tmpfs mount.
	ErrWritable = errors.New("writable mount")
	// ErrMissingSource: a bind source that does not exist.
	ErrMissingSource = errors.New("missing mount source")
	// ErrEscapes: a path that resolves outside the root it was declared in
	// (through a symlink, "..", a magic link or another mount).
	ErrEscapes = errors.New("path escapes its root")
	// ErrKindMismatch: a bind source whose kind (file, directory…) differs
	// from what the destination is.
	ErrKindMismatch = errors.New("mount source kind mismatch")
	// ErrMountConflict: something else is already mounted at a path, or the
	// path is not in the state a tmpfs operation expects.
	ErrMountConflict = errors.New("mount conflict")
	// ErrNotSupported: the kernel lacks a feature (openat2 needs Linux ≥ 5.6).
	ErrNotSupported = errors.New("not supported by this kernel")
)

// forbiddenRoots are the kernel filesystems the runtime sets up itself;
// nothing may be mounted on or under them.
var forbiddenRoots = []string{"/proc", "/sys", "/dev"}

// validateShape is the pure part of Validate: destinations, types, options
// and order. It reports every problem, joined.
func validateShape(p Plan) error {
	var errs []error
	seen := map[string]bool{}
	for i, m := range p.Mounts {
		if err := checkDestination(m.Destination); err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[m.Destination] {
			errs = append(errs, fmt.Errorf("%w: %s is mounted twice; remove one of the mounts", ErrDuplicate, m.Destination))
		}
		seen[m.Destination] = true
		for _, later := range p.Mounts[i+1:] {
			if later.Destination != m.Destination && render.Within(m.Destination, later.Destination) {
				errs = append(errs, fmt.Errorf("%w: %s is listed before its parent %s, which would hide it; sort the plan with SortMounts", ErrOrder, m.Destination, later.Destination))
			}
		}
		errs = append(errs, checkOptions(m)...)
	}
	return errors.Join(errs...)
}

// checkDestination checks one container path.
func checkDestination(d string) error {
	switch {
	case d == "":
		return fmt.Errorf("%w: a mount has no destination; give it an absolute container path", ErrInvalidDestination)
	case !path.IsAbs(d):
		return fmt.Errorf("%w: %q is relative; write it as an absolute container path (e.g. /%s)", ErrInvalidDestination, d, d)
	case path.Clean(d) != d:
		return fmt.Errorf("%w: %q is not clean; write it as %s", ErrInvalidDestination, d, path.Clean(d))
	case d == "/":
		return fmt.Errorf("%w: / would hide the root filesystem; mount at a directory below it", ErrForbiddenDestination)
	}
	for _, root := range forbiddenRoots {
		if render.Within(d, root) {
			return fmt.Errorf("%w: %s is under %s, which the runtime provides; choose a destination outside /proc, /sys and /dev", ErrForbiddenDestination, d, root)
		}
	}
	return nil
}

// checkOptions checks a mount's type, source and options against what the
// plan promises: hardened, read-only except the run dir, tmpfs limited in
// size and inodes.
func checkOptions(m Mount) []error {
	var errs []error
	bad := func(sentinel error, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...))
	}
	for _, o := range hardening {
		if !slices.Contains(m.Options, o) {
			bad(ErrInvalid, "mount at %s lacks %s; every hookbox mount is nosuid, nodev and noexec", m.Destination, o)
		}
	}
	if m.DestKind != KindDir && m.DestKind != KindFile {
		bad(ErrInvalid, "mount at %s has destination kind %q; use %q or %q", m.Destination, m.DestKind, KindDir, KindFile)
	}
	recursiveOpts := true
	for _, o := range recursiveReadOnly {
		recursiveOpts = recursiveOpts && slices.Contains(m.Options, o)
	}
	switch m.Type {
	case TypeBind:
		if !isClean(m.Source) {
			bad(ErrInvalid, "bind source %q for %s must be an absolute, clean host path", m.Source, m.Destination)
		}
		rbind := slices.Contains(m.Options, "rbind")
		if !rbind && !slices.Contains(m.Options, "bind") {
			bad(ErrInvalid, "bind mount at %s has neither bind nor rbind; add bind", m.Destination)
		}
		switch {
		case !m.ReadOnly() && m.Destination != render.RunDir:
			bad(ErrWritable, "bind mount at %s (from %s) is writable; only the tmpfs run dir %s may be, add ro", m.Destination, m.Source, render.RunDir)
		case m.RecursiveReadOnly && (!rbind || !recursiveOpts):
			bad(ErrInvalid, "bind mount at %s claims recursive read-only but lacks rbind, rro, rnosuid, rnodev or rnoexec", m.Destination)
		case rbind && !m.RecursiveReadOnly:
			bad(ErrInvalid, "bind mount at %s is rbind without recursive read-only, so mounts under %s would stay writable; use bind, or rro with a kernel ≥ 5.12", m.Destination, m.Source)
		}
	case TypeTmpfs:
		if m.DestKind != KindDir {
			bad(ErrKindMismatch, "tmpfs at %s is a directory but the destination is a %s; mount it on a directory", m.Destination, m.DestKind)
		}
		if size, ok := optionValue(m.Options, "size"); !ok {
			bad(ErrInvalid, "tmpfs at %s has no size= option; an unlimited tmpfs can take half the host's memory", m.Destination)
		} else if n, err := strconv.ParseInt(size, 10, 64); err != nil || n <= 0 {
			bad(ErrInvalid, "tmpfs at %s has size=%s; give a positive number of bytes", m.Destination, size)
		}
		if inodes, ok := optionValue(m.Options, "nr_inodes"); !ok {
			bad(ErrInvalid, "tmpfs at %s has no nr_inodes= option; without one it holds as many empty files as half the host's RAM pages", m.Destination)
		} else if n, err := strconv.ParseInt(inodes, 10, 64); err != nil || n <= 0 {
			bad(ErrInvalid, "tmpfs at %s has nr_inodes=%s; give a positive number", m.Destination, inodes)
		}
	case TypeOverlay:
		errs = append(errs, checkOverlay(m)...)
	default:
		bad(ErrInvalid, "mount at %s has type %q; use %q, %q or %q", m.Destination, m.Type, TypeBind, TypeTmpfs, TypeOverlay)
	}
	if m.Overlay != nil && m.Type != TypeOverlay {
		bad(ErrInvalid, "%s mount at %s has overlay layers", m.Type, m.Destination)
	}
	return errs
}

// optionValue returns the value of the last key=value option.
func optionValue(opts []string, key string) (string, bool) {
	for _, o := range slices.Backward(opts) {
		if v, ok := strings.CutPrefix(o, key+"="); ok {
			return v, true
		}
	}
	return "", false
}
