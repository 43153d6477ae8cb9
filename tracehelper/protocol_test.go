package tracehelper

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"hookbox.dev/hookbox/ebpf"
)

var lineEvent = ebpf.Event{Kind: ebpf.KindExec, TGID: 1234, TID: 1234, PPID: 1200, CgroupID: 987654321, Time: 123456789012345,
	Comm: "true", Filename: "/usr/bin/true", Argv: [][]byte{[]byte("/usr/bin/true"), []byte("storm"), []byte("12345")},
	ArgvLen: 26, Dev: 254<<8 | 1, Ino: 123456}

// An event line is the reply encoding/json writes, so peers that encode
// or decode replies with it read the same stream; parseReply reads it
// back, and reads lines in other forms as encoding/json does.
func TestEventLine(t *testing.T) {
	odd := lineEvent
	odd.Filename, odd.Argv = "/bin/\xff<x>", [][]byte{[]byte("a\"b"), {}}
	for _, ev := range []ebpf.Event{lineEvent, odd} {
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(reply{Type: typeEvent, Event: &ev}); err != nil {
			t.Fatal(err)
		}
		line := appendEventLine(nil, ev)
		if string(line) != want.String() {
			t.Errorf("event line\n got %s\nwant %s", line, want.Bytes())
		}
		var rep reply
		if err := parseReply(line, &rep); err != nil || rep.Type != typeEvent || rep.Event == nil || !reflect.DeepEqual(*rep.Event, ev) {
			t.Errorf("parseReply(%s) = %+v, %v", line, rep, err)
		}
	}
	for _, line := range []string{
		`{"type":"event","event":{"kind":"exec","dev":"1:2"}, "v":2}` + "\n",
		`{"type":"event","event":null}` + "\n",
		`{"type":"stats","stats":{}}` + "\n",
	} {
		var got, want reply
		gerr := parseReply([]byte(line), &got)
		werr := json.Unmarshal([]byte(line), &want)
		if !reflect.DeepEqual(got, want) || (gerr == nil) != (werr == nil) {
			t.Errorf("parseReply(%s) = %+v, %v; encoding/json: %+v, %v", line, got, gerr, want, werr)
		}
	}
}

// The per-exec cost of an event on the socket: the tracer daemon writes a
// line, the run reads it.
func BenchmarkEventLineWrite(b *testing.B) {
	var line []byte
	for b.Loop() {
		line = appendEventLine(line[:0], lineEvent)
	}
}

func BenchmarkEventLineRead(b *testing.B) {
	line := appendEventLine(nil, lineEvent)
	for b.Loop() {
		var rep reply
		if err := parseReply(line, &rep); err != nil {
			b.Fatal(err)
		}
	}
}
