package images

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteRootfs lays the definition out as a directory (owner root, the
// definition's modes, the fixed mtime): the base image unpacked, for
// runtimes given a rootfs path directly (runc bundles) rather than a
// containerd snapshot. dir must be empty or missing.
func (d Definition) WriteRootfs(dir string) error {
	if err := d.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("images: rootfs: %w", err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) > 0 {
		return fmt.Errorf("images: rootfs %s must be an empty directory (%v)", dir, err)
	}
	mtime := ModTime()
	var dirs []string
	for _, e := range d.Entries { // sorted, parents first
		path := filepath.Join(dir, e.Path)
		switch e.Type {
		case Dir:
			if err := os.Mkdir(path, 0o700); err != nil && !os.IsExist(err) {
				return fmt.Errorf("images: rootfs: %w", err)
			}
			dirs = append(dirs, path)
		case File:
			if err := os.WriteFile(path, e.Data, 0o600); err != nil {
				return fmt.Errorf("images: rootfs: %w", err)
			}
		}
		// Chmod after creation: the umask must not change the modes.
		if err := os.Chmod(path, e.Mode); err != nil {
			return fmt.Errorf("images: rootfs: %w", err)
		}
		if err := os.Lchown(path, 0, 0); err != nil {
			return fmt.Errorf("images: rootfs: %w", err)
		}
		if e.Type == File {
			if err := os.Chtimes(path, mtime, mtime); err != nil {
				return fmt.Errorf("images: rootfs: %w", err)
			}
		}
	}
	// Directory mtimes last, children having changed them.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chtimes(dirs[i], mtime, mtime); err != nil {
			return fmt.Errorf("images: rootfs: %w", err)
		}
	}
	return nil
}
