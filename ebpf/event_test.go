package ebpf

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

func TestSplitArgv(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"\x00", []string{""}},
		{"a\x00", []string{"a"}},
		{"a\x00\x00b\x00", []string{"a", "", "b"}},
		{"a\x00\x00\x00", []string{"a", "", ""}},
		{"\x00\x00", []string{"", ""}},
		{"a\x00bc", []string{"a", "bc"}}, // truncated: the cut element stays
		{"a\x00b\x00", []string{"a", "b"}},
	} {
		got := SplitArgv([]byte(c.in))
		var gs []string
		for _, g := range got {
			gs = append(gs, string(g))
		}
		if !reflect.DeepEqual(gs, c.want) {
			t.Errorf("SplitArgv(%q) = %q, want %q", c.in, gs, c.want)
		}
	}
	// The result does not alias its input.
	in := []byte("a\x00b\x00")
	out := SplitArgv(in)
	in[0] = 'z'
	if string(out[0]) != "a" {
		t.Error("SplitArgv aliases its input")
	}
}

// record builds a raw ring buffer record as bpf/hookbox.h lays it out.
type record struct {
	cookie, cgroup, ktime, ino uint64
	dev, tgid, tid, ppid, uid  uint32
	err                        int32
	argvLen                    uint32
	target, mode               uint32
	kind, flags                uint16
	comm, filename             string
	argv                       []byte
	argvCap                    int
}

func (r record) bytes() []byte {
	b := make([]byte, eventHeaderSize+r.argvCap)
	le := binary.LittleEndian
	le.PutUint64(b[offCookie:], r.cookie)
	le.PutUint64(b[offCgroupID:], r.cgroup)
	le.PutUint64(b[offKtime:], r.ktime)
	le.PutUint64(b[offIno:], r.ino)
	le.PutUint32(b[offDev:], r.dev)
	le.PutUint32(b[offTGID:], r.tgid)
	le.PutUint32(b[offTID:], r.tid)
	le.PutUint32(b[offPPID:], r.ppid)
	le.PutUint32(b[offUID:], r.uid)
	le.PutUint32(b[offErr:], uint32(r.err))
	le.PutUint32(b[offArgvLen:], r.argvLen)
	le.PutUint32(b[offArgvSize:], uint32(len(r.argv)))
	le.PutUint32(b[offFilenameSize:], uint32(len(r.filename)))
	le.PutUint32(b[offTarget:], r.target)
	le.PutUint32(b[offMode:], r.mode)
	le.PutUint16(b[offKind:], r.kind)
	le.PutUint16(b[offFlags:], r.flags)
	copy(b[offComm:offComm+commLen], r.comm)
	copy(b[offFilename:], r.filename+"\x00")
	copy(b[eventHeaderSize:], r.argv)
	// Garbage after the captured bytes must be ignored.
	for i := eventHeaderSize + len(r.argv); i < len(b); i++ {
		b[i] = 0xee
	}
	return b
}

