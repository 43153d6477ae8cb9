package launcher

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"hookbox.dev/hookbox/launcher/shimfront"
)

func TestFindShimFront(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "hookbox")
	front := filepath.Join(dir, shimfront.Binary)
	if _, why := FindShimFront(exe); why == "" {
		t.Error("a missing front was found")
	}
	if err := os.WriteFile(front, []byte("#!"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, why := FindShimFront(exe); got != front || why != "" {
		t.Errorf("FindShimFront = %q (%s), want %s", got, why, front)
	}
	os.Chmod(front, 0o775)
	if got, why := FindShimFront(exe); got != "" || !strings.Contains(why, "writable by others") {
		t.Errorf("group-writable front: %q (%s)", got, why)
	}
	os.Chmod(front, 0o755)
	t.Setenv(ShimFrontEnv, "off")
	if got, _ := FindShimFront(exe); got != "" {
		t.Errorf("%s=off: %q", ShimFrontEnv, got)
	}
	t.Setenv(ShimFrontEnv, "bin/front")
	if got, why := FindShimFront(exe); got != "" || !strings.Contains(why, "absolute") {
		t.Errorf("relative %s: %q (%s)", ShimFrontEnv, got, why)
	}
	t.Setenv(ShimFrontEnv, front)
	if got, _ := FindShimFront("/elsewhere/hookbox"); got != front {
		t.Errorf("%s=%s: %q", ShimFrontEnv, front, got)
	}
}
