package mounts

import (
	"fmt"
	"strings"
)

// RootfsOverlayOptions are the overlay options of a read-only rootfs made
// of lower layers, top first (the runfiles tree above the base image). An
// overlay with lower layers only and no upper layer has no writable place.
func RootfsOverlayOptions(lowers []string) ([]string, error) {
	if len(lowers) < 2 {
		return nil, fmt.Errorf("%w: a read-only overlay needs at least two lower layers, got %d", ErrInvalid, len(lowers))
	}
	for _, l := range lowers {
		if strings.ContainsAny(l, ":,\\") {
			return nil, fmt.Errorf("%w: layer path %q contains ':', ',' or '\\', which overlayfs options cannot carry", ErrInvalid, l)
		}
	}
	return []string{"lowerdir=" + strings.Join(lowers, ":")}, nil
}
