package mounts

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"hookbox.dev/hookbox/render"
)

// Mount types.
const (
	TypeBind  = "bind"
	TypeTmpfs = "tmpfs"
)

// FileKind is what a mount destination is in the container's rootfs, and so
// what a bind source must be.
type FileKind string

// File kinds.
const (
	KindDir  FileKind = "dir"
	KindFile FileKind = "file"
)

// Mount is one mount of the container, in the shape the oci package converts
// to a runtime-spec mount (Destination, Type, Source, Options map 1:1).
type Mount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options"`
	// RecursiveReadOnly says read-only (and nosuid, nodev, noexec) apply to
	// every mount under Source too: Options carry "rro", "rnosuid",
	// "rnodev", "rnoexec", which need Linux ≥ 5.12 and runc ≥ 1.1.
	RecursiveReadOnly bool `json:"recursive_read_only,omitempty"`
	// DestKind is what exists at Destination in the rootfs. Every mount
	// hookbox plans lands on a directory; a bind source must match it.
	DestKind FileKind `json:"dest_kind"`
	// Overlay holds the layers of the workspace overlay (TypeOverlay),
	// which its Options carry too.
	Overlay *OverlayLayers `json:"overlay,omitempty"`
}

// ReadOnly reports whether m is mounted read-only.
func (m Mount) ReadOnly() bool { return slices.Contains(m.Options, "ro") }

// Plan is the ordered list of mounts of a run, parents before children.
type Plan struct {
	Mounts []Mount `json:"mounts"`
	// RunDir is the size of the host tmpfs to Create at the run dir's host
	// path.
	RunDir TmpfsSize `json:"run_dir"`
	// WorkspaceStore is the size of the tmpfs to CreateWorkspaceStore at
	// HostPaths.WorkspaceStore; zero without a workspace overlay.
	WorkspaceStore TmpfsSize `json:"workspace_store,omitzero"`
	// Notes say what the plan could not do on this host (e.g. recursive
	// read-only) and what it did instead.
	Notes []string `json:"notes,omitempty"`
}

// TmpfsSize is what a tmpfs may hold: Bytes of content (rounded up to
// whole pages by the kernel) and Inodes, one per file, directory or
// symlink, its root included (nr_inodes). A tmpfs without nr_inodes gets
// half the host's RAM pages as inodes, and an empty file costs an inode but
// none of the size: a 1Mi tmpfs could hold millions of them.
type TmpfsSize struct {
	Bytes  int64 `json:"bytes"`
	Inodes int64 `json:"inodes"`
}

// RunDirSize is the size of r's run dir tmpfs (and of an overlay
// workspace's store): the render's limits.
func RunDirSize(r *render.Render) TmpfsSize {
	return TmpfsSize{Bytes: r.Limits.TmpfsBytes, Inodes: r.Limits.TmpfsInodes}
}

// HostPaths are the host paths the launcher prepared for one run.
type HostPaths struct {
	// ConfigDir holds the render's files under render.ConfigDir, at the
	// same relative paths; it is bound read-only at render.ConfigDir. Empty
	// means no config dir mount, which is refused if the render has such
	// files.
	ConfigDir string
	// RunDir is the host mountpoint of the run's tmpfs (see Create); it is
	// bound read-write at render.RunDir.
	RunDir string
	// WorkspaceStore is the host mountpoint of the tmpfs holding the upper
	// and work directories of a workspace overlay (CreateWorkspaceStore);
	// used only when the render has one.
	WorkspaceStore string
}

// Features are what this host's kernel and runtime support.
type Features struct {
	// RecursiveReadOnly: mount_setattr with AT_RECURSIVE is available
	// (ProbeRecursiveReadOnly) and the runtime understands "rro" (runc ≥ 1.1).
	RecursiveReadOnly bool
}

// DefaultTmpMode is the mode of the container's /tmp unless the render says
// otherwise.
const DefaultTmpMode = 0o1777

// runDirMode is the mode Create gives the host tmpfs.
const runDirMode = 0o700

// Option sets hookbox applies.
var (
	hardening         = []string{"nosuid", "nodev", "noexec"}
	recursiveReadOnly = []string{"rro", "rnosuid", "rnodev", "rnoexec"}
)

