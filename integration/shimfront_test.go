package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	taskv2 "github.com/containerd/containerd/api/runtime/task/v2"
	"google.golang.org/protobuf/proto"

	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/launcher/shimfront"
)

// TestShimFrontHandsOn runs the shim front as containerd would: it answers
// delete itself only when runc's delete would change nothing, and hands
// every other command to containerd-shim-runc-v2 with the same arguments
// (a stand-in on PATH here, which records them). The mounted-rootfs case
// is why this needs root.
func TestShimFrontHandsOn(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root)
	buildTools(t)
	dir := t.TempDir()
	record := filepath.Join(dir, "handed-on")
	stand := filepath.Join(dir, "path")
	os.Mkdir(stand, 0o755)
	script := "#!/bin/sh\nprintf '%s\\n' \"$*\" > " + record + "\n"
	if err := os.WriteFile(filepath.Join(stand, shimfront.RuncShim), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "runc")
	for _, tc := range []struct {
		name   string
		action string
		setup  func(t *testing.T, bundle string)
		handed bool
	}{
		{"delete with nothing left", "delete", func(t *testing.T, bundle string) {}, false},
		{"delete while runc has state", "delete", func(t *testing.T, bundle string) {
			os.MkdirAll(filepath.Join(root, "ns", "t1"), 0o700)
		}, true},
		{"delete with the rootfs mounted", "delete", func(t *testing.T, bundle string) {
			rootfs := filepath.Join(bundle, "rootfs")
			os.Mkdir(rootfs, 0o755)
			if err := syscall.Mount("tmpfs", rootfs, "tmpfs", 0, "size=64k"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { syscall.Unmount(rootfs, syscall.MNT_DETACH) })
		}, true},
		{"start of a task of its own", "start", func(t *testing.T, bundle string) {}, true},
		{"the serving shim", "", func(t *testing.T, bundle string) {}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.RemoveAll(root)
			os.Remove(record)
			bundle := filepath.Join(dir, "state", "ns", "t1")
			os.RemoveAll(filepath.Dir(bundle))
			os.MkdirAll(bundle, 0o700)
			os.WriteFile(filepath.Join(bundle, "options.json"), []byte(`{"root":"`+root+`"}`), 0o600)
			os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"annotations":{}}`), 0o600)
			os.WriteFile(filepath.Join(bundle, "init.pid"), []byte("77"), 0o600)
			tc.setup(t, bundle)
			args := []string{"-namespace", "ns", "-address", "/run/containerd/containerd.sock", "-publish-binary", "/usr/bin/containerd", "-id", "t1"}
			if tc.action != "" {
				args = append(args, "-bundle", bundle, tc.action)
			}
			cmd := exec.Command(frontBin, args...)
			cmd.Dir, cmd.Env = bundle, []string{"PATH=" + stand}
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s %s: %v", shimfront.Binary, strings.Join(args, " "), err)
			}
			got, rerr := os.ReadFile(record)
			switch {
			case tc.handed && (rerr != nil || strings.TrimSpace(string(got)) != strings.Join(args, " ")):
				t.Errorf("handed on with %q (%v), want %q", got, rerr, strings.Join(args, " "))
			case !tc.handed && rerr == nil:
				t.Errorf("handed on (%q) a delete with nothing to do", got)
			case !tc.handed:
				var r taskv2.DeleteResponse
				if err := proto.Unmarshal(out, &r); err != nil || r.Pid != 77 || r.ExitStatus != 137 || r.ExitedAt == nil {
					t.Errorf("delete's answer %v (%v), want pid 77, status 137, a time", &r, err)
				}
			}
		})
	}
}
