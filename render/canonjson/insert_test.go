package canonjson

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// TestInsertMember: inserting a member into Marshal's output of a map gives
// Marshal's output of the map with the member: first, between, last, into
// an empty object, with keys that sort differently in UTF-16 than in UTF-8,
// and with the same key nested below another member.
func TestInsertMember(t *testing.T) {
	keys := []string{"a", "runfiles", "s", "z", "\u00e9", "\ue000", "\U0001f600", "", "runfiles2", "run"}
	r := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		m := map[string]any{}
		for range r.IntN(5) {
			m[keys[r.IntN(len(keys))]] = map[string]any{"runfiles": r.IntN(10)}
		}
		name := keys[r.IntN(len(keys))]
		if _, ok := m[name]; ok {
			continue
		}
		value := []any{map[string]any{"b": 1, "a": "x\n"}}
		obj, err := Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		canonicalValue, err := Marshal(value)
		if err != nil {
			t.Fatal(err)
		}
		got, err := InsertMember(obj, name, canonicalValue)
		if err != nil {
			t.Fatalf("InsertMember(%s, %q): %v", obj, name, err)
		}
		m[name] = value
		want, err := Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("InsertMember(%s, %q) = %s, want %s", obj, name, got, want)
		}
	}
}

func TestInsertMemberRefused(t *testing.T) {
	for _, c := range []struct {
		obj, name string
		want      error
	}{
		{`{"a":1,"runfiles":[]}`, "runfiles", ErrDuplicateKey},
		{`[1]`, "runfiles", ErrInvalidJSON},
		{``, "runfiles", ErrInvalidJSON},
		{`{"a":1}`, "bad\xff", ErrInvalidUTF8},
	} {
		if _, err := InsertMember([]byte(c.obj), c.name, []byte(`1`)); !errors.Is(err, c.want) {
			t.Errorf("InsertMember(%s, %q): %v, want %v", c.obj, c.name, err, c.want)
		}
	}
}

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", "quote\" back\\ slash", "\x00\x01\b\f\n\r\t\x1f\x7f", "<>&\u2028\u2029", "é\U0001f600"} {
		got, err := AppendString([]byte("prefix"), s)
		want, merr := Marshal(s)
		if err != nil || merr != nil || string(got) != "prefix"+string(want) {
			t.Errorf("AppendString(%q) = %s, %v; Marshal gives %s, %v", s, got, err, want, merr)
		}
	}
	if _, err := AppendString(nil, "bad\xff"); !errors.Is(err, ErrInvalidUTF8) {
		t.Errorf("invalid UTF-8: %v, want ErrInvalidUTF8", err)
	}
}