// MountPlan returns the mounts of the container for r on a host with the
// given paths and features, sorted parents first and checked with the pure
// part of Validate (destinations, types, options, order). It touches no
// filesystem: call Validate on the result once the host paths exist.
//
// Render mounts map as follows: a read-only bind stays a bind of the same
// source; the tmpfs at render.RunDir becomes a read-write bind of
// host.RunDir; any other tmpfs is a container tmpfs of the render's size and
// inode limit.
// The config dir mount is added when host.ConfigDir is set. A render option
// the plan would not apply (anything but ro, nosuid, nodev, noexec and a
// tmpfs mode=) is refused rather than dropped.
func MountPlan(r *render.Render, host HostPaths, feat Features) (Plan, error) {
	if r == nil {
		return Plan{}, fmt.Errorf("%w: no render to plan mounts for", ErrInvalid)
	}
	var p Plan
	var recursive, flat []string
	sawRunDir := false
	for _, rm := range r.Mounts {
		mode, err := renderOptions(rm)
		if err != nil {
			return Plan{}, err
		}
		switch {
		case rm.Kind == render.MountBind:
			if !rm.ReadOnly {
				return Plan{}, fmt.Errorf("%w: bind mount at %s is read-write; only the tmpfs run dir %s is writable, so mark it read-only", ErrWritable, rm.Destination, render.RunDir)
			}
			m := Mount{Destination: rm.Destination, Type: TypeBind, Source: rm.Source, DestKind: KindDir}
			if feat.RecursiveReadOnly {
				m.Options = slices.Concat([]string{"rbind", "ro"}, hardening, recursiveReadOnly)
				m.RecursiveReadOnly = true
				recursive = append(recursive, m.Destination)
			} else {
				m.Options = slices.Concat([]string{"bind", "ro"}, hardening)
				flat = append(flat, m.Destination)
			}
			p.Mounts = append(p.Mounts, m)
		case rm.Kind == render.MountOverlay:
			m, err := planOverlay(rm, host)
			if err != nil {
				return Plan{}, err
			}
			p.WorkspaceStore = RunDirSize(r)
			p.Mounts = append(p.Mounts, m)
			p.Notes = append(p.Notes, "workspace "+rm.Source+" is a writable overlay; its changes stay in the workspace store and mounts under it are not visible in the container")
		case rm.Kind == render.MountTmpfs && rm.Destination == render.RunDir:
			if mode >= 0 && mode != runDirMode {
				return Plan{}, fmt.Errorf("%w: tmpfs run dir %s asks for mode=%o; the host tmpfs is always created 0700, remove the option", ErrInvalid, rm.Destination, mode)
			}
			if host.RunDir == "" {
				return Plan{}, fmt.Errorf("%w: no host path for the tmpfs run dir %s; Create a tmpfs and pass its path as HostPaths.RunDir", ErrInvalid, rm.Destination)
			}
			if rm.SizeBytes <= 0 || rm.Inodes <= 0 {
				return Plan{}, fmt.Errorf("%w: tmpfs run dir %s has no size or no inode limit; recompile the spec (limits.tmpfs, limits.tmpfsInodes)", ErrInvalid, rm.Destination)
			}
			sawRunDir = true
			p.RunDir = TmpfsSize{Bytes: rm.SizeBytes, Inodes: rm.Inodes}
			p.Mounts = append(p.Mounts, Mount{
				Destination: rm.Destination, Type: TypeBind, Source: host.RunDir,
				Options: slices.Concat([]string{"bind", "rw"}, hardening), DestKind: KindDir,
			})
		case rm.Kind == render.MountTmpfs:
			if rm.SizeBytes <= 0 || rm.Inodes <= 0 {
				return Plan{}, fmt.Errorf("%w: tmpfs at %s has no size or no inode limit; an unlimited tmpfs can take half the host's memory, recompile the spec (limits.tmpfs, limits.tmpfsInodes)", ErrInvalid, rm.Destination)
			}
			if mode < 0 {
				mode = DefaultTmpMode
			}
			p.Mounts = append(p.Mounts, Mount{
				Destination: rm.Destination, Type: TypeTmpfs, Source: TypeTmpfs,
				Options: slices.Concat(hardening, []string{
					"mode=" + fmt.Sprintf("%04o", mode),
					"size=" + strconv.FormatInt(rm.SizeBytes, 10),
					"nr_inodes=" + strconv.FormatInt(rm.Inodes, 10),
				}),
				DestKind: KindDir,
			})
		default:
			return Plan{}, fmt.Errorf("%w: mount at %s has kind %q; use %q, %q or (the workspace) %q", ErrInvalid, rm.Destination, rm.Kind, render.MountBind, render.MountTmpfs, render.MountOverlay)
		}
	}
	if !sawRunDir {
		return Plan{}, fmt.Errorf("%w: the render has no tmpfs at %s; recompile the spec (the run dir holds HOME and outputs)", ErrInvalid, render.RunDir)
	}
	if err := checkFilesPlaced(r.Files, host); err != nil {
		return Plan{}, err
	}
	if host.ConfigDir != "" {
		p.Mounts = append(p.Mounts, Mount{
			Destination: render.ConfigDir, Type: TypeBind, Source: host.ConfigDir,
			Options: slices.Concat([]string{"bind", "ro"}, hardening), DestKind: KindDir,
		})
	}
	SortMounts(p.Mounts)
	if len(recursive) > 0 {
		p.Notes = append(p.Notes, "recursive read-only applied (rro, rnosuid, rnodev, rnoexec) to "+strings.Join(recursive, ", "))
	}
	if len(flat) > 0 {
		p.Notes = append(p.Notes, "recursive read-only unavailable (needs Linux ≥ 5.12): "+strings.Join(flat, ", ")+
			" bound non-recursively read-only; mounts under those sources are not visible in the container")
	}
	if err := validateShape(p); err != nil {
		return Plan{}, err
	}
	return p, nil
}

