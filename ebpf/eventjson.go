package ebpf

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"syscall"
	"unicode/utf8"
)

// An Event's JSON form is written for every exec twice in a traced run
// (by the tracer daemon on its socket, by the run into trace.jsonl) and
// read once (by the run): at an exec storm's rate, encoding/json's
// reflection cost most of the tracer's overhead. So the form is written
// by hand (AppendJSON) and read by hand when it is exactly what
// AppendJSON writes; anything else goes through encoding/json as before
// (eventJSON), with the same result for what both accept (the tests and
// FuzzEventJSON compare them).

// Bytes is a byte string that marshals to JSON as a string when it is
// valid UTF-8 and as {"b64": "<standard base64>"} otherwise, so arbitrary
// bytes (argv elements, filenames) round-trip exactly.
type Bytes []byte

// MarshalJSON implements json.Marshaler.
func (b Bytes) MarshalJSON() ([]byte, error) { return appendBytes(nil, b), nil }

// UnmarshalJSON implements json.Unmarshaler.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		*b = Bytes(s)
		return nil
	}
	var o struct {
		B64 *string `json:"b64"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil || o.B64 == nil {
		return fmt.Errorf("bytes: want a string or {\"b64\": ...}, got %s", data)
	}
	v, err := base64.StdEncoding.DecodeString(*o.B64)
	if err != nil {
		return fmt.Errorf("bytes: %w", err)
	}
	*b = v
	return nil
}

// eventJSON is the trace.jsonl form of an Event, as encoding/json reads
// it. Byte strings (comm, filename, each argv element) are JSON strings
// when valid UTF-8, else {"b64": ...} (see Bytes). dev is "major:minor".
type eventJSON struct {
	Kind      Kind     `json:"kind"`
	Time      uint64   `json:"time_ns"`
	CgroupID  uint64   `json:"cgroup_id"`
	TGID      uint32   `json:"tgid"`
	TID       uint32   `json:"tid"`
	PPID      uint32   `json:"ppid"`
	UID       uint32   `json:"uid"`
	Comm      Bytes    `json:"comm"`
	Filename  Bytes    `json:"filename"`
	Argv      []Bytes  `json:"argv"`
	ArgvLen   uint32   `json:"argv_len"`
	Truncated bool     `json:"truncated"`
	Dev       string   `json:"dev"`
	Ino       uint64   `json:"ino"`
	Errno     int32    `json:"errno,omitempty"`
	Killed    bool     `json:"killed"`
	Target    uint32   `json:"target,omitempty"`
	Mode      uint32   `json:"mode,omitempty"`
	Flags     []string `json:"flags,omitempty"`
}

// event checks j and converts it: both readers end here.
func (j *eventJSON) event() (Event, error) {
	if !j.Kind.known() {
		return Event{}, fmt.Errorf("event: unknown kind %q", j.Kind)
	}
	dev, err := parseDev(j.Dev)
	if err != nil {
		return Event{}, fmt.Errorf("event: %w", err)
	}
	flags, err := parseFlags(j.Flags)
	if err != nil {
		return Event{}, fmt.Errorf("event: %w", err)
	}
	e := Event{
		Kind: j.Kind, Time: j.Time, CgroupID: j.CgroupID,
		TGID: j.TGID, TID: j.TID, PPID: j.PPID, UID: j.UID,
		Comm: string(j.Comm), Filename: string(j.Filename),
		ArgvLen: j.ArgvLen, Truncated: j.Truncated,
		Dev: dev, Ino: j.Ino, Errno: syscall.Errno(j.Errno),
		Killed: j.Killed, Target: j.Target, Mode: j.Mode, Flags: flags,
	}
	if len(j.Argv) > 0 {
		e.Argv = make([][]byte, len(j.Argv))
		for i, a := range j.Argv {
			e.Argv[i] = []byte(a)
		}
	}
	return e, nil
}

// AppendJSON appends the trace.jsonl form of e to dst:
//
//	{"kind":"exec","time_ns":…,"cgroup_id":…,"tgid":…,"tid":…,"ppid":…,
//	 "uid":0,"comm":"true","filename":"/bin/true",
//	 "argv":["/bin/true","a","",{"b64":"/w=="}],"argv_len":18,
//	 "truncated":false,"dev":"254:0","ino":1234,"killed":false}
//
// argv is always an array (empty, never null); errno appears for failed
// execs and refusals, target and mode for ptrace-denied; flags lists every
// flag bit by name when any is set. The bytes are encoding/json's for
// eventJSON (HTML characters escaped, as json.Marshal does).
func (e Event) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"kind":`...)
	dst = appendString(dst, string(e.Kind))
	dst = append(dst, `,"time_ns":`...)
	dst = strconv.AppendUint(dst, e.Time, 10)
	dst = append(dst, `,"cgroup_id":`...)
	dst = strconv.AppendUint(dst, e.CgroupID, 10)
	dst = append(dst, `,"tgid":`...)
	dst = strconv.AppendUint(dst, uint64(e.TGID), 10)
	dst = append(dst, `,"tid":`...)
	dst = strconv.AppendUint(dst, uint64(e.TID), 10)
	dst = append(dst, `,"ppid":`...)
	dst = strconv.AppendUint(dst, uint64(e.PPID), 10)
	dst = append(dst, `,"uid":`...)
	dst = strconv.AppendUint(dst, uint64(e.UID), 10)
	dst = append(dst, `,"comm":`...)
	dst = appendBytes(dst, []byte(e.Comm))
	dst = append(dst, `,"filename":`...)
	dst = appendBytes(dst, []byte(e.Filename))
	dst = append(dst, `,"argv":[`...)
	for i, a := range e.Argv {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendBytes(dst, a)
	}
	dst = append(dst, `],"argv_len":`...)
	dst = strconv.AppendUint(dst, uint64(e.ArgvLen), 10)
	dst = append(dst, `,"truncated":`...)
	dst = strconv.AppendBool(dst, e.Truncated)
	dst = append(dst, `,"dev":`...)
	dst = appendString(dst, FileID{Dev: e.Dev}.DevString())
	dst = append(dst, `,"ino":`...)
	dst = strconv.AppendUint(dst, e.Ino, 10)
	if errno := int32(e.Errno); errno != 0 {
		dst = append(dst, `,"errno":`...)
		dst = strconv.AppendInt(dst, int64(errno), 10)
	}
	dst = append(dst, `,"killed":`...)
	dst = strconv.AppendBool(dst, e.Killed)
	if e.Target != 0 {
		dst = append(dst, `,"target":`...)
		dst = strconv.AppendUint(dst, uint64(e.Target), 10)
	}
	if e.Mode != 0 {
		dst = append(dst, `,"mode":`...)
		dst = strconv.AppendUint(dst, uint64(e.Mode), 10)
	}
	if names := e.Flags.Names(); len(names) > 0 {
		dst = append(dst, `,"flags":[`...)
		for i, n := range names {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, n)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// MarshalJSON implements json.Marshaler (see AppendJSON).
func (e Event) MarshalJSON() ([]byte, error) { return e.AppendJSON(nil), nil }

// UnmarshalJSON reads the form AppendJSON writes.
func (e *Event) UnmarshalJSON(data []byte) error {
	j, ok := parseCanonical(data)
	if !ok {
		j = eventJSON{}
		if err := json.Unmarshal(data, &j); err != nil {
			return err
		}
	}
	ev, err := j.event()
	if err != nil {
		return err
	}
	*e = ev
	return nil
}

// appendBytes appends b as Bytes marshals it.
func appendBytes(dst, b []byte) []byte {
	if utf8.Valid(b) {
		return appendString(dst, string(b))
	}
	dst = append(dst, `{"b64":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, `"}`...)
}

// appendString appends s as json.Marshal quotes it: plain printable ASCII
// as it is, anything that needs escaping through encoding/json.
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !plainJSON(s[i]) {
			q, _ := json.Marshal(s) // a string always marshals
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// plainJSON: c stands for itself inside a JSON string as json.Marshal
// writes it (printable ASCII but the quote, the backslash and the HTML
// characters it escapes).
func plainJSON(c byte) bool {
	return c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
}

// canonical reads the exact bytes AppendJSON writes; anything else (other
// key order, whitespace, escapes, null, duplicate keys) makes it give up,
// and the caller reads the input with encoding/json instead.
type canonical struct {
	b  []byte
	ok bool
}

func parseCanonical(data []byte) (eventJSON, bool) {
	p := canonical{b: data, ok: true}
	var j eventJSON
	p.lit(`{"kind":`)
	j.Kind = Kind(p.str())
	p.lit(`,"time_ns":`)
	j.Time = p.uint(64)
	p.lit(`,"cgroup_id":`)
	j.CgroupID = p.uint(64)
	p.lit(`,"tgid":`)
	j.TGID = uint32(p.uint(32))
	p.lit(`,"tid":`)
	j.TID = uint32(p.uint(32))
	p.lit(`,"ppid":`)
	j.PPID = uint32(p.uint(32))
	p.lit(`,"uid":`)
	j.UID = uint32(p.uint(32))
	p.lit(`,"comm":`)
	j.Comm = p.bytes()
	p.lit(`,"filename":`)
	j.Filename = p.bytes()
	p.lit(`,"argv":[`)
	j.Argv = []Bytes{}
	for p.ok && !p.next(']') {
		if len(j.Argv) > 0 {
			p.lit(",")
		}
		j.Argv = append(j.Argv, p.bytes())
	}
	p.lit(`,"argv_len":`)
	j.ArgvLen = uint32(p.uint(32))
	p.lit(`,"truncated":`)
	j.Truncated = p.bool()
	p.lit(`,"dev":`)
	j.Dev = p.str()
	p.lit(`,"ino":`)
	j.Ino = p.uint(64)
	if p.maybe(`,"errno":`) {
		j.Errno = p.int32()
	}
	p.lit(`,"killed":`)
	j.Killed = p.bool()
	if p.maybe(`,"target":`) {
		j.Target = uint32(p.uint(32))
	}
	if p.maybe(`,"mode":`) {
		j.Mode = uint32(p.uint(32))
	}
	if p.maybe(`,"flags":[`) {
		for p.ok && !p.next(']') {
			if len(j.Flags) > 0 {
				p.lit(",")
			}
			j.Flags = append(j.Flags, p.str())
		}
	}
	p.lit("}")
	return j, p.ok && len(p.b) == 0
}

// lit consumes s.
func (p *canonical) lit(s string) {
	if p.ok && !p.maybe(s) {
		p.ok = false
	}
}

// maybe consumes s if the input goes on with it.
func (p *canonical) maybe(s string) bool {
	if p.ok && bytes.HasPrefix(p.b, []byte(s)) {
		p.b = p.b[len(s):]
		return true
	}
	return false
}

// next consumes c if it comes next.
func (p *canonical) next(c byte) bool {
	if len(p.b) > 0 && p.b[0] == c {
		p.b = p.b[1:]
		return true
	}
	return false
}

// digits consumes a JSON integer's digits: no sign, no leading zero.
func (p *canonical) digits() string {
	n := 0
	for n < len(p.b) && p.b[n] >= '0' && p.b[n] <= '9' {
		n++
	}
	if n == 0 || (n > 1 && p.b[0] == '0') {
		p.ok = false
		return ""
	}
	s := string(p.b[:n])
	p.b = p.b[n:]
	return s
}

func (p *canonical) uint(bits int) uint64 {
	if !p.ok {
		return 0
	}
	v, err := strconv.ParseUint(p.digits(), 10, bits)
	p.ok = p.ok && err == nil
	return v
}

func (p *canonical) int32() int32 {
	neg := p.next('-')
	if !p.ok {
		return 0
	}
	s := p.digits()
	if neg {
		s = "-" + s
	}
	v, err := strconv.ParseInt(s, 10, 32)
	p.ok = p.ok && err == nil
	return int32(v)
}

func (p *canonical) bool() bool {
	switch {
	case p.maybe("true"):
		return true
	case p.maybe("false"):
		return false
	}
	p.ok = false
	return false
}

// str consumes a string without escapes or control characters, valid
// UTF-8: encoding/json reads such a string as its bytes.
func (p *canonical) str() string {
	if !p.ok || !p.next('"') {
		p.ok = false
		return ""
	}
	end := bytes.IndexByte(p.b, '"')
	if end < 0 {
		p.ok = false
		return ""
	}
	s := p.b[:end]
	for _, c := range s {
		if c < 0x20 || c == '\\' {
			p.ok = false
			return ""
		}
	}
	if !utf8.Valid(s) {
		p.ok = false
		return ""
	}
	p.b = p.b[end+1:]
	return string(s)
}

// bytes consumes a Bytes value: a string, or {"b64":"…"}.
func (p *canonical) bytes() Bytes {
	if p.maybe(`{"b64":`) {
		enc := p.str()
		p.lit("}")
		if !p.ok {
			return nil
		}
		v, err := base64.StdEncoding.DecodeString(enc)
		p.ok = err == nil
		return v
	}
	return Bytes(p.str())
}
