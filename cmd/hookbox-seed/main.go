// Command hookbox-seed prepares a Kubernetes Job's run dir before the engine
// starts: the seed init containers of hookbox render --format k8s run it
// from hookbox's seed image (hookbox image build), so a Job needs no
// third-party image for what the launcher does on a host. It is static
// (CGO_ENABLED=0) and the only file of its image.
//
// Usage, argv only (no shell, no PATH lookup of anything):
//
//	hookbox-seed mkdir MODE DIR...      create each DIR with exactly MODE
//	hookbox-seed install MODE SRC DST   copy SRC to DST with exactly MODE
//
// MODE is octal permission bits (e.g. 0700); the umask does not apply.
// mkdir takes DIRs parents first, as render/k8s lists them: a DIR that
// already is a directory is kept as it is (the run dir's root is the
// emptyDir itself), a missing parent is an error. install writes DST anew
// (replacing a file a restarted init container left) without following a
// symlink at DST. Paths must be absolute. Errors go to stderr, prefixed
// "hookbox-seed:", with exit 1; a usage error exits 2.
package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

const (
	exitFailure = 1
	exitUsage   = 2
)

const usage = "usage: hookbox-seed mkdir MODE DIR... | hookbox-seed install MODE SRC DST"

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	if len(args) < 3 {
		fmt.Fprintln(stderr, "hookbox-seed: "+usage)
		return exitUsage
	}
	mode, err := parseMode(args[1])
	if err != nil {
		fmt.Fprintf(stderr, "hookbox-seed: %v; %s\n", err, usage)
		return exitUsage
	}
	paths := args[2:]
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			fmt.Fprintf(stderr, "hookbox-seed: %q is not an absolute path\n", p)
			return exitUsage
		}
	}
	switch {
	case args[0] == "mkdir":
		for _, dir := range paths {
			if err := makeDir(dir, mode); err != nil {
				fmt.Fprintf(stderr, "hookbox-seed: %v\n", err)
				return exitFailure
			}
		}
	case args[0] == "install" && len(paths) == 2:
		if err := install(paths[0], paths[1], mode); err != nil {
			fmt.Fprintf(stderr, "hookbox-seed: %v\n", err)
			return exitFailure
		}
	default:
		fmt.Fprintln(stderr, "hookbox-seed: "+usage)
		return exitUsage
	}
	return 0
}

// parseMode reads octal permission bits; anything else (setuid, setgid,
// sticky, a sign) is refused.
func parseMode(s string) (fs.FileMode, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m&^0o777 != 0 {
		return 0, fmt.Errorf("mode %q: give octal permission bits, 0000 to 0777", s)
	}
	return fs.FileMode(m), nil
}

func makeDir(dir string, mode fs.FileMode) error {
	err := os.Mkdir(dir, 0o700)
	if errors.Is(err, fs.ErrExist) {
		fi, statErr := os.Lstat(dir)
		if statErr == nil && fi.IsDir() {
			return nil
		}
		return fmt.Errorf("mkdir %s: exists and is not a directory", dir)
	}
	if err != nil {
		return err
	}
	// Chmod after creation: the umask must not change the mode.
	return os.Chmod(dir, mode)
}

func install(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	// O_NOFOLLOW: a symlink at DST is refused, not written through.
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("install %s: %w", dst, err)
	}
	if err := out.Chmod(mode); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
