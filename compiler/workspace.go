package compiler

import (
	"reflect"

	"go.yaml.in/yaml/v3"

	"hookbox.dev/hookbox/render"
)

// spec.workspace: a host directory (the string form, mounted read-only) or
// {path: DIR, mode: readonly|overlay}. In overlay mode the engine writes to
// /workspace freely: an overlay keeps its changes in a per-run tmpfs, the
// host directory is never written, and at teardown the changes become the
// artifact workspace.patch (docs/contracts.md §5).

// Workspace modes.
const (
	WorkspaceReadOnly = "readonly"
	WorkspaceOverlay  = "overlay"
)

// Workspace is spec.workspace. Mode is "" for the string form (read-only).
type Workspace struct {
	Path string `json:"path"`
	Mode string `json:"mode,omitempty"`

	// malformed: decoding already reported the problem, so validation
	// does not add "required" on top.
	malformed bool
}

// Overlay reports whether the engine gets a writable overlay of the workspace.
func (w Workspace) Overlay() bool { return w.Mode == WorkspaceOverlay }

const workspaceHint = "write workspace: DIR (read-only), or workspace: {path: DIR, mode: overlay}"

var workspaceSchema = map[string]any{
	"oneOf": []any{
		map[string]any{"type": "string", "minLength": 1, "description": "Host directory mounted read-only at /workspace; relative to the spec file."},
		map[string]any{
			"type":                 "object",
			"additionalProperties": false,
			"required":             []string{"path"},
			"properties": map[string]any{
				"path": map[string]any{"type": "string", "minLength": 1, "description": "Host directory; relative to the spec file."},
				"mode": map[string]any{
					"type": "string", "enum": []string{WorkspaceReadOnly, WorkspaceOverlay},
					"description": "readonly (the default): a read-only bind. overlay: the engine may write; changes stay in the run's memory and are harvested as the artifact " + render.WorkspacePatch + ", the host directory is never written.",
				},
			},
		},
	},
}

func (w *Workspace) decodeNode(d *decoder, n *yaml.Node, path string) {
	before := len(d.diags.list)
	defer func() { w.malformed = len(d.diags.list) > before }()
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!str":
		w.Path = n.Value
	case n.Kind == yaml.MappingNode:
		var body struct {
			Path *string `json:"path"`
			Mode *string `json:"mode"`
		}
		d.decodeStruct(n, path, reflect.ValueOf(&body).Elem())
		if len(d.diags.list) > before {
			return
		}
		if body.Path == nil {
			d.errAt(n, path, workspaceHint, "workspace has no path")
			return
		}
		w.Path = *body.Path
		switch {
		case body.Mode == nil:
			w.Mode = WorkspaceReadOnly
		case *body.Mode == WorkspaceReadOnly || *body.Mode == WorkspaceOverlay:
			w.Mode = *body.Mode
		default:
			d.diags.add(d.at(path+".mode"), path+".mode", "write mode: readonly or mode: overlay", "workspace mode %q is not supported", *body.Mode)
		}
	default:
		d.typeErr(n, path, "a directory or a mapping {path: DIR, mode: readonly|overlay}")
	}
}
