package launcher

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"hookbox.dev/hookbox/launcher/shimfront"
)

// runcRuntime is containerd's runc shim as a runtime name.
const runcRuntime = "io.containerd.runc.v2"

// ShimFrontEnv: "off" makes runs name io.containerd.runc.v2 instead of
// the shim front; an absolute path names that front instead of the one
// next to the running executable (tests, packagers).
const ShimFrontEnv = "HOOKBOX_SHIM_FRONT"

// FindShimFront is the shim front runs name as their runtime
// (docs/architecture.md, "Shim front"): $HOOKBOX_SHIM_FRONT, else
// shimfront.Binary next to exe. containerd runs it as root (or as the
// rootless user), so it must be a regular file owned by this user that
// nobody else may write; "" and why not when there is none fit to run.
func FindShimFront(exe string) (path, why string) {
	path = os.Getenv(ShimFrontEnv)
	switch {
	case path == "off":
		return "", ShimFrontEnv + "=off"
	case path == "":
		path = filepath.Join(filepath.Dir(exe), shimfront.Binary)
	case !filepath.IsAbs(path):
		return "", fmt.Sprintf("%s=%s is not an absolute path", ShimFrontEnv, path)
	}
	if why := shimFrontUnfit(path); why != "" {
		return "", why
	}
	return path, ""
}

// shimFrontUnfit says why the file at path must not be containerd's
// runtime binary, "" when it may.
func shimFrontUnfit(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return err.Error()
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return path + " is not a regular file"
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Sprintf("%s is writable by others (mode %o)", path, fi.Mode().Perm())
	case !ok || int(st.Uid) != os.Geteuid():
		return fmt.Sprintf("%s is not owned by uid %d", path, os.Geteuid())
	}
	return ""
}
