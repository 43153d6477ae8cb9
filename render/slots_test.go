package render

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"hookbox.dev/hookbox/internal/shellwords"
)

func TestSlotName(t *testing.T) {
	for arg, want := range map[string]string{"{run_id}": "run_id", "{run_dir}": "run_dir", "{x}": "x"} {
		if got, ok := SlotName(arg); !ok || got != want {
			t.Errorf("SlotName(%q) = %q, %v; want %q", arg, got, ok, want)
		}
	}
	for _, arg := range []string{"", "{}", "run_id", "{run_id", "x{run_id}", "{run id}", "{{run_id}}", "{a}b}"} {
		if got, ok := SlotName(arg); ok {
			t.Errorf("SlotName(%q) = %q, want no slot", arg, got)
		}
	}
}

func TestLaunchValues(t *testing.T) {
	v := LaunchValues("hbx-1")
	if got, ok := v.Lookup("{run_id}"); !ok || got != "hbx-1" {
		t.Errorf("run_id = %q, %v", got, ok)
	}
	if got, ok := v.Lookup("{run_dir}"); !ok || got != RunDir {
		t.Errorf("run_dir = %q, %v; want the container's run dir %s", got, ok, RunDir)
	}
	if _, ok := v.Lookup("{payload}"); ok {
		t.Error("only launch slots have values")
	}
	if _, ok := SlotValues(nil).Lookup("{run_id}"); ok {
		t.Error("nil values are unknown")
	}
}

func TestJSONPointer(t *testing.T) {
	if got := JSONPointer("hooks", "a/b", "~x", "0"); got != "/hooks/a~1b/~0x/0" {
		t.Errorf("JSONPointer = %q", got)
	}
	if got := JSONPointer(); got != "" {
		t.Errorf("JSONPointer() = %q, want the whole document", got)
	}
}

func TestFillFiles(t *testing.T) {
	values := SlotValues{SlotRunID: "a\"b'c $(id)\n\\", SlotRunDir: RunDir}
	tests := map[string]struct {
		content string
		slots   []FileSlot
		values  SlotValues // default values
		want    string     // filled content; "" when an error is expected
		err     string
	}{
		"exec form element": {
			content: `{"args":["{run_id}","x"],"n":12345678901234567890}`,
			slots:   []FileSlot{{Pointer: "/args/0"}},
			want:    `{"args":["a\"b'c $(id)\n\\","x"],"n":12345678901234567890}`,
		},
		"a name that reads like a slot is not its value": {
			content: `{"{run_id}":"{run_id}"}`,
			slots:   []FileSlot{{Pointer: "/{run_id}"}},
			want:    `{"{run_id}":"a\"b'c $(id)\n\\"}`,
		},
		"shell form: each slot word quoted": {
			content: `{"command":"/opt/h '{run_id}' x '{run_dir}'"}`,
			slots:   []FileSlot{{Pointer: "/command", Shell: true}},
			want:    `{"command":"/opt/h 'a\"b'\\''c $(id)\n\\' x /run/hookbox"}`,
		},
		"values unknown": {
			content: `{"a":"{run_id}"}`, slots: []FileSlot{{Pointer: "/a"}}, values: SlotValues{},
			err: "no value for {run_id}",
		},
		"pointer to a number": {
			content: `{"a":1}`, slots: []FileSlot{{Pointer: "/a"}},
			err: "no string at /a",
		},
		"pointer to nothing": {
			content: `{"a":"{run_id}"}`, slots: []FileSlot{{Pointer: "/b"}},
			err: "no string at /b",
		},
		"string that is no slot": {
			content: `{"a":"run_id"}`, slots: []FileSlot{{Pointer: "/a"}},
			err: `"run_id" is not a slot`,
		},
		"command string hookbox did not write": {
			content: `{"c":"/opt/h \"{run_id}\""}`, slots: []FileSlot{{Pointer: "/c", Shell: true}},
			err: "not a command string hookbox generated",
		},
		"command string with shell syntax": {
			content: `{"c":"/opt/h '{run_id}'; id"}`, slots: []FileSlot{{Pointer: "/c", Shell: true}},
			err: "not a command string hookbox generated",
		},
		"command string without a slot": {
			content: `{"c":"/opt/h x"}`, slots: []FileSlot{{Pointer: "/c", Shell: true}},
			err: "has no slot",
		},
		"a value with a NUL byte": {
			content: `{"a":"{run_id}"}`, slots: []FileSlot{{Pointer: "/a"}}, values: SlotValues{SlotRunID: "a\x00b"},
			err: "NUL",
		},
		"content that is not JSON": {
			content: `{"a":"{run_id}"`, slots: []FileSlot{{Pointer: "/a"}},
			err: "not JSON",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			v := values
			if tc.values != nil {
				v = tc.values
			}
			in := []File{{Path: "/hookbox/etc/plain", Content: "{run_id}"}, {Path: "/hookbox/etc/f.json", Content: tc.content, Slots: tc.slots}}
			out, err := FillFiles(in, v)
			if tc.err != "" {
				if err == nil || !errors.Is(err, ErrSlot) || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "/hookbox/etc/f.json") {
					t.Fatalf("err = %v, want ErrSlot naming the file and %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(out[0], in[0]) {
				t.Errorf("a file without slots is not touched: %+v", out[0])
			}
			if out[1].Content != tc.want || out[1].Slots != nil {
				t.Errorf("filled = %s (slots %v)\nwant     %s", out[1].Content, out[1].Slots, tc.want)
			}
			if in[1].Content != tc.content || len(in[1].Slots) != len(tc.slots) {
				t.Error("FillFiles modified its input")
			}
		})
	}
}

// FuzzFillFiles: whatever a value holds, it arrives as exactly one JSON
// string and exactly one shell word, and the document keeps its shape.
func FuzzFillFiles(f *testing.F) {
	for _, s := range []string{"", "hbx-1", `"}]`, "'", `\`, "$(id)", "a\nb", "`id`", "{run_dir}", "\u2028", "\x7f\x01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		if !utf8.ValidString(value) || strings.ContainsRune(value, 0) {
			return
		}
		in := []File{{Path: "/f", Content: `{"args":["{run_id}"],"command":"/opt/h '{run_id}' '{run_dir}'","m":"{run_id}"}`,
			Slots: []FileSlot{{Pointer: "/args/0"}, {Pointer: "/command", Shell: true}}}}
		out, err := FillFiles(in, SlotValues{SlotRunID: value, SlotRunDir: RunDir})
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Args    []string `json:"args"`
			Command string   `json:"command"`
			M       string   `json:"m"`
		}
		if err := json.Unmarshal([]byte(out[0].Content), &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.Args) != 1 || doc.Args[0] != value || doc.M != "{run_id}" {
			t.Fatalf("exec form %q, matcher %q; want [%q]", doc.Args, doc.M, value)
		}
		words, err := shellwords.Split(doc.Command)
		if err != nil || !slices.Equal(words, []string{"/opt/h", value, RunDir}) {
			t.Fatalf("command %q splits to %q (%v)", doc.Command, words, err)
		}
	})
}
