//go:build !linux

package ebpf

import (
	"fmt"
	"runtime"
)

// TracefsPath is "" off Linux.
func TracefsPath() string { return "" }

// EnsureTracefs reports ErrNotSupported off Linux.
func EnsureTracefs() error {
	return fmt.Errorf("%w: no tracefs on %s", ErrNotSupported, runtime.GOOS)
}

// EnsureSecurityfs reports ErrNotSupported off Linux.
func EnsureSecurityfs() error {
	return fmt.Errorf("%w: no securityfs on %s", ErrNotSupported, runtime.GOOS)
}

// FileIdentity reports ErrNotSupported off Linux.
func FileIdentity(string) (FileID, error) {
	return FileID{}, fmt.Errorf("%w: file identity on %s", ErrNotSupported, runtime.GOOS)
}

// FileIdentityIn reports ErrNotSupported off Linux.
func FileIdentityIn(string, string) (FileID, error) {
	return FileID{}, fmt.Errorf("%w: file identity on %s", ErrNotSupported, runtime.GOOS)
}
