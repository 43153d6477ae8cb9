package runfiles

import (
	"path"
	"slices"
	"strings"

	"hookbox.dev/hookbox/render"
)

// relocate moves entries whose host path a container mount would hide to
// their container path (render.ContainerPath), adding the parent
// directories that creates. Directories in keep (mount points the tree
// provides) and their ancestors stay where they are. Absolute symlink
// targets move the same way, so a link still resolves inside the
// container. Placed files (Options.Placed) and their parents stay too:
// their path is already the container's. objects, keyed by path, is
// re-keyed alongside. The result is sorted by path.
func relocate[V any](manifest []render.Runfile, objects map[string]V, keep []string, placed map[string]string) []render.Runfile {
	kept := map[string]bool{}
	for _, k := range keep {
		for d := k; d != "/" && d != "."; d = path.Dir(d) {
			kept[d] = true
		}
	}
	for p := range placed {
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			kept[d] = true
		}
	}
	moved := false
	for i := range manifest {
		e := &manifest[i]
		if e.Type == render.RunfileDir && kept[e.Path] {
			continue
		}
		if _, ok := placed[e.Path]; ok && e.Type == render.RunfileFile {
			continue
		}
		if to := render.ContainerPath(e.Path); to != e.Path {
			if obj, ok := objects[e.Path]; ok {
				delete(objects, e.Path)
				objects[to] = obj
			}
			e.Path, moved = to, true
		}
		if e.Type == render.RunfileSymlink && path.IsAbs(e.Target) {
			e.Target = render.ContainerPath(e.Target)
		}
	}
	if !moved {
		return manifest
	}
	have := map[string]bool{}
	for _, e := range manifest {
		have[e.Path] = true
	}
	for _, e := range slices.Clone(manifest) {
		for dir := path.Dir(e.Path); dir != "/"; dir = path.Dir(dir) {
			if !have[dir] {
				manifest = append(manifest, render.Runfile{Path: dir, Type: render.RunfileDir, Mode: 0o755})
				have[dir] = true
			}
		}
	}
	slices.SortFunc(manifest, func(a, b render.Runfile) int { return strings.Compare(a.Path, b.Path) })
	return manifest
}
