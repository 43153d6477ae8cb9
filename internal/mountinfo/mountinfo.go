// Package mountinfo owns reading the kernel's mount table,
// /proc/<pid>/mountinfo (proc(5)): one Mount per line, with the kernel's
// octal escapes undone. It only parses; what a mount means (a cgroup
// hierarchy, a run's tmpfs, a tracefs) is for its callers to decide.
//
// Parse is strict: a line it cannot read is an error (ErrMalformed), never
// skipped, so that a caller asking "is this mounted?" does not hear "no"
// from a line it could not read. A caller that must not fail (a diagnostic
// probe) can skip such lines itself with ParseLine.
package mountinfo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Path is the mount table of this process's mount namespace.
const Path = "/proc/self/mountinfo"

// ErrMalformed: a line is not in the format of proc(5). Errors of Parse,
// Read and ParseLine for such a line match it with errors.Is.
var ErrMalformed = errors.New("malformed mountinfo line")

// Mount is one line of mountinfo.
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	ID Parent Major:Minor Root MountPoint Options Optional... - FSType Source SuperOptions
type Mount struct {
	ID, Parent   int      // mount ids; Parent is the mount this one is on
	Major, Minor int      // device of the filesystem (st_dev); with Root, identifies what is mounted
	Root         string   // directory of the filesystem mounted here ("/" for all of it)
	MountPoint   string   // where it is mounted, relative to this process's root
	Options      []string // per-mount: rw, nosuid, nodev, noexec, relatime…
	Optional     []string // propagation: shared:N, master:N, propagate_from:N, unbindable
	FSType       string   // tmpfs, cgroup2, fuse.sshfs…
	Source       string   // filesystem-specific: /dev/sda1, tmpfs, none; may be ""
	SuperOptions []string // per-superblock: size=…k, mode=…, cgroup v1 controllers; nil when the line has none
}

// Read parses Path. A failure to read it is returned as is (it names the
// file); a line it cannot parse is an ErrMalformed.
func Read() ([]Mount, error) {
	data, err := os.ReadFile(Path)
	if err != nil {
		return nil, err
	}
	return parse(data)
}

// Parse parses mountinfo text. Blank lines are skipped; any other line it
// cannot read fails the whole parse with an ErrMalformed naming the line.
func Parse(r io.Reader) ([]Mount, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	return parse(data)
}

func parse(data []byte) ([]Mount, error) {
	var out []Mount
	for n, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		m, ok := parseLine(string(line))
		if !ok {
			return nil, &lineError{line: n + 1, text: string(line)}
		}
		out = append(out, m)
	}
	return out, nil
}

// ParseLine parses one line of mountinfo, without its newline.
func ParseLine(line string) (Mount, error) {
	m, ok := parseLine(line)
	if !ok {
		return Mount{}, &lineError{text: line}
	}
	return m, nil
}

// lineError is an ErrMalformed for one line (line 0: not known).
type lineError struct {
	line int
	text string
}

func (e *lineError) Error() string {
	if e.line == 0 {
		return fmt.Sprintf("mountinfo line is malformed: %q", e.text)
	}
	return fmt.Sprintf("mountinfo line %d is malformed: %q", e.line, e.text)
}

func (e *lineError) Is(target error) bool { return target == ErrMalformed }

func parseLine(line string) (Mount, bool) {
	// The kernel separates fields with one space and escapes the space,
	// tab, newline and backslash inside them, nothing else: other white
	// space (\r, \v, U+00A0…) is part of a field, and two spaces in a row
	// enclose an empty field (a mount whose source is "").
	fields := strings.Split(line, " ")
	// Six fields, then any number of optional fields, then "-": the
	// search starts after the mount options, so a mount point named "-"
	// is not taken for the separator.
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || len(fields) < sep+3 {
		return Mount{}, false
	}
	// Only the source may be empty.
	if slices.Contains(fields[3:sep], "") || fields[sep+1] == "" {
		return Mount{}, false
	}
	id, okID := number(fields[0])
	parent, okParent := number(fields[1])
	major, minor, okDev := device(fields[2])
	if !okID || !okParent || !okDev {
		return Mount{}, false
	}
	m := Mount{ID: id, Parent: parent, Major: major, Minor: minor}
	m.Root = unescape(fields[3])
	m.MountPoint = unescape(fields[4])
	m.Options = strings.Split(fields[5], ",")
	if sep > 6 {
		m.Optional = fields[6:sep]
	}
	m.FSType = unescape(fields[sep+1])
	m.Source = unescape(fields[sep+2])
	if len(fields) > sep+3 {
		// Split before unescaping: the commas between options are never
		// escaped; one inside a value is \054 where the filesystem
		// escapes its options (seq_show_option).
		m.SuperOptions = strings.Split(fields[sep+3], ",")
		for i, o := range m.SuperOptions {
			m.SuperOptions[i] = unescape(o)
		}
	}
	return m, true
}

// number parses a decimal id or device number: digits only, no sign.
func number(s string) (int, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	return int(n), err == nil
}

// device parses major:minor.
func device(s string) (major, minor int, ok bool) {
	maj, min, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, false
	}
	major, okMajor := number(maj)
	minor, okMinor := number(min)
	return major, minor, okMajor && okMinor
}

// unescape undoes the kernel's octal escapes in a mountinfo field (\040
// for a space, \011 tab, \012 newline, \134 backslash; any byte \000 to
// \377). A backslash that does not start such an escape stays as it is.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && '0' <= s[i+1] && s[i+1] <= '3' && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return '0' <= c && c <= '7' }
