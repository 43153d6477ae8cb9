package ebpf

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"syscall"
	"testing"
	"unicode/utf8"
)

// referenceJSON is the form AppendJSON must write, by encoding/json alone
// (no Marshaler of this package on the way).
func referenceJSON(t testing.TB, e Event) []byte {
	t.Helper()
	bytesForm := func(b []byte) any {
		if utf8.Valid(b) {
			return string(b)
		}
		return struct {
			B64 string `json:"b64"`
		}{base64.StdEncoding.EncodeToString(b)}
	}
	argv := make([]any, len(e.Argv))
	for i, a := range e.Argv {
		argv[i] = bytesForm(a)
	}
	out, err := json.Marshal(struct {
		Kind      string   `json:"kind"`
		Time      uint64   `json:"time_ns"`
		CgroupID  uint64   `json:"cgroup_id"`
		TGID      uint32   `json:"tgid"`
		TID       uint32   `json:"tid"`
		PPID      uint32   `json:"ppid"`
		UID       uint32   `json:"uid"`
		Comm      any      `json:"comm"`
		Filename  any      `json:"filename"`
		Argv      []any    `json:"argv"`
		ArgvLen   uint32   `json:"argv_len"`
		Truncated bool     `json:"truncated"`
		Dev       string   `json:"dev"`
		Ino       uint64   `json:"ino"`
		Errno     int32    `json:"errno,omitempty"`
		Killed    bool     `json:"killed"`
		Target    uint32   `json:"target,omitempty"`
		Mode      uint32   `json:"mode,omitempty"`
		Flags     []string `json:"flags,omitempty"`
	}{
		string(e.Kind), e.Time, e.CgroupID, e.TGID, e.TID, e.PPID, e.UID,
		bytesForm([]byte(e.Comm)), bytesForm([]byte(e.Filename)), argv, e.ArgvLen, e.Truncated,
		FileID{Dev: e.Dev}.DevString(), e.Ino, int32(e.Errno), e.Killed, e.Target, e.Mode, e.Flags.Names(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkEventJSON: AppendJSON writes encoding/json's bytes, and the
// canonical reader reads them as encoding/json does.
func checkEventJSON(t testing.TB, e Event) {
	t.Helper()
	got, want := e.AppendJSON(nil), referenceJSON(t, e)
	if string(got) != string(want) {
		t.Fatalf("AppendJSON\n got %s\nwant %s", got, want)
	}
	fast, ok := parseCanonical(got)
	if !ok {
		// It reads no escapes: those strings go through encoding/json.
		if !bytes.Contains(got, []byte(`\`)) {
			t.Fatalf("the canonical reader gave up on what AppendJSON wrote: %s", got)
		}
		return
	}
	var slow eventJSON
	if err := json.Unmarshal(got, &slow); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("read back\n canonical     %+v\n encoding/json %+v", fast, slow)
	}
}

func TestAppendJSONIsEncodingJSON(t *testing.T) {
	for _, e := range []Event{
		{},
		{Kind: KindExec, TGID: 10, TID: 10, PPID: 9, UID: 1000, CgroupID: 1 << 63, Time: 1<<64 - 1,
			Comm: "true", Filename: "/usr/bin/true", Argv: [][]byte{[]byte("/usr/bin/true"), {}, []byte("x")},
			ArgvLen: 18, Dev: mkdev(259, 1), Ino: 555},
		{Kind: KindExec, Comm: "a\"b\\c", Filename: "/tmp/<&>\u2028\u00e9\x7f", Argv: [][]byte{[]byte("\n\t\r\b\f\x01"), []byte("\xff"), []byte("é\xc3")}},
		{Kind: KindFailed, Filename: "/x", Errno: syscall.ENOENT, Flags: FlagFilenameMissing | 0x8000},
		{Kind: KindFailed, Errno: syscall.Errno(1<<64 - 5)}, // int32 -5
		{Kind: KindPtraceDenied, TGID: 7, Errno: syscall.EPERM, Target: 42, Mode: 0x12, Flags: FlagTraceme},
		{Kind: "fork"},
		{Kind: "<x>"},
	} {
		checkEventJSON(t, e)
	}
}

func TestCanonicalReaderGivesUp(t *testing.T) {
	good := Event{Kind: KindExec, Comm: "c", Filename: "/f", Argv: [][]byte{[]byte("a")}, Errno: 3, Target: 1, Mode: 2, Flags: FlagKilled}.AppendJSON(nil)
	if _, ok := parseCanonical(good); !ok {
		t.Fatalf("gave up on %s", good)
	}
	// Each is valid JSON encoding/json reads, in a form AppendJSON does
	// not write: the canonical reader must leave it to encoding/json.
	for _, s := range []string{
		` ` + string(good),
		string(good) + ` `,
		`{"kind":"exec","time_ns":0,"cgroup_id":0,"tgid":0,"tid":0,"ppid":0,"uid":0,"comm":"\u0063","filename":"","argv":[],"argv_len":0,"truncated":false,"dev":"0:0","ino":0,"killed":false}`,
		`{"kind":"exec","time_ns":0,"cgroup_id":0,"tgid":0,"tid":0,"ppid":0,"uid":0,"comm":"","filename":"","argv":[],"argv_len":0,"truncated":false,"dev":"0:0","ino":0,"killed":false,"extra":1}`,
		`{"time_ns":0,"kind":"exec","cgroup_id":0,"tgid":0,"tid":0,"ppid":0,"uid":0,"comm":"","filename":"","argv":[],"argv_len":0,"truncated":false,"dev":"0:0","ino":0,"killed":false}`,
		`{"kind":"exec","time_ns":0,"cgroup_id":0,"tgid":0,"tid":0,"ppid":0,"uid":0,"comm":null,"filename":"","argv":[],"argv_len":0,"truncated":false,"dev":"0:0","ino":0,"killed":false}`,
	} {
		if _, ok := parseCanonical([]byte(s)); ok {
			t.Errorf("read %s itself", s)
		}
		var e Event
		if err := json.Unmarshal([]byte(s), &e); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
}

// FuzzEventJSON: for fuzzed events, AppendJSON is encoding/json's form and
// reads back the same; for fuzzed input, whatever the canonical reader
// accepts, encoding/json accepts with the same result.
func FuzzEventJSON(f *testing.F) {
	f.Add(uint16(1), uint64(7), "true", "/bin/true", []byte("a\x00\x00b"), int32(0), uint16(0),
		[]byte(`{"kind":"exec","time_ns":1,"cgroup_id":2,"tgid":3,"tid":4,"ppid":5,"uid":6,"comm":"c","filename":{"b64":"/w=="},"argv":["a",{"b64":""}],"argv_len":9,"truncated":true,"dev":"1:2","ino":7,"errno":-2,"killed":true,"target":1,"mode":2,"flags":["killed","0x8000"]}`))
	f.Add(uint16(4), uint64(0), "\xff", "<\"\\>", []byte{}, int32(-1), uint16(0xffff), []byte(`{"kind":"exec","time_ns":01}`))
	f.Add(uint16(2), uint64(1<<40), "", "", []byte(nil), int32(10), uint16(1),
		[]byte(`{"kind":"exec","time_ns":0,"cgroup_id":0,"tgid":0,"tid":0,"ppid":0,"uid":0,"comm":"0","filename":{"b64":"0000"},"argv":["0",{"b64":""}],"argv_len":0,"truncated":true,"dev":"0:0","ino":0,"errno":10,"killed":true,"flags":[]}`))
	f.Fuzz(func(t *testing.T, kind uint16, n uint64, comm, filename string, argv []byte, errno int32, flags uint16, raw []byte) {
		e := Event{Kind: kinds[kind%5], Time: n, CgroupID: n * 3, TGID: uint32(n), Comm: comm, Filename: filename,
			Argv: SplitArgv(argv), ArgvLen: uint32(len(argv)), Dev: n >> 7, Ino: n >> 3, Errno: syscall.Errno(errno),
			Target: uint32(n >> 32), Mode: uint32(flags), Flags: Flags(flags), Truncated: flags&1 != 0, Killed: flags&2 != 0}
		checkEventJSON(t, e)
		fast, ok := parseCanonical(raw)
		if !ok {
			return
		}
		var slow eventJSON
		if err := json.Unmarshal(raw, &slow); err != nil {
			t.Fatalf("the canonical reader accepted what encoding/json refuses (%v): %s", err, raw)
		}
		// What both readers give the event must be the same ("flags":[]
		// is nil to one, empty to the other: no flags to both).
		fe, ferr := fast.event()
		se, serr := slow.event()
		if !reflect.DeepEqual(fe, se) || (ferr == nil) != (serr == nil) {
			t.Fatalf("%s\n canonical     %+v, %v\n encoding/json %+v, %v", raw, fe, ferr, se, serr)
		}
	})
}
