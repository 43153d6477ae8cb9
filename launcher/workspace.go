package launcher

import (
	"path/filepath"
	"slices"
	"strings"

	"hookbox.dev/hookbox/mounts"
	"hookbox.dev/hookbox/render"
)

// Reason ids of an overlay workspace.
const (
	// ReasonWorkspaceDiffFailed: the workspace's changes could not be
	// harvested; they are unknown, never taken as "none".
	ReasonWorkspaceDiffFailed = "workspace-diff-failed"
	// ReasonWorkspaceUnchanged: the run declared workspace.patch (its
	// contract is an edit) and changed nothing.
	ReasonWorkspaceUnchanged = "workspace-unchanged"
)

// WorkspaceResult is the workspace section of result.json, for an overlay
// workspace: what the engine changed (render.WorkspaceChanges lists the
// paths) and the size of render.WorkspacePatch (0: nothing changed, no
// patch written).
type WorkspaceResult struct {
	Mode       string `json:"mode"`
	Added      int    `json:"added"`
	Modified   int    `json:"modified"`
	Deleted    int    `json:"deleted"`
	Skipped    int    `json:"skipped,omitempty"`
	PatchBytes int64  `json:"patch_bytes"`
	Error      string `json:"error,omitempty"`
}

// workspaceOverlay is the render's workspace overlay mount, if any.
func workspaceOverlay(r *render.Render) (render.Mount, bool) {
	i := slices.IndexFunc(r.Mounts, func(m render.Mount) bool { return m.Kind == render.MountOverlay })
	if i < 0 {
		return render.Mount{}, false
	}
	return r.Mounts[i], true
}

// prepareWorkspaceStore creates the workspace store of an overlay
// workspace (before the mount plan is validated).
func (x *execution) prepareWorkspaceStore(store string) error {
	if _, ok := workspaceOverlay(x.r); !ok {
		return nil
	}
	if err := mounts.CreateWorkspaceStore(store, mounts.RunDirSize(x.r), x.r.Process.UID, x.r.Process.GID); err != nil {
		return err
	}
	x.workspaceStore = store
	return nil
}

// harvestWorkspace writes the overlay's changes into dst, the harvested
// run dir, before the store is unmounted.
func (x *execution) harvestWorkspace(dst string) {
	m, ok := workspaceOverlay(x.r)
	if !ok {
		return
	}
	ws := &WorkspaceResult{Mode: "overlay"}
	x.result.Workspace = ws
	if x.workspaceStore == "" {
		ws.Error = "the workspace store was never created"
		return
	}
	diff, err := mounts.HarvestWorkspace(mounts.StoreLayers(m.Source, x.workspaceStore), dst, filepath.Join(x.dir, "workspace-diff"))
	c := diff.Changes
	ws.Added, ws.Modified, ws.Deleted, ws.Skipped, ws.PatchBytes = len(c.Added), len(c.Modified), len(c.Deleted), len(c.Skipped), diff.PatchBytes
	if err != nil {
		ws.Error = err.Error()
	}
}

// judgeWorkspace adjusts the status once the artifacts are resolved: a
// failed harvest of a finished run is an infra error (its edit is
// unknown), and an empty patch of a run that declared workspace.patch is
// completed_empty.
func (x *execution) judgeWorkspace() {
	ws := x.result.Workspace
	if ws == nil {
		return
	}
	res := x.result
	finished := res.Status == StatusCompleted || res.Status == StatusCompletedEmpty
	switch {
	case ws.Error != "":
		res.Reasons = append(res.Reasons, ReasonWorkspaceDiffFailed)
		res.Error = strings.TrimPrefix(res.Error+"; workspace: "+ws.Error, "; ")
		if finished {
			res.Status = StatusInfraError
		}
	case ws.PatchBytes == 0 && finished && slices.Contains(x.r.Artifacts, render.WorkspacePatch):
		res.Status = StatusCompletedEmpty
		res.Reasons = append(res.Reasons, ReasonWorkspaceUnchanged)
	}
}
