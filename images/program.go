package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"hookbox.dev/hookbox/runfiles"
)

// Where the program images hold their one program. render/k8s names the
// same paths in the seed and proxy containers' argv (a test keeps them in
// step); the image's PATH has their directory too.
const (
	SeedProgramPath  = "/usr/local/bin/hookbox-seed"
	ProxyProgramPath = "/usr/local/bin/hookbox"
)

// SeedBinary is the file name of hookbox-seed, looked up next to the
// running hookbox executable (make build puts both in bin/); SeedEnv,
// when set, is the host path to use instead (tests, packagers).
const (
	SeedBinary = "hookbox-seed"
	SeedEnv    = "HOOKBOX_SEED"
)

// ProgramLabel marks a program image; its value is the image's Kind.
const ProgramLabel = "dev.hookbox.program"

// SeedHostPath is the host file that goes into the seed image: $HOOKBOX_SEED,
// else hookbox-seed beside the running executable.
func SeedHostPath() (string, error) {
	if p := os.Getenv(SeedEnv); p != "" {
		return p, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("images: finding %s next to this executable: %w", SeedBinary, err)
	}
	return filepath.Join(filepath.Dir(exe), SeedBinary), nil
}

// ProxyHostPath is the host file that goes into the proxy image: the
// running hookbox executable, whose `hookbox egress serve` is the proxy.
func ProxyHostPath() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("images: finding the hookbox executable: %w", err)
	}
	return exe, nil
}

// AddProgram adds the image of one static program (KindSeed: hookbox-seed
// at SeedProgramPath; KindProxy: hookbox at ProxyProgramPath) read from
// hostPath: its directories (0755) and the program (0555), owner 0:0,
// mtime SourceDateEpoch, config user 65532:65532 with PATH, no entrypoint
// (the Job gives argv). The digest follows from the program's bytes. A
// dynamically linked program is refused: the image has no libraries.
func (s *Set) AddProgram(ctx context.Context, kind Kind, hostPath string) (*Built, error) {
	var at string
	switch kind {
	case KindSeed:
		at = SeedProgramPath
	case KindProxy:
		at = ProxyProgramPath
	default:
		return nil, fmt.Errorf("images: %q is not a program image kind", kind)
	}
	fi, err := os.Stat(hostPath)
	if errors.Is(err, fs.ErrNotExist) && kind == KindSeed {
		return nil, fmt.Errorf("images: the seed program %s is missing (build it with make build, which puts it next to bin/hookbox, or set %s): %w", hostPath, SeedEnv, err)
	}
	if err != nil {
		return nil, fmt.Errorf("images: %s image: %w", kind, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("images: %s image: %s is not a regular file", kind, hostPath)
	}
	if err := runfiles.RequireStatic(hostPath); err != nil {
		return nil, fmt.Errorf("images: %s image: %w", kind, err)
	}
	size, sum, err := fileDigest(hostPath)
	if err != nil {
		return nil, err
	}
	var entries []streamEntry
	for _, d := range []string{"/usr", "/usr/local", path.Dir(at)} {
		entries = append(entries, streamEntry{path: d, typ: Dir, mode: 0o755})
	}
	entries = append(entries, streamEntry{path: at, typ: File, mode: 0o555, size: size, sha256: sum,
		open: func() (io.ReadCloser, error) { return os.Open(hostPath) }})
	layer, err := s.writeLayer(ctx, entries, ModTime(), nil)
	if err != nil {
		return nil, err
	}
	created := ModTime()
	cfg := ocispec.Image{
		Created: &created,
		Config: ocispec.ImageConfig{
			User:   fmt.Sprintf("%d:%d", UID, GID),
			Env:    []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
			Labels: map[string]string{ProgramLabel: string(kind)},
		},
		History: []ocispec.History{{
			Created:   &created,
			CreatedBy: "hookbox images.Set.AddProgram",
			Comment:   fmt.Sprintf("%s sha256:%s, the image's only program", at, sum),
		}},
	}
	return s.addImage(&Built{Kind: kind, Platform: hostPlatform()}, cfg, layer)
}
