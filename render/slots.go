package render

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"hookbox.dev/hookbox/internal/shellwords"
	"hookbox.dev/hookbox/render/canonjson"
)

// Launch slots. A hook argv element that is exactly "{NAME}" for one of
// these names is a launch slot (docs/contracts.md §4.2): the render keeps
// the placeholder, so its digest does not depend on the run, and the
// launcher fills it with the run's value in the files the engine reads
// (File.Slots). The run record keeps the values (result.json "slots"), and
// verify requires exactly them where the render has the slot (Exec.Slots).
//
// A launch slot is named by its element's text. It is not the free slot of
// an engine exec rule (EngineExec.Slots): that is a position the engine
// fills at will (a model-chosen shell command), with no value to check.
const (
	SlotRunID  = "run_id"  // the run id, the name of the run record's directory
	SlotRunDir = "run_dir" // the run dir as the container sees it: RunDir
)

// LaunchSlots are the names of the launch slots.
var LaunchSlots = []string{SlotRunID, SlotRunDir}

// SlotName returns NAME when arg has the form of a slot element, "{NAME}"
// (braces around a name without braces or spaces). Whether NAME is a
// launch slot is the caller's question (LaunchSlots).
func SlotName(arg string) (string, bool) {
	if len(arg) > 2 && arg[0] == '{' && arg[len(arg)-1] == '}' && !strings.ContainsAny(arg[1:len(arg)-1], "{} ") {
		return arg[1 : len(arg)-1], true
	}
	return "", false
}

// SlotValues are the values of one run's launch slots, by name (no
// braces). A nil map means the values are unknown: a run recorded before
// hookbox filled slots.
type SlotValues map[string]string

// LaunchValues are the slot values of the run with this id.
func LaunchValues(runID string) SlotValues {
	return SlotValues{SlotRunID: runID, SlotRunDir: RunDir}
}

// Lookup returns the value arg stands for when arg is a slot element whose
// value v holds.
func (v SlotValues) Lookup(arg string) (string, bool) {
	name, ok := SlotName(arg)
	if !ok {
		return "", false
	}
	value, ok := v[name]
	return value, ok
}

// FileSlot is one JSON string of a generated file that holds launch
// slots. Pointer (RFC 6901) names the string. Without Shell, the string is
// a slot element itself (an args element of Claude Code's exec form) and
// becomes the slot's value. With Shell, it is a command string that
// shellwords.Join made of a hook argv (Codex's and Gemini's hooks), and
// becomes the Join of that argv with each slot word replaced by its value.
type FileSlot struct {
	Pointer string `json:"pointer"`
	Shell   bool   `json:"shell,omitempty"`
}

// JSONPointer is the RFC 6901 pointer made of tokens (object names and
// array indices), each escaped.
func JSONPointer(tokens ...string) string {
	var p jsontext.Pointer
	for _, t := range tokens {
		p = p.AppendToken(t)
	}
	return string(p)
}

// ErrSlot: a generated file's slots cannot be filled as the render says.
var ErrSlot = errors.New("cannot fill launch slots")

// FillFiles returns files with the launch slots of each filled from values
// (Slots then empty); files without slots are returned as they are. The
// values reach the content only through the JSON encoder and, inside a
// command string, shellwords.Quote, so a value is always one JSON string
// and one shell word, whatever it holds.
func FillFiles(files []File, values SlotValues) ([]File, error) {
	out := slices.Clone(files)
	for i := range out {
		if len(out[i].Slots) == 0 {
			continue
		}
		content, err := fillJSON(out[i].Content, out[i].Slots, values)
		if err != nil {
			return nil, fmt.Errorf("generated file %s: %w", out[i].Path, err)
		}
		out[i].Content, out[i].Slots = content, nil
	}
	return out, nil
}

// fillJSON rewrites the JSON document content token by token, replacing
// the strings slots name, and returns it canonical again.
func fillJSON(content string, slots []FileSlot, values SlotValues) (string, error) {
	for name, value := range values {
		if !utf8.ValidString(value) || strings.ContainsRune(value, 0) {
			return "", fmt.Errorf("%w: the value of {%s} is not text an argv element can hold (invalid UTF-8 or a NUL byte)", ErrSlot, name)
		}
	}
	want := map[string]FileSlot{}
	for _, s := range slots {
		want[s.Pointer] = s
	}
	dec := jsontext.NewDecoder(strings.NewReader(content))
	var buf bytes.Buffer
	enc := jsontext.NewEncoder(&buf)
	for {
		tok, err := dec.ReadToken()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("%w: the content is not JSON: %w", ErrSlot, err)
		}
		if tok.Kind() == '"' && !readName(dec) {
			p := string(dec.StackPointer())
			if s, ok := want[p]; ok {
				delete(want, p)
				filled, err := fillString(tok.String(), s, values)
				if err != nil {
					return "", fmt.Errorf("%w: at %s: %w", ErrSlot, p, err)
				}
				tok = jsontext.String(filled)
			}
		}
		if err := enc.WriteToken(tok); err != nil {
			return "", fmt.Errorf("%w: %w", ErrSlot, err)
		}
	}
	for p := range want {
		return "", fmt.Errorf("%w: no string at %s; fix the render", ErrSlot, p)
	}
	out, err := canonjson.Canonicalize(buf.Bytes())
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrSlot, err)
	}
	return string(out), nil
}

// readName reports whether the token dec read last is an object member's
// name (an odd count of tokens in the innermost object so far).
func readName(dec *jsontext.Decoder) bool {
	kind, n := dec.StackIndex(dec.StackDepth())
	return kind == '{' && n%2 == 1
}

// fillString is the filled text of one slot string.
func fillString(s string, slot FileSlot, values SlotValues) (string, error) {
	if !slot.Shell {
		value, ok := values.Lookup(s)
		if !ok {
			return "", slotError(s, values)
		}
		return value, nil
	}
	words, err := shellwords.Split(s)
	if err != nil || shellwords.Join(words) != s {
		return "", fmt.Errorf("%q is not a command string hookbox generated", s)
	}
	filled := 0
	for i, w := range words {
		if _, ok := SlotName(w); !ok {
			continue
		}
		value, ok := values.Lookup(w)
		if !ok {
			return "", slotError(w, values)
		}
		words[i] = value
		filled++
	}
	if filled == 0 {
		return "", fmt.Errorf("command string %q has no slot", s)
	}
	return shellwords.Join(words), nil
}

func slotError(s string, values SlotValues) error {
	if _, ok := SlotName(s); !ok {
		return fmt.Errorf("%q is not a slot", s)
	}
	if values == nil {
		return fmt.Errorf("no value for %s: the launch values are unknown", s)
	}
	return fmt.Errorf("no value for %s", s)
}