// renderOptions checks a render mount's options against what the plan
// applies anyway and returns its mode= value, or -1 without one.
func renderOptions(rm render.Mount) (int64, error) {
	mode := int64(-1)
	for _, o := range rm.Options {
		switch {
		case o == "ro" || slices.Contains(hardening, o):
		case strings.HasPrefix(o, "mode=") && rm.Kind == render.MountTmpfs:
			v, err := strconv.ParseInt(strings.TrimPrefix(o, "mode="), 8, 32)
			if err != nil || v < 0 || v > 0o1777 {
				return 0, fmt.Errorf("%w: mount at %s has option %q; write an octal mode no larger than 1777, e.g. mode=1777", ErrInvalid, rm.Destination, o)
			}
			mode = v
		default:
			return 0, fmt.Errorf("%w: mount at %s has option %q, which hookbox does not apply; remove it (every mount is already nosuid, nodev, noexec)", ErrInvalid, rm.Destination, o)
		}
	}
	return mode, nil
}

// checkFilesPlaced refuses generated files that no mount would carry into
// the container: each must be under render.ConfigDir (with a host config
// dir) or under render.RunDir (seeded into the tmpfs).
func checkFilesPlaced(files []render.File, host HostPaths) error {
	for _, f := range files {
		switch {
		case render.Within(f.Path, render.RunDir) && f.Path != render.RunDir:
		case render.Within(f.Path, render.ConfigDir) && f.Path != render.ConfigDir:
			if host.ConfigDir == "" {
				return fmt.Errorf("%w: generated file %s needs the config dir; write the files to a host directory and pass it as HostPaths.ConfigDir", ErrInvalid, f.Path)
			}
		default:
			return fmt.Errorf("%w: generated file %s is under neither %s nor %s, so no mount carries it; fix the render", ErrInvalid, f.Path, render.ConfigDir, render.RunDir)
		}
	}
	return nil
}

// SortMounts orders mounts so every parent comes before its children: it
// sorts destinations component by component ("/a" < "/a/b" < "/a-b"), which
// is also a deterministic total order. The sort is stable.
func SortMounts(ms []Mount) {
	slices.SortStableFunc(ms, func(a, b Mount) int { return render.ComparePaths(a.Destination, b.Destination) })
}

// isClean reports whether p is absolute and already in path.Clean form.
func isClean(p string) bool {
	return path.IsAbs(p) && path.Clean(p) == p
}
