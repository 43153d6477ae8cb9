package mounts

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"hookbox.dev/hookbox/render"
)

// The writable workspace (render.MountOverlay) is an overlayfs at
// render.WorkspaceDir: the lower layer is the host workspace, which
// overlayfs only ever reads, and the upper and work directories live in a
// second small tmpfs of the run, the workspace store (HostPaths.
// WorkspaceStore), which the container never sees. At teardown the upper
// layer is the complete record of what the engine changed (HarvestWorkspace).
//
// The options fix what the upper layer may hold, so that walking it is
// exact: redirect_dir=off (a renamed lower directory is copied, never
// recorded as a redirect xattr), metacopy=off (a copied-up file always
// holds its data), index=off and xino=off (no inode index to interpret).

// TypeOverlay is the mount type of the writable workspace.
const TypeOverlay = "overlay"

// Names inside the workspace store.
const (
	storeUpper = "upper"
	storeWork  = "work"
)

// OverlayLayers are the host directories of the workspace overlay.
type OverlayLayers struct {
	Lower string `json:"lower"` // the host workspace, read-only
	Upper string `json:"upper"` // in the workspace store
	Work  string `json:"work"`  // in the workspace store, beside Upper
}

// StoreLayers returns the layers of a workspace overlay of lower whose
// store tmpfs is mounted at store.
func StoreLayers(lower, store string) OverlayLayers {
	return OverlayLayers{Lower: lower, Upper: path.Join(store, storeUpper), Work: path.Join(store, storeWork)}
}

// overlayFixed are the overlay options hookbox always sets besides the
// layers (see above).
var overlayFixed = []string{"redirect_dir=off", "metacopy=off", "index=off", "xino=off"}

// overlayOptions are the options of a workspace overlay: hardening, the
// fixed options, then the layers.
func overlayOptions(l OverlayLayers) []string {
	return slices.Concat(hardening, overlayFixed, []string{
		"lowerdir=" + l.Lower, "upperdir=" + l.Upper, "workdir=" + l.Work,
	})
}

// planOverlay is MountPlan's case for a render.MountOverlay.
func planOverlay(rm render.Mount, host HostPaths) (Mount, error) {
	if rm.Destination != render.WorkspaceDir {
		return Mount{}, fmt.Errorf("%w: overlay mount at %s; only the workspace %s can be an overlay", ErrInvalid, rm.Destination, render.WorkspaceDir)
	}
	if host.WorkspaceStore == "" {
		return Mount{}, fmt.Errorf("%w: no host path for the workspace store of the overlay at %s; pass it as HostPaths.WorkspaceStore (RunHostPaths)", ErrInvalid, rm.Destination)
	}
	l := StoreLayers(rm.Source, host.WorkspaceStore)
	m := Mount{Destination: rm.Destination, Type: TypeOverlay, Source: TypeOverlay, Options: overlayOptions(l), Overlay: &l, DestKind: KindDir}
	if errs := checkOverlay(m); len(errs) > 0 {
		return Mount{}, errs[0]
	}
	return m, nil
}

// checkOverlay is checkOptions for an overlay: exactly the mount planOverlay
// makes, and nothing looser.
func checkOverlay(m Mount) []error {
	var errs []error
	bad := func(sentinel error, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...))
	}
	l := m.Overlay
	switch {
	case m.Destination != render.WorkspaceDir:
		bad(ErrInvalid, "overlay at %s; only the workspace %s can be an overlay", m.Destination, render.WorkspaceDir)
	case l == nil:
		bad(ErrInvalid, "overlay at %s has no layers", m.Destination)
	case m.Source != TypeOverlay:
		bad(ErrInvalid, "overlay at %s has source %q; write %q", m.Destination, m.Source, TypeOverlay)
	case m.DestKind != KindDir:
		bad(ErrKindMismatch, "overlay at %s must land on a directory", m.Destination)
	}
	if len(errs) > 0 {
		return errs
	}
	for _, p := range []string{l.Lower, l.Upper, l.Work} {
		if !isClean(p) {
			bad(ErrInvalid, "overlay layer %q for %s must be an absolute, clean host path", p, m.Destination)
		} else if strings.ContainsAny(p, ":,\\") {
			bad(ErrInvalid, "overlay layer %q for %s contains ':', ',' or '\\', which overlayfs options cannot carry; move the workspace", p, m.Destination)
		}
	}
	store := path.Dir(l.Upper)
	switch {
	case len(errs) > 0:
	case path.Base(l.Upper) != storeUpper || l.Work != path.Join(store, storeWork):
		bad(ErrInvalid, "overlay at %s: upper %s and work %s are not the workspace store's %s and %s", m.Destination, l.Upper, l.Work, storeUpper, storeWork)
	case render.Within(store, l.Lower) || render.Within(l.Lower, store):
		bad(ErrWritable, "overlay at %s: the workspace store %s and the workspace %s overlap, so the host workspace could be written; keep the run record outside the workspace", m.Destination, store, l.Lower)
	case !slices.Equal(m.Options, overlayOptions(*l)):
		bad(ErrInvalid, "overlay at %s has options %q; hookbox mounts it with exactly %q", m.Destination, m.Options, overlayOptions(*l))
	}
	return errs
}
