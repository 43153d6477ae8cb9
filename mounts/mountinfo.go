package mounts

import (
	"bytes"
	"fmt"
	"strings"
)

// mountEntry is one line of /proc/<pid>/mountinfo (proc(5)).
type mountEntry struct {
	MountPoint   string
	MountOptions []string // per-mount: rw, nosuid, nodev, noexec…
	FSType       string
	Source       string
	SuperOptions []string // per-superblock: size=…k, mode=…, uid=…
}

// parseMountInfo parses mountinfo text. A malformed line is an error, not
// skipped: a caller asking "is this mounted?" must not hear "no" from a
// line it could not read.
func parseMountInfo(data []byte) ([]mountEntry, error) {
	var out []mountEntry
	for n, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		fields := strings.Fields(string(line))
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || len(fields) < sep+3 {
			return nil, fmt.Errorf("mountinfo line %d is malformed: %q", n+1, line)
		}
		e := mountEntry{
			MountPoint:   unescapeMountInfo(fields[4]),
			MountOptions: strings.Split(fields[5], ","),
			FSType:       unescapeMountInfo(fields[sep+1]),
			Source:       unescapeMountInfo(fields[sep+2]),
		}
		if len(fields) > sep+3 {
			e.SuperOptions = strings.Split(fields[sep+3], ",")
		}
		out = append(out, e)
	}
	return out, nil
}

// unescapeMountInfo undoes the kernel's octal escapes (\040 for a space,
// \011, \012, \134) in a mountinfo field.
func unescapeMountInfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			v := (s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0')
			b.WriteByte(v)
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// lastAt returns the topmost entry mounted at mountpoint p, or nil.
func lastAt(entries []mountEntry, p string) *mountEntry {
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].MountPoint == p {
			return &entries[i]
		}
	}
	return nil
}
