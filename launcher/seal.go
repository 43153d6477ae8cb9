package launcher

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/attest"
	"hookbox.dev/hookbox/mounts"
	"hookbox.dev/hookbox/notify"
	"hookbox.dev/hookbox/render/canonjson"
)

// RecordDigests is result.json's record section: every file of the run
// record that was written before result.json, with its sha256, and the
// digest of that list, so that a changed, added or removed file is found
// (hookbox verify). It is computed once teardown has harvested everything.
type RecordDigests struct {
	Files []RecordFile `json:"files"`
	// Chain is the sha256 of the canonical JSON of Files (render/canonjson),
	// "sha256:<hex>": one value that names every file's content.
	Chain string `json:"chain"`
}

// RecordFile is one file of the run record.
type RecordFile struct {
	// Path is slash-separated and relative to the record directory; a '%'
	// and each byte that is not UTF-8 are written %XX.
	Path string `json:"path"`
	// Type is empty for a regular file, "symlink" for a symlink (its
	// digest is of the link text), "other" for anything else (no content).
	Type   string `json:"type,omitempty"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // lowercase hex
}

// Record file types besides regular files.
const (
	recordSymlink = "symlink"
	recordOther   = "other"
)

// unsealed are the top-level record entries outside the digests: the files
// written after them (result.json holds them; the attestation covers
// result.json; the notifier and gc write theirs later) and the run's mount
// sources, which are not evidence: the config dir holds the render's
// files (render.json has them, and a rootless run's are owned by the
// container's uid, which its user cannot read), the tmpfs and workspace
// store mount points are empty once teardown unmounted them.
func unsealed(name string) bool {
	hp := mounts.RunHostPaths("")
	switch name {
	case ResultFile, attest.File, notify.StderrFile, CollectedFile,
		filepath.Base(hp.ConfigDir), filepath.Base(hp.RunDir), filepath.Base(hp.WorkspaceStore):
		return true
	}
	return false
}

// DigestRecord lists every file of the record directory dir with its
// digest, in path order, and the chain over the list.
func DigestRecord(dir string) (RecordDigests, error) {
	files := []RecordFile{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if !strings.ContainsRune(rel, filepath.Separator) && unsealed(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		f, err := digestEntry(path, d.Type())
		if err != nil {
			return err
		}
		f.Path = recordPath(filepath.ToSlash(rel))
		files = append(files, f)
		return nil
	})
	if err != nil {
		return RecordDigests{}, fmt.Errorf("digests of the run record %s: %w", dir, err)
	}
	slices.SortFunc(files, func(a, b RecordFile) int { return strings.Compare(a.Path, b.Path) })
	chain, err := recordChain(files)
	if err != nil {
		return RecordDigests{}, err
	}
	return RecordDigests{Files: files, Chain: chain}, nil
}

func recordChain(files []RecordFile) (string, error) {
	chain, _, err := canonjson.Digest(files)
	if err != nil {
		return "", fmt.Errorf("digest of the record's file list: %w", err)
	}
	return chain, nil
}

// digestEntry hashes one entry without following a symlink.
func digestEntry(path string, mode fs.FileMode) (RecordFile, error) {
	switch {
	case mode&fs.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			return RecordFile{}, err
		}
		sum := sha256.Sum256([]byte(target))
		return RecordFile{Type: recordSymlink, Size: int64(len(target)), SHA256: hex.EncodeToString(sum[:])}, nil
	case !mode.IsRegular():
		sum := sha256.Sum256(nil)
		return RecordFile{Type: recordOther, SHA256: hex.EncodeToString(sum[:])}, nil
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return RecordFile{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return RecordFile{}, fmt.Errorf("reading %s: %w", path, err)
	}
	return RecordFile{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// recordPath escapes '%' and bytes that are not UTF-8 (an engine may name
// its files anything), so the list is valid JSON and names each file once.
func recordPath(p string) string {
	if utf8.ValidString(p) && !strings.Contains(p, "%") {
		return p
	}
	var b strings.Builder
	for len(p) > 0 {
		r, size := utf8.DecodeRuneInString(p)
		if r == '%' || r == utf8.RuneError && size == 1 {
			fmt.Fprintf(&b, "%%%02X", p[0])
		} else {
			b.WriteString(p[:size])
		}
		p = p[size:]
	}
	return b.String()
}

// Record problems: why a record or its attestation does not verify.
const (
	ProblemFileChanged       = "file-changed"         // a file's content differs from its recorded digest
	ProblemFileMissing       = "file-missing"         // a recorded file is gone
	ProblemFileAdded         = "file-added"           // a file the record does not list
	ProblemRecordUnreadable  = "record-unreadable"    // a file could not be read or parsed
	ProblemChainDiffers      = "record-chain-differs" // result.json's file list is not the one its chain names
	ProblemNoDigests         = "record-digests-missing"
	ProblemVerdictDiffers    = "verdict-differs" // the recorded verdict is not what the record gives
	ProblemUnsigned          = "attestation-unsigned"
	ProblemSignature         = "signature-invalid"
	ProblemStatement         = "statement-invalid"
	ProblemSubjectChanged    = "subject-changed"
	ProblemAttestedDiffers   = "attested-digest-differs" // a digest in the predicate is not the record's
	ProblemAttestedVerdict   = "attested-verdict-differs"
	ProblemAttestationAbsent = "attestation-missing"
)

// Problem is one reason a record does not verify.
type Problem struct {
	Reason string `json:"reason"`
	// Path is the record file (or attestation field) concerned.
	Path   string `json:"path,omitempty"`
	Detail string `json:"detail"`
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Reason + ": " + p.Detail
	}
	return p.Path + ": " + p.Reason + ": " + p.Detail
}

// Check recomputes the digests of the record directory dir and returns
// every difference from d: each changed, missing or added file, and a
// file list that its own chain does not name.
func (d RecordDigests) Check(dir string) []Problem {
	var problems []Problem
	if chain, err := recordChain(d.Files); err != nil || chain != d.Chain {
		problems = append(problems, Problem{Reason: ProblemChainDiffers, Path: ResultFile,
			Detail: fmt.Sprintf("the record's file list digests to %s, not the %s it states: the list was edited", chain, d.Chain)})
	}
	now, err := DigestRecord(dir)
	if err != nil {
		var pe *fs.PathError
		path := ""
		if errors.As(err, &pe) {
			if rel, rerr := filepath.Rel(dir, pe.Path); rerr == nil {
				path = filepath.ToSlash(rel)
			}
		}
		return append(problems, Problem{Reason: ProblemRecordUnreadable, Path: path, Detail: err.Error()})
	}
	recorded := map[string]RecordFile{}
	for _, f := range d.Files {
		recorded[f.Path] = f
	}
	for _, f := range now.Files {
		want, ok := recorded[f.Path]
		delete(recorded, f.Path)
		switch {
		case !ok:
			problems = append(problems, Problem{Reason: ProblemFileAdded, Path: f.Path,
				Detail: fmt.Sprintf("not in the record (%d bytes, sha256 %s)", f.Size, f.SHA256)})
		case f != want:
			problems = append(problems, Problem{Reason: ProblemFileChanged, Path: f.Path,
				Detail: fmt.Sprintf("%s, recorded %s", describeRecordFile(f), describeRecordFile(want))})
		}
	}
	missing := make([]string, 0, len(recorded))
	for p := range recorded {
		missing = append(missing, p)
	}
	slices.Sort(missing)
	for _, p := range missing {
		problems = append(problems, Problem{Reason: ProblemFileMissing, Path: p, Detail: "recorded, but no longer in the record"})
	}
	return problems
}

func describeRecordFile(f RecordFile) string {
	kind := ""
	if f.Type != "" {
		kind = f.Type + " "
	}
	return fmt.Sprintf("%s%d bytes, sha256 %s", kind, f.Size, f.SHA256)
}

// sha256File is "sha256:<hex>" of a record file.
func sha256File(path string) (string, error) {
	f, err := digestEntry(path, 0)
	if err != nil {
		return "", err
	}
	return "sha256:" + f.SHA256, nil
}
