package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"hookbox.dev/hookbox/internal/host"
)

// SystemFile is the machine-wide config file root reads first.
const SystemFile = "/etc/hookbox/config.yaml"

// EnvFile names the one config file to read instead of the search
// (tests, packaging).
const EnvFile = "HOOKBOX_CONFIG"

// EnvKeyDir names the directory of the host's attestation key pair instead
// of KeyDir's default (tests, packaging).
const EnvKeyDir = "HOOKBOX_KEY_DIR"

// Root's directories.
const (
	rootStateDir = "/var/lib/hookbox"
	rootCacheDir = "/var/cache/hookbox"
	rootDataDir  = "/var/lib/hookbox"
)

// ErrNoFile says an explicitly named config file cannot be used.
var ErrNoFile = errors.New("unusable hookbox config location")

// Env is what the defaults depend on: the environment, and whether this
// process is root on the host. Inside RootlessKit's user namespace euid is
// 0 but the process is still the user, so Root comes from
// host.RealRoot, never from os.Geteuid.
type Env struct {
	Getenv func(string) string
	Root   bool
}

// HostEnv is this process's Env.
func HostEnv() Env { return Env{Getenv: os.Getenv, Root: host.RealRoot()} }

// StateDir is where run records live: /var/lib/hookbox for root, else
// $XDG_STATE_HOME/hookbox, else ~/.local/state/hookbox; "" when no home
// directory is known.
func StateDir() string { return HostEnv().StateDir() }

// CacheDir is where the runfiles store lives (everything in it can be
// rebuilt): /var/cache/hookbox for root, else $XDG_CACHE_HOME/hookbox, else
// ~/.cache/hookbox; "" when no home directory is known.
func CacheDir() string { return HostEnv().CacheDir() }

// DataDir is where the managed containerd keeps its root (images, content):
// /var/lib/hookbox for root, else $XDG_DATA_HOME/hookbox, else
// ~/.local/share/hookbox; "" when no home directory is known.
func DataDir() string { return HostEnv().DataDir() }

// StateDir is StateDir for e.
func (e Env) StateDir() string { return e.dir(rootStateDir, "XDG_STATE_HOME", ".local/state") }

// CacheDir is CacheDir for e.
func (e Env) CacheDir() string { return e.dir(rootCacheDir, "XDG_CACHE_HOME", ".cache") }

// DataDir is DataDir for e.
func (e Env) DataDir() string { return e.dir(rootDataDir, "XDG_DATA_HOME", ".local/share") }

// dir applies the XDG base directory rule: a relative $xdg is ignored.
func (e Env) dir(root, xdg, underHome string) string {
	if e.Root {
		return root
	}
	if x := e.Getenv(xdg); filepath.IsAbs(x) {
		return filepath.Join(x, "hookbox")
	}
	if h := e.Getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Join(h, underHome, "hookbox")
	}
	return ""
}

// KeyDir is where this host's attestation key pair lives (package attest):
// $HOOKBOX_KEY_DIR if set (it must be absolute); else, beside the config
// files, /etc/hookbox for root, $XDG_CONFIG_HOME/hookbox or
// ~/.config/hookbox for a user; "" when no home directory is known.
func (e Env) KeyDir() (string, error) {
	if d := e.Getenv(EnvKeyDir); d != "" {
		if !filepath.IsAbs(d) {
			return "", fmt.Errorf("%w: $%s must be an absolute path", ErrNoFile, EnvKeyDir)
		}
		return filepath.Clean(d), nil
	}
	if e.Root {
		return filepath.Dir(SystemFile), nil
	}
	if x := e.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "hookbox"), nil
	}
	if h := e.Getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Join(h, ".config", "hookbox"), nil
	}
	return "", nil
}

// Files returns the config files to read, lowest precedence first. With
// $HOOKBOX_CONFIG set (it must be absolute) it is the only one. Otherwise
// root reads SystemFile, then its own user file; a user reads only the
// user file: $XDG_CONFIG_HOME/hookbox/config.yaml, else
// ~/.config/hookbox/config.yaml. An empty variable counts as unset, and a
// relative XDG_CONFIG_HOME or HOME is ignored. The files need not exist.
func (e Env) Files() ([]string, error) {
	if p := e.Getenv(EnvFile); p != "" {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("%w: $%s must be an absolute path", ErrNoFile, EnvFile)
		}
		return []string{filepath.Clean(p)}, nil
	}
	var files []string
	if e.Root {
		files = append(files, SystemFile)
	}
	if x := e.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
		files = append(files, filepath.Join(x, "hookbox", "config.yaml"))
	} else if h := e.Getenv("HOME"); filepath.IsAbs(h) {
		files = append(files, filepath.Join(h, ".config", "hookbox", "config.yaml"))
	}
	return files, nil
}
