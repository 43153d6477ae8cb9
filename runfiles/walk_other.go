//go:build !linux

package runfiles

import (
	"io/fs"
	"os"
	"path/filepath"
)

// walkTree calls fn for every entry below the directory root, except skip
// and what is below it, in filepath.WalkDir's order.
func walkTree(root, skip string, fn func(path string, e walkEntry) error) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		if p == skip {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		e := walkEntry{mode: fi.Mode(), key: statKeyOf(fi)}
		if e.mode&fs.ModeSymlink != 0 {
			if e.target, err = os.Readlink(p); err != nil {
				return err
			}
		}
		return fn(p, e)
	})
}
