// Package buildkit builds hookbox's base image with BuildKit: the same
// images.Definition the in-process builder uses, expressed as an LLB graph,
// solved by a buildkitd whose containerd worker stores the result directly in
// containerd's image store (no registry, no push).
//
// The graph is llb.Scratch() with one file operation: a Mkdir or Mkfile per
// entry, in the definition's order, each with its explicit mode, owner 0:0
// and creation time images.ModTime(). A directory with the sticky bit (/tmp)
// is a Copy of an empty directory with an explicit chmod, because LLB's
// Mkdir keeps only the 0777 bits.
//
// Adding a file to a directory changes the directory's mtime inside
// BuildKit, so the export asks BuildKit to rewrite layer timestamps to
// images.SourceDateEpoch (exporter options source-date-epoch and
// rewrite-timestamp): entries then carry the same mtime as the in-process
// build. Image digests still differ between the builders (tar headers,
// history); the filesystem and runtime config are the same, which the
// equivalence test checks against a real buildkitd.
//
// buildkit only describes and requests builds; it runs nothing itself.
package buildkit

import (
	"context"
	"fmt"
	"io/fs"
	"os"

	"github.com/moby/buildkit/client/llb"

	"hookbox.dev/hookbox/images"
)

// State returns def's filesystem as an LLB state.
func State(def images.Definition) (llb.State, error) {
	if err := def.Validate(); err != nil {
		return llb.State{}, err
	}
	created := llb.WithCreatedTime(images.ModTime())
	root := llb.WithUIDGID(0, 0)

	// The source a sticky directory is copied from.
	const emptyDir = "/empty"
	empty := llb.Scratch().File(llb.Mkdir(emptyDir, 0o755, root, created))

	var fa *llb.FileAction
	for _, e := range def.Entries {
		switch {
		case e.Type == images.Dir && e.Mode&fs.ModeSticky != 0:
			// Raw chmod bits (01777), not fs.ModeSticky: BuildKit's copy
			// tests the int mode for S_ISVTX.
			chmod := llb.ChmodOpt{Mode: os.FileMode(images.UnixMode(e.Mode))}
			if fa == nil {
				fa = llb.Copy(empty, emptyDir, e.Path, chmod, root, created)
			} else {
				fa = fa.Copy(empty, emptyDir, e.Path, chmod, root, created)
			}
		case e.Type == images.Dir:
			if fa == nil {
				fa = llb.Mkdir(e.Path, e.Mode.Perm(), root, created)
			} else {
				fa = fa.Mkdir(e.Path, e.Mode.Perm(), root, created)
			}
		case e.Type == images.File:
			if fa == nil {
				fa = llb.Mkfile(e.Path, e.Mode.Perm(), e.Data, root, created)
			} else {
				fa = fa.Mkfile(e.Path, e.Mode.Perm(), e.Data, root, created)
			}
		default:
			return llb.State{}, fmt.Errorf("buildkit: %s: entry type %v has no LLB form", e.Path, e.Type)
		}
	}
	if fa == nil {
		return llb.Scratch(), nil
	}
	return llb.Scratch().File(fa, llb.WithCustomName("hookbox base image filesystem")), nil
}

// Marshal returns def as a serialized LLB definition for def.Platform. The
// same def gives the same bytes.
func Marshal(ctx context.Context, def images.Definition) (*llb.Definition, error) {
	st, err := State(def)
	if err != nil {
		return nil, err
	}
	out, err := st.Marshal(ctx, llb.Platform(def.Platform))
	if err != nil {
		return nil, fmt.Errorf("buildkit: marshaling the LLB definition: %w", err)
	}
	return out, nil
}
