package shimfront

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	taskv2 "github.com/containerd/containerd/api/runtime/task/v2"
	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"google.golang.org/protobuf/proto"
)

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want Command
		ok   bool
	}{
		{[]string{"-namespace", "hookbox", "-address", "/run/containerd/containerd.sock", "-publish-binary", "/usr/bin/containerd", "-id", "t1", "start"},
			Command{"hookbox", "t1", "/run/containerd/containerd.sock", "start"}, true},
		{[]string{"-namespace", "n", "-address", "/a", "-publish-binary", "/c", "-id", "t", "-bundle", "/b", "delete"},
			Command{"n", "t", "/a", "delete"}, true},
		{[]string{"-debug", "-namespace=n", "-id", "t", "-address", "/a"}, Command{"n", "t", "/a", ""}, true},
		{[]string{"-namespace", "n", "-id", "t", "delete"}, Command{"n", "t", "", "delete"}, false},
		{[]string{"-namespace", "n", "-address", "/a", "-id"}, Command{Namespace: "n", Address: "/a"}, false},
	} {
		got, ok := ParseArgs(tc.args)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseArgs(%q) = %+v, %v; want %+v, %v", tc.args, got, ok, tc.want, tc.ok)
		}
	}
}

// The socket containerd 1.6's shim made for hookbox's group here.
func TestSocket(t *testing.T) {
	got := Socket("/run/containerd/containerd.sock", "hookbox", "hookbox-shim-group")
	want := "/run/containerd/s/a52fe6f1022dd9d61be8ecc3c02a3d85bbd76140989fe166931638d347c86e4b"
	if got != want {
		t.Errorf("Socket = %s, want %s", got, want)
	}
}

// bundle makes <dir>/ns/<id> as containerd makes a task's bundle.
func bundle(t *testing.T, dir, id string, files map[string]string) string {
	t.Helper()
	b := filepath.Join(dir, "ns", id)
	if err := os.MkdirAll(b, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(b, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func TestDeleted(t *testing.T) {
	now := time.Unix(1796426010, 123456789)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, b, root string)
		done  bool
	}{
		{"state and rootfs gone", func(t *testing.T, b, root string) {}, true},
		{"empty rootfs", func(t *testing.T, b, root string) { os.Mkdir(filepath.Join(b, "rootfs"), 0o755) }, true},
		{"runc still has state", func(t *testing.T, b, root string) { os.MkdirAll(filepath.Join(root, "ns", "t1"), 0o700) }, false},
		{"rootfs holds files", func(t *testing.T, b, root string) {
			os.Mkdir(filepath.Join(b, "rootfs"), 0o755)
			os.WriteFile(filepath.Join(b, "rootfs", "bin"), nil, 0o644)
		}, false},
		{"rootfs is a file", func(t *testing.T, b, root string) { os.WriteFile(filepath.Join(b, "rootfs"), nil, 0o644) }, false},
		{"options unreadable", func(t *testing.T, b, root string) { os.WriteFile(filepath.Join(b, "options.json"), []byte("{"), 0o600) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			root := filepath.Join(dir, "runc")
			b := bundle(t, dir, "t1", map[string]string{"options.json": `{"root":"` + root + `"}`, "init.pid": "4242"})
			tc.setup(t, b, root)
			answer, done := deleted(b, "ns", "t1", now)
			if done != tc.done {
				t.Fatalf("done = %v, want %v", done, tc.done)
			}
			if !done {
				return
			}
			// containerd 1.x reads task v2's DeleteResponse, 2.x v3's.
			var v2 taskv2.DeleteResponse
			var v3 taskv3.DeleteResponse
			if err := proto.Unmarshal(answer, &v2); err != nil {
				t.Fatal(err)
			}
			if err := proto.Unmarshal(answer, &v3); err != nil {
				t.Fatal(err)
			}
			if v2.Pid != 4242 || v2.ExitStatus != 137 || !v2.ExitedAt.AsTime().Equal(now) || v3.Pid != 4242 || v3.ExitStatus != 137 {
				t.Errorf("answer = %v / %v, want pid 4242, status 137, exited %v", &v2, &v3, now)
			}
		})
	}
}

// Without options.json runc's default root holds the state; a bundle
// with no init.pid answers pid 0, as runc's shim does.
func TestDeletedDefaults(t *testing.T) {
	dir := t.TempDir()
	id := "hookbox-test-" + filepath.Base(dir)
	b := bundle(t, dir, id, nil)
	answer, done := deleted(b, "ns", id, time.Unix(1, 0))
	var r taskv2.DeleteResponse
	if !done || proto.Unmarshal(answer, &r) != nil || r.Pid != 0 || r.ExitStatus != 137 {
		t.Fatalf("deleted = %v (%v), want pid 0, status 137", &r, done)
	}
}

func TestJoined(t *testing.T) {
	const address, group = "/run/containerd/containerd.sock", "the-group"
	for _, tc := range []struct {
		name   string
		spec   string
		listen bool
		mutate func(first string)
		done   bool
	}{
		{"the group answers", `{"annotations":{"` + AnnotationGroup + `":"the-group"}}`, true, nil, true},
		{"no shim listens", `{"annotations":{"` + AnnotationGroup + `":"the-group"}}`, false, nil, false},
		{"a task of its own", `{"annotations":{"other":"x"}}`, true, nil, false},
		{"a group outside the namespace", `{"annotations":{"` + AnnotationGroup + `":"../x"}}`, true, nil, false},
		{"containerd 2 started the shim", `{"annotations":{"` + AnnotationGroup + `":"the-group"}}`, true,
			func(first string) { os.WriteFile(filepath.Join(first, "bootstrap.json"), []byte(`{}`), 0o600) }, false},
		{"the first task's shim is another", `{"annotations":{"` + AnnotationGroup + `":"the-group"}}`, true,
			func(first string) { os.WriteFile(filepath.Join(first, "address"), []byte("unix:///elsewhere"), 0o600) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			// A socket's path has at most 107 bytes: not under TempDir.
			sockets, err := os.MkdirTemp("", "sf")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(sockets) })
			sock := socketIn(sockets, address, "ns", group)
			if tc.listen {
				l, err := net.Listen("unix", sock)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
			}
			first := bundle(t, dir, group, map[string]string{"address": "unix://" + sock})
			if tc.mutate != nil {
				tc.mutate(first)
			}
			b := bundle(t, dir, "t2", map[string]string{"config.json": tc.spec})
			got, done := joined(b, "ns", address, sockets)
			if done != tc.done {
				t.Fatalf("done = %v, want %v", done, tc.done)
			}
			written, err := os.ReadFile(filepath.Join(b, "address"))
			switch {
			case done && (got != "unix://"+sock || err != nil || string(written) != got):
				t.Errorf("answer %q, address file %q (%v); want %q in both", got, written, err, "unix://"+sock)
			case !done && err == nil:
				t.Errorf("address file written (%q) for a start handed on", written)
			}
		})
	}
}
