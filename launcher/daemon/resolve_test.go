package daemon

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	versionapi "github.com/containerd/containerd/api/services/version/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// fakeContainerd serves containerd's Version API, answering with version,
// on a unix socket in a temp dir; it returns the socket path.
func fakeContainerd(t *testing.T, version string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fake.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	versionapi.RegisterVersionServer(s, versionServer{version: version})
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return path
}

type versionServer struct {
	versionapi.UnimplementedVersionServer
	version string
}

func (v versionServer) Version(context.Context, *emptypb.Empty) (*versionapi.VersionResponse, error) {
	return &versionapi.VersionResponse{Version: v.version, Revision: "fake"}, nil
}

// mute listens on a unix socket, accepts connections and never says a word:
// something is there, but it is not containerd.
func mute(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mute.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				<-done
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { l.Close(); close(done) })
	return path
}

// stale leaves a unix socket file that nobody listens on.
func stale(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stale.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	return path
}

func TestResolvePrecedence(t *testing.T) {
	flagSock := fakeContainerd(t, "flag")
	envSock := fakeContainerd(t, "env")
	sysSock := fakeContainerd(t, "system")
	tests := []struct {
		name       string
		flag, env  string
		wantSource Source
		wantAddr   string
	}{
		{"flag wins over env and system", flagSock, envSock, SourceFlag, flagSock},
		{"flag as unix URL", "unix://" + flagSock, envSock, SourceFlag, flagSock},
		{"env wins over system", "", envSock, SourceEnv, envSock},
		{"system last", "", "", SourceSystem, sysSock},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvAddress, tt.env)
			c, ep, err := Resolve(context.Background(), tt.flag, Options{SystemAddress: sysSock})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if ep.Source != tt.wantSource || ep.Address != tt.wantAddr || ep.Managed {
				t.Errorf("endpoint = %+v, want source %v at %s", ep, tt.wantSource, tt.wantAddr)
			}
			if ep.Version != tt.wantSource.String() {
				t.Errorf("version %q: connected to the wrong daemon (want %q)", ep.Version, tt.wantSource)
			}
			// The returned client is connected and usable.
			v, err := c.Version(context.Background())
			if err != nil || v.Version != ep.Version {
				t.Errorf("client.Version = %+v, %v", v, err)
			}
		})
	}
}

// An address named explicitly must answer: no fallback to a later source,
// no auto-start.
func TestResolveExplicitAddressDoesNotFallBack(t *testing.T) {
	sysSock := fakeContainerd(t, "system")
	missing := filepath.Join(t.TempDir(), "missing.sock")
	opts := Options{SystemAddress: sysSock, AutoStart: true, ContainerdBinary: "/nonexistent/containerd"}

	t.Setenv(EnvAddress, "")
	_, _, err := Resolve(context.Background(), missing, opts)
	assertErr(t, err, ErrNoAnswer, missing, "no socket there", "--address")
	if !errors.Is(err, syscall.ENOENT) {
		t.Errorf("error does not wrap ENOENT: %v", err)
	}

	t.Setenv(EnvAddress, missing)
	_, _, err = Resolve(context.Background(), "", opts)
	assertErr(t, err, ErrNoAnswer, missing, "$"+EnvAddress)
}

func TestResolveNotContainerd(t *testing.T) {
	t.Setenv(EnvAddress, "")
	sock := mute(t)
	began := time.Now()
	_, _, err := Resolve(context.Background(), sock, Options{PingTimeout: 300 * time.Millisecond})
	assertErr(t, err, ErrNoAnswer, sock, "did not answer as containerd")
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("took %s: the ping timeout is not applied", d)
	}
}

