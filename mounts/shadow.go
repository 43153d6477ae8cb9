package mounts

import (
	"fmt"
	"strings"

	"hookbox.dev/hookbox/render"
)

// shadowingDirs are container directories that mounts (hookbox's or the
// runtime's) cover. Programs appear in the container at their host path,
// so a program whose host path is below one of these would be hidden.
var shadowingDirs = []string{"/dev", "/grants", "/hookbox", "/proc", "/run", "/sys", "/tmp", "/workspace"}

// CheckPrograms refuses a render whose programs or runfiles would be hidden
// in the container by a mount. Compiling does not check this, so a render
// stays independent of where it is compiled; assembling a run does.
func CheckPrograms(r *render.Render) error {
	var bad []string
	for _, p := range r.Programs {
		if d := shadowingDir(p.Path); d != "" {
			bad = append(bad, fmt.Sprintf("%s (%s, under %s)", p.Path, strings.Join(p.Roles, ","), d))
		}
	}
	for _, f := range r.Runfiles {
		if d := shadowingDir(f.Path); d != "" && f.Type != render.RunfileDir {
			bad = append(bad, fmt.Sprintf("%s (runfile, under %s)", f.Path, d))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s: the container mounts over these directories, so the programs would not exist there; install them elsewhere (e.g. /usr/local/bin, /opt or /var/lib)", ErrMountConflict, strings.Join(bad, "; "))
	}
	return nil
}

func shadowingDir(path string) string {
	for _, d := range shadowingDirs {
		if path == d || strings.HasPrefix(path, d+"/") {
			return d
		}
	}
	return ""
}

// RunHostPaths is where a run keeps its host-side mount sources inside its
// run record directory: the generated config files and the tmpfs mountpoint.
func RunHostPaths(runRecordDir string) HostPaths {
	return HostPaths{ConfigDir: runRecordDir + "/etc", RunDir: runRecordDir + "/tmpfs"}
}
