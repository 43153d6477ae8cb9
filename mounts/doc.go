// Package mounts owns the mount plan of a run, its validation, the host
// tmpfs run dir's lifecycle and the harvest of that tmpfs into the run
// record. It must not create containers: the oci package turns a Plan into
// runtime-spec mounts and the launcher runs them.
//
// # The plan
//
// MountPlan is pure: from a render, the host paths the launcher prepared and
// the host's features it returns the ordered mounts of the container
// (parents before children). Every bind is read-only except the tmpfs run
// dir, and every mount is nosuid, nodev and noexec: the only programs that
// can run are declared runfiles, which the runfiles stage mounts itself.
//
// Read-only binds of user directories (workspace, grants) are recursive
// ("rbind" + "rro", "rnosuid", "rnodev", "rnoexec") when the kernel has
// mount_setattr (Linux ≥ 5.12) and the runtime knows the options (runc ≥
// 1.1). Without that, a recursive bind would leave every mount found under
// the source writable and executable in the container, so the plan falls
// back to a non-recursive "bind": mounts under the source are then not
// visible in the container at all, and the plan says so in a note.
//
// # Validation and declared roots
//
// Validate checks a plan before it is handed to the runtime. Every bind
// source is a declared root (the workspace, an addDir, the config dir, the
// tmpfs run dir). A source lexically inside another declared root is
// resolved beneath the nearest such root (openat2 RESOLVE_BENEATH |
// RESOLVE_NO_MAGICLINKS): symlinks are followed only while they stay inside
// it, so a grant declared as <workspace>/link with link → /etc is refused.
// A source that is its own root must not itself be a symlink (declare the
// directory it points to instead); the components above it are the host
// layout the user chose and are resolved normally, magic links excepted.
// Validate checks the filesystem as it is when called: the launcher calls
// it after Create, Seed and writing the config dir, right before the
// container is created. A host user who can rename directories between
// that check and the runtime's mount is out of scope; the check protects
// against symlinks carried by workspace content.
//
// # The tmpfs run dir
//
// Create mounts a tmpfs limited in size and inodes (TmpfsSize) on the host
// (mode 0700, owned by the container user, nosuid/nodev/noexec), so it
// outlives the container and can be harvested on success, failure,
// timeout or kill alike. Seed writes the render's files under
// render.RunDir into it. Harvest copies it out without following a single
// symlink, at most a byte and an entry cap (HarvestCap: the tmpfs's size
// and inode limit), and reports what it skipped (docs/contracts.md 5.9).
// Unmount is retry-safe (docs/contracts.md §2): a mount or directory
// already gone counts as cleaned.
//
// # Artifacts
//
// ResolveArtifacts matches declared artifacts against a harvested run dir
// (docs/contracts.md §5). A directory that could not be read makes the
// match unchecked, never missing: only a search that succeeded reports
// absence.
package mounts
