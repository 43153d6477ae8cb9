package render

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"hookbox.dev/hookbox/render/canonjson"
)

// CanonicalRunfiles returns the canonical JSON of a runfiles manifest:
// exactly what canonjson.Marshal gives for it, written directly. A large
// Node engine's manifest has 20,000 entries, and reformatting that many
// objects through the general encoder was most of what naming its render
// cost. The members are written in canonical order, with Runfile's
// omitempty rules; TestCanonicalRunfiles compares the two encoders and
// fails when Runfile changes.
func CanonicalRunfiles(manifest []Runfile) ([]byte, error) {
	size := 2
	for _, e := range manifest {
		size += len(e.Path) + len(e.SHA256) + len(e.Target) + 96 // the names, numbers and punctuation
	}
	buf := make([]byte, 0, size)
	buf = append(buf, '[')
	var err error
	for i, e := range manifest {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"mode":`...)
		buf = strconv.AppendUint(buf, uint64(e.Mode), 10)
		buf = append(buf, `,"path":`...)
		if buf, err = canonjson.AppendString(buf, e.Path); err != nil {
			return nil, err
		}
		if e.SHA256 != "" {
			buf = append(buf, `,"sha256":`...)
			if buf, err = canonjson.AppendString(buf, e.SHA256); err != nil {
				return nil, err
			}
		}
		if e.Size != 0 {
			buf = append(buf, `,"size":`...)
			buf = strconv.AppendInt(buf, e.Size, 10)
		}
		if e.Target != "" {
			buf = append(buf, `,"target":`...)
			if buf, err = canonjson.AppendString(buf, e.Target); err != nil {
				return nil, err
			}
		}
		buf = append(buf, `,"type":`...)
		if buf, err = canonjson.AppendString(buf, e.Type); err != nil {
			return nil, err
		}
		buf = append(buf, '}')
	}
	return append(buf, ']'), nil
}

// RunfilesDigest is "sha256:<hex>" of CanonicalRunfiles(manifest): the
// runfiles tree digest, which names the assembled tree.
func RunfilesDigest(manifest []Runfile) (string, error) {
	data, err := CanonicalRunfiles(manifest)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
