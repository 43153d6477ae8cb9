package integration

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"hookbox.dev/hookbox/internal/testenv"
)

// TestLiteBuildHandsOver: bin/hookbox (the lite build) runs the full
// build beside it for the commands it does not have, with the same
// arguments, so each prints what the full build prints and exits as it
// does; without the full build it says what is missing. A flag it does
// not know is handed over too (it may be the full build's), and one that
// neither knows is still a usage error (exit 2).
func TestLiteBuildHandsOver(t *testing.T) {
	testenv.RequireIntegration(t)
	buildTools(t)
	full := filepath.Join(filepath.Dir(hookboxBin), "hookbox-kube")
	spec, err := filepath.Abs("../examples/hello.yaml")
	if err != nil {
		t.Fatal(err)
	}
	digest := "@sha256:" + strings.Repeat("a", 64)
	for name, args := range map[string][]string{
		"render k8s":   {"render", "--format", "k8s", "--runfiles-image", "r" + digest, "--seed-image", "s" + digest, "--image", "b" + digest, spec},
		"render k8s=":  {"render", "--format=k8s", "--runfiles-image=r" + digest, "--seed-image=s" + digest, "--image=b" + digest, spec},
		"k8s help":     {"k8s", "--help"},
		"image help":   {"image", "build", "--help"},
		"node flag":    {"tracer", "serve", "--node", "--help"},
		"k8s refusal":  {"render", "--format", "json", "--build", spec},
		"unknown flag": {"render", "--no-such-flag", spec},
	} {
		t.Run(name, func(t *testing.T) {
			liteOut, liteErr, liteCode := runBinary(t, hookboxBin, args...)
			fullOut, fullErr, fullCode := runBinary(t, full, args...)
			if liteCode != fullCode || liteOut != fullOut || liteErr != fullErr {
				t.Fatalf("hookbox %s: lite build exit %d, stdout %d bytes, stderr %q; full build exit %d, stdout %d bytes, stderr %q",
					strings.Join(args, " "), liteCode, len(liteOut), liteErr, fullCode, len(fullOut), fullErr)
			}
			if strings.HasPrefix(name, "render k8s") && (fullCode != 0 || !strings.Contains(fullOut, "kind: Job")) {
				t.Fatalf("hookbox %s: exit %d, stderr %q, stdout without a Job", strings.Join(args, " "), fullCode, fullErr)
			}
		})
	}
	// The lite build's own commands never need the full one.
	alone := t.TempDir()
	lite := filepath.Join(alone, "hookbox")
	if b, err := exec.Command("cp", hookboxBin, lite).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, b)
	}
	if out, errOut, code := runBinary(t, lite, "render", "--format", "text", spec); code != 0 || !strings.Contains(out, "plan digest") {
		t.Fatalf("lite render --format text alone: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	_, errOut, code := runBinary(t, lite, "k8s", "verdict", "x")
	if code != 120 || !strings.Contains(errOut, "hookbox k8s needs the full build, hookbox-kube, next to this hookbox") {
		t.Fatalf("lite k8s without the full build: exit %d, stderr %q; want 120 and what is missing", code, errOut)
	}
	_, errOut, code = runBinary(t, lite, "render", "--no-such-flag", spec)
	if code != 2 || !strings.Contains(errOut, "unknown flag: --no-such-flag") {
		t.Fatalf("lite unknown flag without the full build: exit %d, stderr %q; want 2, the flag", code, errOut)
	}
}

func runBinary(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.Env = append(os.Environ(), "HOOKBOX_KEY_DIR="+t.TempDir())
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", bin, err)
	}
	return out.String(), errOut.String(), code
}
