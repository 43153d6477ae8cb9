package mounts

import (
	"fmt"
	"strings"

	"hookbox.dev/hookbox/render"
)

// CheckPrograms refuses a render whose programs or runfiles would be hidden
// in the container by a mount: a consistency check, since the compiler and
// the runfiles stage place such files under render.HostDir.
func CheckPrograms(r *render.Render) error {
	var bad []string
	for _, p := range r.Programs {
		if hidden(p.Path) {
			bad = append(bad, fmt.Sprintf("%s (%s)", p.Path, strings.Join(p.Roles, ",")))
		}
	}
	for _, f := range r.Runfiles {
		if f.Type != render.RunfileDir && hidden(f.Path) {
			bad = append(bad, fmt.Sprintf("%s (runfile)", f.Path))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s: a container mount would hide these; render them with container paths (render.ContainerPath)", ErrMountConflict, strings.Join(bad, "; "))
	}
	return nil
}

// hidden: a container mount covers path (and it is not under HostDir,
// where hidden host paths are moved, nor the init, which lies in a
// directory of its own that no mount covers).
func hidden(path string) bool {
	return path != render.InitPath && !strings.HasPrefix(path, render.HostDir+"/") && render.ContainerPath(path) != path
}

// RunHostPaths is where a run keeps its host-side mount sources inside its
// run record directory: the generated config files, the tmpfs mountpoint
// and the workspace store's mountpoint (used only by an overlay workspace).
func RunHostPaths(runRecordDir string) HostPaths {
	return HostPaths{ConfigDir: runRecordDir + "/etc", RunDir: runRecordDir + "/tmpfs", WorkspaceStore: runRecordDir + "/workspace-store"}
}
