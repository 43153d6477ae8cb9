package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
)

// SecurityfsDir is where securityfs is mounted; LSMFile in it lists the
// active Linux security modules, comma-separated, in calling order.
const (
	SecurityfsDir = "/sys/kernel/security"
	LSMFile       = SecurityfsDir + "/lsm"
)

// ErrNoSecurityfs: the LSM list cannot be read because securityfs is not
// mounted (mount -t securityfs securityfs /sys/kernel/security).
var ErrNoSecurityfs = errors.New("securityfs is not mounted")

// ParseLSMs splits the text of LSMFile into module names.
func ParseLSMs(data string) []string {
	var out []string
	for _, name := range strings.Split(strings.TrimSpace(data), ",") {
		if name = strings.TrimSpace(name); name != "" {
			out = append(out, name)
		}
	}
	return out
}

// ReadLSMs reads an LSM list file (LSMFile, or a fixture); a missing file
// is ErrNoSecurityfs.
func ReadLSMs(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no %s", ErrNoSecurityfs, path)
	}
	if err != nil {
		return nil, fmt.Errorf("active LSMs: %w", err)
	}
	return ParseLSMs(string(data)), nil
}

// BPFLSMActive reports whether the BPF LSM is among the active modules in
// LSMFile: only then do BPF programs attached to LSM hooks run (a kernel
// with CONFIG_BPF_LSM but without "bpf" in its lsm= list loads and
// attaches them and never calls them).
func BPFLSMActive() (bool, error) {
	lsms, err := ReadLSMs(LSMFile)
	if err != nil {
		return false, err
	}
	return slices.Contains(lsms, "bpf"), nil
}
