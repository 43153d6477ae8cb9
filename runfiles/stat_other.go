//go:build !linux

package runfiles

import (
	"context"
	"io/fs"
	"iter"
	"os"
	"syscall"

	"hookbox.dev/hookbox/render"
)

// statKeyOf returns what a portable stat offers: no inode and no ctime, so
// on these systems the stat cache is much weaker. hookbox runs on Linux.
func statKeyOf(fi fs.FileInfo) statKey {
	return statKey{Size: fi.Size(), MtimeNS: fi.ModTime().UnixNano()}
}

// readRecord reads a small store record (a stat-cache entry, a seal).
func readRecord(path string) ([]byte, error) { return os.ReadFile(path) }

// ownerHint names the owner of a file for an error message (unknown here).
func ownerHint(fs.FileInfo) string { return "" }

// treeSealOf: no inode or ctime here, so no seal (which matches nothing).
func treeSealOf(fs.FileInfo) treeSeal { return treeSeal{} }

// changedSeals: without seals, every tree is verified by its walk.
func changedSeals(context.Context, string, treeSeal, []render.Runfile, []treeSeal) ([]int, bool) {
	return nil, false
}

// writeNew creates the file path, which must not exist (fs.ErrExist
// otherwise), with content b, mode 0600.
func writeNew(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// openNoFollow opens the file path for reading, never through a symlink
// at its last component.
func openNoFollow(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
}

// createTemp creates a new file in dir for reading and writing, mode 0600.
func createTemp(dir, prefix string) (*os.File, error) { return os.CreateTemp(dir, prefix+"*") }

// syncFilesystem makes the files durable, one fsync each.
func syncFilesystem(_ string, files iter.Seq[string]) error {
	for name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