func TestResolveSystemDown(t *testing.T) {
	t.Setenv(EnvAddress, "")
	emptyPath := t.TempDir() // a PATH with no containerd on it
	// No managed daemon there either (never the host's /run/hookbox).
	m := testLayout(t)
	state, run := filepath.Dir(m.Dir), filepath.Dir(m.RunDir)

	t.Run("no auto-start", func(t *testing.T) {
		sys := stale(t)
		_, _, err := Resolve(context.Background(), "", Options{SystemAddress: sys, StateDir: state, RuntimeDir: run})
		assertErr(t, err, ErrNoAnswer, sys, "stale socket", "no managed containerd runs", "pass --address")
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("error does not wrap ECONNREFUSED: %v", err)
		}
	})
	t.Run("no binary on PATH", func(t *testing.T) {
		t.Setenv("PATH", emptyPath)
		sys := filepath.Join(t.TempDir(), "containerd.sock")
		_, _, err := Resolve(context.Background(), "", Options{SystemAddress: sys, AutoStart: true, StateDir: state, RuntimeDir: run})
		assertErr(t, err, ErrNoBinary,
			"containerd does not answer at "+sys+" and no containerd binary is on PATH: apt-get install containerd runc, or pass --address")
	})
	t.Run("given binary missing", func(t *testing.T) {
		sys := filepath.Join(t.TempDir(), "containerd.sock")
		_, _, err := Resolve(context.Background(), "", Options{SystemAddress: sys, AutoStart: true, ContainerdBinary: "/nonexistent/containerd", StateDir: state, RuntimeDir: run})
		assertErr(t, err, ErrNoBinary, "/nonexistent/containerd", "apt-get install containerd runc")
	})
	t.Run("not containerd at the system address", func(t *testing.T) {
		sys := mute(t)
		_, _, err := Resolve(context.Background(), "", Options{SystemAddress: sys, PingTimeout: 200 * time.Millisecond, StateDir: state, RuntimeDir: run})
		assertErr(t, err, ErrNoAnswer, sys, "did not answer as containerd")
	})
}

// A running managed daemon is used when the system address is down, even
// without auto-start (here a fake one, on the managed layout's socket).
func TestResolveUsesRunningManaged(t *testing.T) {
	t.Setenv(EnvAddress, "")
	m := testLayout(t)
	if err := os.MkdirAll(m.RunDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fakeContainerd(t, "managed"), m.Address); err != nil {
		t.Fatal(err)
	}
	sys := filepath.Join(t.TempDir(), "containerd.sock")
	c, ep, err := Resolve(context.Background(), "", Options{SystemAddress: sys, StateDir: filepath.Dir(m.Dir), RuntimeDir: filepath.Dir(m.RunDir)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := Endpoint{Address: m.Address, Source: SourceManaged, Managed: true, Version: "managed", RuncRoot: m.RuncRoot, State: m.State}
	if ep != want {
		t.Errorf("endpoint = %+v, want %+v", ep, want)
	}
	// The system address still wins when it answers.
	sysUp := fakeContainerd(t, "system")
	c2, ep, err := Resolve(context.Background(), "", Options{SystemAddress: sysUp, StateDir: filepath.Dir(m.Dir), RuntimeDir: filepath.Dir(m.RunDir)})
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
	if ep.Source != SourceSystem {
		t.Errorf("system up: endpoint = %+v", ep)
	}
}

func TestResolveRejectsRelativeAddress(t *testing.T) {
	t.Setenv(EnvAddress, "")
	for _, addr := range []string{"containerd.sock", "tcp://127.0.0.1:1", "unix://rel.sock"} {
		if _, _, err := Resolve(context.Background(), addr, Options{}); err == nil || !strings.Contains(err.Error(), "absolute unix socket path") {
			t.Errorf("Resolve(%q) error = %v", addr, err)
		}
	}
}

func TestPing(t *testing.T) {
	sock := fakeContainerd(t, "1.6.20~fake")
	v, err := Ping(context.Background(), sock, time.Second)
	if err != nil || v.Version != "1.6.20~fake" {
		t.Fatalf("Ping = %+v, %v", v, err)
	}
	if _, err := Ping(context.Background(), filepath.Join(t.TempDir(), "none.sock"), time.Second); !errors.Is(err, ErrNoAnswer) {
		t.Errorf("Ping(missing) = %v", err)
	}
}

func TestSourceString(t *testing.T) {
	for s, want := range map[Source]string{SourceFlag: "flag", SourceEnv: "env", SourceSystem: "system", SourceManaged: "managed", Source(9): "Source(9)"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(s), s, want)
		}
	}
}

func TestDefaultRuntimeDir(t *testing.T) {
	if os.Geteuid() == 0 {
		if got := DefaultRuntimeDir(); got != "/run/hookbox" {
			t.Errorf("root: DefaultRuntimeDir() = %q", got)
		}
		return
	}
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	if got := DefaultRuntimeDir(); got != "/run/user/1000/hookbox" {
		t.Errorf("DefaultRuntimeDir() = %q", got)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	if got := DefaultRuntimeDir(); got != "" {
		t.Errorf("no XDG_RUNTIME_DIR: DefaultRuntimeDir() = %q", got)
	}
}

// assertErr checks err wraps target and its message holds every part.
func assertErr(t *testing.T, err, target error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want %v", target)
	}
	if !errors.Is(err, target) {
		t.Errorf("error %q does not wrap %v", err, target)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}
