//go:build !linux

package runfiles

import (
	"context"
	"io/fs"
	"os"
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
func changedSeals(context.Context, string, *assemblyIndex) ([]int, bool) { return nil, false }
