package host

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// WriteFileAtomic replaces path with data, mode perm, so that a reader
// (gc, ps, a daemon's next start) sees the old content or the new, never a
// part: it writes a temporary file in the same directory, syncs it and
// renames it over path. A failure leaves path as it was and no temporary
// file behind.
func WriteFileAtomic(path string, data []byte, perm fs.FileMode) error {
	_, err := WriteFilesAtomic([]File{{Path: path, Data: data, Perm: perm}})
	return err
}

// File is one file for WriteFilesAtomic.
type File struct {
	Path string
	Data []byte
	Perm fs.FileMode
}

// WriteFilesAtomic replaces each file as WriteFileAtomic does, their
// temporary files written and synced side by side (one wait for the disk
// instead of one per file), then renamed into place in order: a reader
// never sees a file before those listed ahead of it. It returns how many
// were renamed; a failure leaves the rest as they were and no temporary
// file behind.
func WriteFilesAtomic(files []File) (int, error) {
	tmps := make([]*os.File, 0, len(files))
	defer func() {
		for _, t := range tmps {
			os.Remove(t.Name()) // gone already once renamed
		}
	}()
	for _, f := range files {
		tmp, err := os.CreateTemp(filepath.Dir(f.Path), "."+filepath.Base(f.Path)+".tmp*")
		if err != nil {
			for _, t := range tmps {
				t.Close()
			}
			return 0, fmt.Errorf("writing %s: %w", f.Path, err)
		}
		tmps = append(tmps, tmp)
	}
	errs := make([]error, len(files))
	if len(files) == 1 {
		errs[0] = writeSynced(tmps[0], files[0].Data, files[0].Perm)
	} else {
		var wg sync.WaitGroup
		for i, f := range files {
			wg.Go(func() { errs[i] = writeSynced(tmps[i], f.Data, f.Perm) })
		}
		wg.Wait()
	}
	for i, f := range files {
		if errs[i] == nil {
			errs[i] = os.Rename(tmps[i].Name(), f.Path)
		}
		if errs[i] != nil {
			return i, fmt.Errorf("writing %s: %w", f.Path, errs[i])
		}
	}
	return len(files), nil
}

// writeSynced writes data to f, sets its mode, syncs and closes it.
func writeSynced(f *os.File, data []byte, perm fs.FileMode) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