func TestDecodeEvent(t *testing.T) {
	exec := record{
		cookie: 7, cgroup: 1234, ktime: 99, ino: 555, dev: 8<<20 | 1,
		tgid: 10, tid: 10, ppid: 9, uid: 1000, argvLen: 12,
		kind: wireKindExec, comm: "true", filename: "/bin/true",
		argv: []byte("/bin/true\x00a\x00"), argvCap: 64,
	}
	got, err := decodeEvent(exec.bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := Event{
		Kind: KindExec, TGID: 10, TID: 10, PPID: 9, UID: 1000, CgroupID: 1234, Time: 99,
		Comm: "true", Filename: "/bin/true", Argv: [][]byte{[]byte("/bin/true"), []byte("a")},
		ArgvLen: 12, Dev: mkdev(8, 1), Ino: 555,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decode exec:\n got %+v\nwant %+v", got, want)
	}
	if c, ok := recordCookie(exec.bytes()); !ok || c != 7 {
		t.Errorf("cookie %d %v", c, ok)
	}

	full := exec
	full.comm = "0123456789abcdef" // 16 bytes: no NUL in comm[]
	full.flags = uint16(FlagTruncated | FlagKilled | FlagEnforced)
	got, err = decodeEvent(full.bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got.Comm != "0123456789abcdef" || !got.Truncated || !got.Killed || got.Flags.String() != "truncated,killed,enforced" {
		t.Errorf("decode flags: %+v", got)
	}

	failed := record{kind: wireKindFailed, err: int32(syscall.ENOENT), filename: "/nope", dev: 8 << 20, ino: 3}
	got, err = decodeEvent(failed.bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != KindFailed || got.Errno != syscall.ENOENT || got.Filename != "/nope" || got.Dev != 0 || got.Argv != nil {
		t.Errorf("decode failed: %+v", got)
	}

	denied := record{kind: wireKindDenied, err: int32(syscall.EPERM), filename: "/dev/fd/3", dev: 8 << 20, ino: 3,
		flags: uint16(FlagEnforced), target: 99}
	got, err = decodeEvent(denied.bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != KindDenied || got.Errno != syscall.EPERM || got.Filename != "/dev/fd/3" || got.File() != (FileID{Dev: mkdev(8, 0), Ino: 3}) ||
		got.Target != 0 || got.Argv != nil || got.Killed {
		t.Errorf("decode denied: %+v", got)
	}

	ptraceDenied := record{kind: wireKindPtraceDenied, err: int32(syscall.EPERM), target: 42, mode: 0x12, tgid: 7, dev: 8 << 20, ino: 3}
	got, err = decodeEvent(ptraceDenied.bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != KindPtraceDenied || got.Errno != syscall.EPERM || got.Target != 42 || got.Mode != 0x12 || got.TGID != 7 || got.Dev != 0 {
		t.Errorf("decode ptrace-denied: %+v", got)
	}

	unknown := exec
	unknown.flags = uint16(FlagExeUnknown)
	if got, _ := decodeEvent(unknown.bytes()); got.Dev != 0 || got.Ino != 555 {
		t.Errorf("exe-unknown event has dev %d", got.Dev)
	}

	for name, raw := range map[string][]byte{
		"short": exec.bytes()[:eventHeaderSize-1],
		"kind":  func() []byte { r := exec; r.kind = 9; return r.bytes() }(),
		"argv beyond record": func() []byte {
			b := exec.bytes()
			binary.LittleEndian.PutUint32(b[offArgvSize:], 65)
			return b
		}(),
		"argv beyond its length": func() []byte {
			b := exec.bytes()
			binary.LittleEndian.PutUint32(b[offArgvSize:], 13)
			return b
		}(),
		"filename size": func() []byte {
			b := exec.bytes()
			binary.LittleEndian.PutUint32(b[offFilenameSize:], filenameCap)
			return b
		}(),
	} {
		if _, err := decodeEvent(raw); err == nil {
			t.Errorf("%s: decoded a bad record", name)
		}
	}
	if _, err := decodeEvent(nil); !errors.Is(err, errShortRecord) {
		t.Errorf("nil record: %v", err)
	}
	if _, ok := recordCookie(make([]byte, 7)); ok {
		t.Error("cookie from 7 bytes")
	}
}

func TestEventJSON(t *testing.T) {
	ev := Event{
		Kind: KindExec, TGID: 10, TID: 10, PPID: 9, CgroupID: 1234, Time: 99,
		Comm: "true", Filename: "/bin/\xfftrue",
		Argv:    [][]byte{[]byte("/bin/true"), []byte("a"), {}, []byte("b"), []byte("\xff\xfe"), []byte("<&>")},
		ArgvLen: 30, Dev: mkdev(259, 1), Ino: 555,
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"kind":"exec","time_ns":99,"cgroup_id":1234,"tgid":10,"tid":10,"ppid":9,"uid":0,` +
		`"comm":"true","filename":{"b64":"L2Jpbi//dHJ1ZQ=="},` +
		`"argv":["/bin/true","a","","b",{"b64":"//4="},"\u003c\u0026\u003e"],"argv_len":30,` +
		`"truncated":false,"dev":"259:1","ino":555,"killed":false}`
	if string(b) != want {
		t.Errorf("JSON\n got %s\nwant %s", b, want)
	}
	var back Event
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, ev) {
		t.Errorf("round trip\n got %+v\nwant %+v", back, ev)
	}

	failed := Event{Kind: KindFailed, Filename: "/x", Errno: syscall.ENOENT, Flags: FlagFilenameMissing | 0x8000}
	b, err = json.Marshal(failed)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"argv":[]`) || !strings.Contains(string(b), `"errno":2`) ||
		!strings.Contains(string(b), `"dev":"0:0"`) || !strings.Contains(string(b), `"flags":["filename-missing","0x8000"]`) {
		t.Errorf("failed JSON: %s", b)
	}
	back = Event{}
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, failed) {
		t.Errorf("round trip: %+v, %v", back, err)
	}

	refusal := Event{Kind: KindPtraceDenied, TGID: 7, Errno: syscall.EPERM, Target: 42, Mode: 0x12, Flags: FlagTraceme}
	b, err = json.Marshal(refusal)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"kind":"ptrace-denied"`) || !strings.Contains(string(b), `"target":42,"mode":18,"flags":["traceme"]`) {
		t.Errorf("ptrace-denied JSON: %s", b)
	}
	back = Event{}
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, refusal) {
		t.Errorf("round trip: %+v, %v", back, err)
	}

	for _, bad := range []string{
		`{"kind":"fork","dev":"0:0"}`,
		`{"kind":"exec","dev":"0"}`,
		`{"kind":"exec","dev":"0:0","flags":["nope"]}`,
		`{"kind":"exec","dev":"0:0","argv":[{"b64":"!"}]}`,
		`{"kind":"exec","dev":"0:0","argv":[{"hex":"00"}]}`,
		`{"kind":"exec","dev":"0:0","argv":[{}]}`,
		`{"kind":"exec","dev":"0:0","argv":[3]}`,
	} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestFileIDEncoding(t *testing.T) {
	for _, c := range []struct {
		major, minor uint32
		dev          uint64 // glibc makedev
	}{
		{8, 1, 0x801},
		{0, 39, 39},
		{259, 300, 0}, // checked against new_encode_dev below
		{4095, 1<<20 - 1, 0},
	} {
		dev := mkdev(c.major, c.minor)
		if c.dev != 0 && dev != c.dev {
			t.Errorf("mkdev(%d, %d) = %#x, want %#x", c.major, c.minor, dev, c.dev)
		}
		f := FileID{Dev: dev, Ino: 42}
		if f.Major() != c.major || f.Minor() != c.minor {
			t.Errorf("mkdev(%d, %d) decodes as %d:%d", c.major, c.minor, f.Major(), f.Minor())
		}
		k, ok := f.kernelDev()
		if !ok || k != c.major<<20|c.minor || devFromKernel(k) != dev {
			t.Errorf("%d:%d kernel dev %#x %v", c.major, c.minor, k, ok)
		}
		back, err := parseDev(f.DevString())
		if err != nil || back != dev {
			t.Errorf("parseDev(%q) = %#x, %v", f.DevString(), back, err)
		}
	}
	if s := (FileID{Dev: mkdev(254, 0), Ino: 7}).String(); s != "254:0/7" {
		t.Errorf("String = %q", s)
	}
	// new_encode_dev for major < 4096: (minor & 0xff) | (major << 8) | ((minor & ~0xff) << 12)
	if got, want := mkdev(259, 300), uint64(300&0xff|259<<8|(300&^0xff)<<12); got != want {
		t.Errorf("mkdev(259, 300) = %#x, want new_encode_dev %#x", got, want)
	}
	if _, ok := (FileID{Dev: mkdev(4096, 0)}).kernelDev(); ok {
		t.Error("major 4096 encoded as a kernel dev_t")
	}
	if _, ok := (FileID{Dev: mkdev(1, 1<<20)}).kernelDev(); ok {
		t.Error("minor 2^20 encoded as a kernel dev_t")
	}
	for _, bad := range []string{"", "8", "8:", "a:1", "1:2:3", "-1:0", "4294967296:0"} {
		if _, err := parseDev(bad); err == nil {
			t.Errorf("parseDev(%q) succeeded", bad)
		}
	}
}

func TestOptionsDefaults(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil || o.ArgvCap != DefaultArgvCap || o.RingSize != DefaultRingSize || o.PollInterval != DefaultPollInterval {
		t.Errorf("defaults: %+v %v", o, err)
	}
	if _, err := (Options{ArgvCap: MaxArgvCap, RingSize: 1 << 30}).withDefaults(); err != nil {
		t.Errorf("limits rejected: %v", err)
	}
}

func TestStatsJSON(t *testing.T) {
	st := Stats{Counters: Counters{Matched: 5, Lost: 1, KillFailed: 2, Missed: 3}, Delivered: 4, Unaccounted: 0, Denies: Denies{Ptrace: true}}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"seen":0,"matched":5,"lost":1,"truncated":0,"killed":0,"kill_failed":2,"read_errors":0,` +
		`"pending_dropped":0,"denied":0,"ptrace_denied":0,"missed":3,"delivered":4,"decode_errors":0,"unaccounted":0,` +
		`"denies":{"ptrace":true,"exec":false}}`
	if string(b) != want {
		t.Errorf("JSON\n got %s\nwant %s", b, want)
	}
	var back Stats
	if err := json.Unmarshal(b, &back); err != nil || back != st {
		t.Errorf("round trip: %+v, %v", back, err)
	}
}

func TestStatsIncomplete(t *testing.T) {
	if inc := (Stats{Counters: Counters{Matched: 3, Truncated: 1}, Delivered: 3}).Incomplete(); len(inc) != 0 {
		t.Errorf("complete stats report %v", inc)
	}
	st := Stats{Counters: Counters{Lost: 1, Missed: 2, KillFailed: 1}, Unaccounted: 1}
	if got := strings.Join(st.Incomplete(), ","); got != "lost,missed,unaccounted,kill-failed" {
		t.Errorf("Incomplete() = %s", got)
	}
}

// The committed object was built from the committed sources: `make
// generate` rewrites bpf/generated.sha256 with the hashes of the inputs
// and of the object, and this test recomputes them, so an edit to
// exec.c or vmlinux.h without regenerating (or a hand-edited object) fails
// here, without needing clang.
func TestGeneratedObjectIsCurrent(t *testing.T) {
	stamp, err := os.ReadFile(filepath.Join("bpf", "generated.sha256"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(stamp)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("bad stamp line %q", line)
		}
		b, err := os.ReadFile(filepath.FromSlash(name))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(b)
		if hex.EncodeToString(h[:]) != sum {
			t.Errorf("%s changed since the object was generated: run `make generate` (go generate ./ebpf/)", name)
		}
		seen[name] = true
	}
	for _, want := range []string{"bpf/exec.c", "bpf/lsm.c", "bpf/hookbox.h", "bpf/vmlinux.h", "exec_bpfel.o", "lsm_bpfel.o"} {
		if !seen[want] {
			t.Errorf("bpf/generated.sha256 does not cover %s", want)
		}
	}
}

// FuzzDecodeEvent decodes records built from a fuzzed header, filename
// region and argv region (kept small so the fuzzer's minimization stays
// fast; a whole record is 4 KiB of mostly padding) and checks that a
// decoded event survives its JSON form.
func FuzzDecodeEvent(f *testing.F) {
	for _, r := range []record{
		{kind: wireKindExec, filename: "/bin/true", argv: []byte("a\x00\x00b\x00"), argvLen: 5, argvCap: 8},
		{kind: wireKindFailed, filename: "\xff", err: 2},
		{kind: wireKindExec, flags: 0xffff, dev: 0xffffffff, comm: "0123456789abcdef"},
	} {
		b := r.bytes()
		f.Add(b[:offFilename], []byte(r.filename), b[eventHeaderSize:])
	}
	f.Fuzz(func(t *testing.T, head, name, argv []byte) {
		raw := make([]byte, eventHeaderSize+len(argv))
		copy(raw[:offFilename], head)
		copy(raw[offFilename:eventHeaderSize], name)
		copy(raw[eventHeaderSize:], argv)
		ev, err := decodeEvent(raw)
		if err != nil {
			return
		}
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		var back Event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		// Argv nil and empty are the same JSON.
		if len(ev.Argv) == 0 {
			ev.Argv = nil
		}
		if !reflect.DeepEqual(back, ev) {
			t.Fatalf("round trip\n got %+v\nwant %+v", back, ev)
		}
	})
}

func FuzzSplitArgv(f *testing.F) {
	for _, s := range []string{"", "\x00", "a\x00\x00b\x00", "cut"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := bytes.Join(SplitArgv(b), []byte{0})
		if want := bytes.TrimSuffix(b, []byte{0}); !bytes.Equal(got, want) {
			t.Fatalf("join(split(%q)) = %q", b, got)
		}
	})
}
