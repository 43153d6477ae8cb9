package canonjson

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

func TestCanonicalize(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"scalar", ` true `, `true`},
		{"null", `null`, `null`},
		{"whitespace", " {\n\t\"b\" : [ 1 , 2 ] ,\r\n \"a\" : { } } ", `{"a":{},"b":[1,2]}`},
		{"nested", `{"z":{"y":[{"b":1,"a":[]}],"x":null},"a":[[],[{}]]}`,
			`{"a":[[],[{}]],"z":{"x":null,"y":[{"a":[],"b":1}]}}`},
		// RFC 8785 §3.2.3: UTF-16 order puts U+1F600 (D83D DE00) before U+FB33.
		{"utf16 order",
			`{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh",` +
				`"1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
			"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\"," +
				"\"\u20ac\":\"Euro Sign\",\"\U0001F600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"},
		{"non-ascii keys", `{"é":1,"e":2,"f":3,"日":4,"E":5}`, `{"E":5,"e":2,"f":3,"é":1,"日":4}`},
		{"prefix keys", `{"ab":1,"a":2,"":3}`, `{"":3,"a":2,"ab":1}`},
		// RFC 8785 §3.2.4.
		{"rfc8785 example",
			`{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],` +
				`"string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals": [null, true, false]}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],` +
				`"string":"€$\u000f\nA'B\"\\\\\"/"}`},
		{"surrogate pair", `"\ud83d\ude00"`, `"😀"`},
		{"escaped nul", `"\u0000"`, `"\u0000"`},
		{"real U+FFFD", `"\ufffd` + "\ufffd" + `"`, `"` + "\ufffd\ufffd" + `"`},
	}
	for _, tt := range tests {
		got, err := Canonicalize([]byte(tt.in))
		if err != nil {
			t.Errorf("%s: Canonicalize(%s): %v", tt.name, tt.in, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("%s: Canonicalize(%s)\n got %s\nwant %s", tt.name, tt.in, got, tt.want)
		}
		checkCanonical(t, []byte(tt.in), got)
	}
}

// TestKeyOrderUTF16 checks the key order against a direct comparison of
// UTF-16 encodings, over keys mixing ASCII, BMP above the surrogates and
// characters beyond the BMP.
func TestKeyOrderUTF16(t *testing.T) {
	runes := []rune{'a', 'b', 0x7f, 0x80, 0xd7ff, 0xe000, 0xfb33, 0xffff, 0x10000, 0x1f600, 0x10ffff}
	r := rand.New(rand.NewPCG(3, 4))
	random := func() string {
		rs := make([]rune, r.IntN(4))
		for i := range rs {
			rs[i] = runes[r.IntN(len(runes))]
		}
		return string(rs)
	}
	for range 5000 {
		a, b := random(), random()
		if a == b {
			continue
		}
		want := []string{a, b}
		if slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b))) > 0 {
			want = []string{b, a}
		}
		in, _ := json.Marshal(map[string]int{a: 1, b: 2})
		got, err := Canonicalize(in)
		if err != nil {
			t.Fatalf("Canonicalize(%q): %v", in, err)
		}
		var keys []string
		dec := json.NewDecoder(bytes.NewReader(got))
		for dec.More() || len(keys) == 0 {
			tok, err := dec.Token()
			if err != nil {
				t.Fatalf("reading %q: %v", got, err)
			}
			if k, ok := tok.(string); ok {
				keys = append(keys, k)
			}
		}
		if !slices.Equal(keys, want) {
			t.Fatalf("Canonicalize(%q) orders keys %q, want %q", in, keys, want)
		}
	}
}

func TestStringEscaping(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", `"plain"`},
		{`"`, `"\""`},
		{`\`, `"\\"`},
		{"/", `"/"`},
		{"\b\f\n\r\t", `"\b\f\n\r\t"`},
		{"\x00\x01\x0b\x1f", `"\u0000\u0001\u000b\u001f"`},
		{"\x7f", "\"\x7f\""},
		{"<>&", `"<>&"`},
		{"\u2028\u2029", "\"\u2028\u2029\""},
		{"é日😀", `"é日😀"`},
		{"\ufffd", "\"\ufffd\""},
	}
	for _, tt := range tests {
		got, err := Marshal(tt.in)
		if err != nil {
			t.Errorf("Marshal(%q): %v", tt.in, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("Marshal(%q) = %s, want %s", tt.in, got, tt.want)
		}
		// Whatever escapes the input used, the output is the same.
		escaped := asciiJSON(tt.in)
		viaEscapes, err := Canonicalize([]byte(escaped))
		if err != nil || string(viaEscapes) != tt.want {
			t.Errorf("Canonicalize(%s) = %s, %v; want %s", escaped, viaEscapes, err, tt.want)
		}
	}
}

// asciiJSON quotes s as a JSON string escaping every rune that is not
// printable ASCII, in uppercase hex and surrogate pairs.
func asciiJSON(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		if r >= 0x20 && r < 0x7f && r != '"' && r != '\\' {
			b.WriteRune(r)
			continue
		}
		for _, u := range utf16.Encode([]rune{r}) {
			fmt.Fprintf(&b, `\u%04X`, u)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func TestNumbers(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0", "0"},
		{"-0", "0"},
		{"-0.0", "0"},
		{"0e5", "0"},
		{"1", "1"},
		{"-1", "-1"},
		{"1.5", "1.5"},
		{"1.50", "1.5"},
		{"-1.5e0", "-1.5"},
		{"1e2", "100"},
		{"12.0E1", "120"},
		{"100e-2", "1"},
		{"1e21", "1e+21"},
		{"1E21", "1e+21"},
		{"1e20", "100000000000000000000"},
		{"123e18", "123000000000000000000"},
		{"1e-7", "1e-7"},
		{"1.5e-7", "1.5e-7"},
		{"0.000001", "0.000001"},
		{"1e-400", "0"},
		{"9007199254740992", "9007199254740992"},
		// Integer literals keep their exact digits, even beyond 2^53 ...
		{"9007199254740993", "9007199254740993"},
		{"-9007199254740993", "-9007199254740993"},
		{"123456789012345678901234567890", "123456789012345678901234567890"},
		// ... while any other literal goes through float64.
		{"9007199254740993.0", "9007199254740992"},
		{"1.7976931348623157e308", "1.7976931348623157e+308"},
	}
	for _, tt := range tests {
		got, err := Canonicalize([]byte(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("Canonicalize(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

// TestNumberVectors checks the number vectors of RFC 8785 Appendix B, as Go
// float64 values and as JSON literals.
func TestNumberVectors(t *testing.T) {
	tests := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, tt := range tests {
		f := math.Float64frombits(tt.bits)
		got, err := Marshal(f)
		if err != nil || string(got) != tt.want {
			t.Errorf("Marshal(%#016x = %v) = %s, %v; want %s", tt.bits, f, got, err, tt.want)
		}
		lit := strconv.FormatFloat(f, 'e', -1, 64)
		got, err = Canonicalize([]byte(lit))
		if err != nil || string(got) != tt.want {
			t.Errorf("Canonicalize(%s) = %s, %v; want %s", lit, got, err, tt.want)
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, err := Marshal(f); !errors.Is(err, ErrNumber) {
			t.Errorf("Marshal(%v): err = %v, want ErrNumber", f, err)
		}
	}
}

// TestMarshalFloatIsJCS checks that for Go float64 values the integer-literal
// rule never departs from JCS: Marshal gives exactly the ECMAScript form.
func TestMarshalFloatIsJCS(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	values := []float64{0, 1, -1, 0.1, 1e20, 1e21, 1e-6, 1e-7, 1 << 53, 1<<53 + 2, 1 << 60, 1 << 70,
		math.MaxFloat64, math.SmallestNonzeroFloat64, 123456789.125}
	for range 20000 {
		f := math.Float64frombits(r.Uint64())
		if !math.IsNaN(f) && !math.IsInf(f, 0) {
			values = append(values, f)
		}
		// Integral values of every size, and values near the 1e-6 and 1e21
		// boundaries where the ECMAScript form switches to exponents.
		values = append(values, float64(r.Uint64()>>r.IntN(64)),
			r.NormFloat64()*math.Pow(10, float64(r.IntN(40)-15)))
	}
	for _, f := range values {
		got, err := Marshal(f)
		want, _ := refFormatES(f) // the ECMAScript form
		if err != nil || string(got) != want {
			t.Fatalf("Marshal(%v) = %s, %v; want %s", f, got, err, want)
		}
	}
}

func TestCanonicalizeRefused(t *testing.T) {
	const maxDepth = 10000 // the documented nesting limit
	deep := strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1)
	tests := []struct {
		name, in string
		want     error
	}{
		{"empty", ``, ErrInvalidJSON},
		{"blank", " \n", ErrInvalidJSON},
		{"trailing value", `1 2`, ErrInvalidJSON},
		{"trailing object", `{}{}`, ErrInvalidJSON},
		{"trailing garbage", `{"a":1} x`, ErrInvalidJSON},
		{"trailing bracket", `[1]]`, ErrInvalidJSON},
		{"trailing comma", `[1,]`, ErrInvalidJSON},
		{"unclosed", `{"a":[1`, ErrInvalidJSON},
		{"bare word", `nul`, ErrInvalidJSON},
		{"single quotes", `{'a':1}`, ErrInvalidJSON},
		{"leading zero", `01`, ErrInvalidJSON},
		{"too deep", deep, ErrInvalidJSON},
		{"duplicate", `{"a":1,"a":2}`, ErrDuplicateKey},
		{"duplicate via escape", `{"a":1,"\u0061":2}`, ErrDuplicateKey},
		{"duplicate nested", `[{"x":{"k":1,"k":1}}]`, ErrDuplicateKey},
		{"invalid utf8 in string", "\"a\xffb\"", ErrInvalidUTF8},
		{"invalid utf8 in key", "{\"\xc3\":1}", ErrInvalidUTF8},
		{"lone high surrogate", `"\ud800"`, ErrInvalidUTF8},
		{"lone low surrogate", `"\udc00"`, ErrInvalidUTF8},
		{"high then text", `"\ud83dx"`, ErrInvalidUTF8},
		{"high then non-low", `"\ud83d\u0041"`, ErrInvalidUTF8},
		{"reversed pair", `"\ude00\ud83d"`, ErrInvalidUTF8},
		{"surrogate in key", `{"\uDBFF":1}`, ErrInvalidUTF8},
		{"huge exponent", `1e400`, ErrNumber},
		{"huge negative", `[-1.5E+999]`, ErrNumber},
	}
	for _, tt := range tests {
		got, err := Canonicalize([]byte(tt.in))
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: Canonicalize(%.40q) = %s, %v; want %v", tt.name, tt.in, got, err, tt.want)
		}
	}
	ok := strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)
	if _, err := Canonicalize([]byte(ok)); err != nil {
		t.Errorf("%d levels of nesting: %v", maxDepth, err)
	}
}

type sample struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	Count  uint64            `json:"count"`
	Ratio  float64           `json:"ratio"`
	Tiny   float64           `json:"tiny"`
	Neg    float64           `json:"neg_zero"`
	Raw    json.RawMessage   `json:"raw,omitempty"`
}

func TestMarshal(t *testing.T) {
	v := sample{
		Name:   "<a & b>",
		Labels: map[string]string{"z": "1", "a": "2", "é": "3"},
		Count:  math.MaxUint64,
		Ratio:  1e21,
		Tiny:   1e-7,
		Neg:    math.Copysign(0, -1),
		Raw:    json.RawMessage(`{ "y": 1, "x": [ 2 ] }`),
	}
	want := `{"count":18446744073709551615,"labels":{"a":"2","z":"1","é":"3"},"name":"<a & b>",` +
		`"neg_zero":0,"ratio":1e+21,"raw":{"x":[2],"y":1},"tiny":1e-7}`
	got, err := Marshal(v)
	if err != nil || string(got) != want {
		t.Fatalf("Marshal = %s, %v\nwant %s", got, err, want)
	}
}

func TestMarshalRefused(t *testing.T) {
	tests := []struct {
		name string
		v    any
		want error
	}{
		{"invalid utf8 string", "a\xffb", ErrInvalidUTF8},
		{"invalid utf8 key", map[string]int{"\xff": 1}, ErrInvalidUTF8},
		{"invalid utf8 nested", sample{Labels: map[string]string{"k": "\xc3"}}, ErrInvalidUTF8},
		{"NaN", math.NaN(), ErrNumber},
		{"Inf", []float64{math.Inf(1)}, ErrNumber},
		{"channel", make(chan int), ErrUnsupported},
		{"duplicate in raw", json.RawMessage(`{"a":1,"a":2}`), ErrDuplicateKey},
		// Invalid text a json.Marshaler writes is refused like a Go string's.
		{"invalid utf8 in raw", json.RawMessage("\"\xff\""), ErrInvalidUTF8},
		{"lone surrogate in raw", []json.RawMessage{[]byte(`"\ud800"`)}, ErrInvalidUTF8},
		{"number beyond float64 in raw", json.RawMessage(`{"n":-1e999}`), ErrNumber},
		{"named string type", struct{ M mode }{"\xff"}, ErrInvalidUTF8},
		{"float32", float32(math.Inf(-1)), ErrNumber},
		{"cycle", cycle(), ErrUnsupported},
		{"failing Marshaler", failing{}, ErrUnsupported},
	}
	for _, tt := range tests {
		got, err := Marshal(tt.v)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: Marshal = %s, %v; want %v", tt.name, got, err, tt.want)
		}
	}
}

type mode string

type failing struct{}

func (failing) MarshalJSON() ([]byte, error) { return nil, errors.New("cannot encode") }

func cycle() any {
	m := map[string]any{}
	m["self"] = m
	return m
}

func TestDigest(t *testing.T) {
	d, b, err := Digest(map[string]int{"b": 1, "a": 2})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"a":2,"b":1}` {
		t.Errorf("canonical bytes = %s", b)
	}
	// Fixed here so a change in the canonical form cannot go unnoticed.
	const want = "sha256:d3626ac30a87e6f7a6428233b3c68299976865fa5508e4267c5415c76af7a772"
	if d != want {
		t.Errorf("Digest = %s, want %s", d, want)
	}
	sum := sha256.Sum256(b)
	if d != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("Digest %s is not the sha256 of the bytes it returned", d)
	}
	if _, _, err := Digest(math.NaN()); !errors.Is(err, ErrNumber) {
		t.Errorf("Digest(NaN): err = %v, want ErrNumber", err)
	}
}

// checkCanonical asserts the properties every accepted input has: the output
// is valid JSON, canonicalizing it again changes nothing, and it means the
// same as the input.
func checkCanonical(t *testing.T, in, out []byte) {
	t.Helper()
	if !json.Valid(out) {
		t.Fatalf("output is not valid JSON: %q (input %q)", out, in)
	}
	if !json.Valid(in) {
		t.Fatalf("accepted input that encoding/json calls invalid: %q", in)
	}
	again, err := Canonicalize(out)
	if err != nil || !bytes.Equal(again, out) {
		t.Fatalf("not idempotent: Canonicalize(%q) = %q, %v", out, again, err)
	}
	a, errA := decode(in, false)
	b, errB := decode(out, false)
	if (errA == nil) != (errB == nil) {
		t.Fatalf("json.Unmarshal disagrees: input %q: %v; output %q: %v", in, errA, out, errB)
	}
	if errA == nil && !reflect.DeepEqual(a, b) {
		t.Fatalf("meaning changed: input %q decodes to %#v, output %q to %#v", in, a, out, b)
	}
	// Numbers beyond float64 make json.Unmarshal fail; compare those
	// through json.Number, by float64 value (an exact literal on both sides
	// parses to the same value, even if that is ±Inf).
	a, errA = decode(in, true)
	b, errB = decode(out, true)
	if errA != nil || errB != nil {
		t.Fatalf("decode with UseNumber: input %q: %v; output %q: %v", in, errA, out, errB)
	}
	if !sameJSON(a, b) {
		t.Fatalf("meaning changed: input %q decodes to %#v, output %q to %#v", in, a, out, b)
	}
}

func decode(data []byte, useNumber bool) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if useNumber {
		dec.UseNumber()
	}
	var v any
	err := dec.Decode(&v)
	return v, err
}

func sameJSON(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		fa, _ := strconv.ParseFloat(string(a), 64)
		fb, _ := strconv.ParseFloat(string(b), 64)
		return fa == fb
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameJSON(a[i], b[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !sameJSON(va, vb) {
				return false
			}
		}
		return true
	}
	return a == b
}

// FuzzCanonicalize is a differential test: on any input, Canonicalize and
// the implementation it replaced (reference_test.go) accept the same inputs,
// write the same bytes, and refuse with the same sentinel unless the input
// has several defects (see severalDefects).
func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{
		`null`, `true`, `0`, `-0`, `-0.0`, `1e21`, `1E-7`, `1.50`, `9007199254740993`,
		`123456789012345678901234567890`, `1e400`, `1e-400`, `333333333.33333329`,
		`{"b":1,"a":{"d":[1,2,{"c":null}]}}`, `{"a":1,"a":2}`, `{"a":1,"\u0061":2}`,
		`{"\u20ac":1,"\ud83d\ude00":2,"\ufb33":3}`, `"\ud800"`, `"\udc00\ud800"`,
		`"\u0000\u001f\b\f\n\r\t\"\\\/<>&\u2028"`, "\"\xff\"", `[1,]`, `{} x`, ` [ ] `,
		`[[[[[]]]]]`, `{"":""}`, `"\ufffd"`, `-1.7976931348623157e308`, `[1.7976931348623159e308]`,
		// Several defects: the two implementations look in different orders.
		`{"a":0,"a"0}`, `[{"a":1,"a":2} x`, `{"a":1,"a":"\ud800"}`, `[{"a":1,"a":2},1e999]`, `["\ud800",]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Canonicalize(in)
		want, refErr := refCanonicalize(in)
		if err != nil {
			if sentinelOf(err) == nil {
				t.Fatalf("Canonicalize(%q): error wraps no sentinel: %v", in, err)
			}
			if refErr == nil {
				t.Fatalf("Canonicalize(%q): %v; the reference accepts it as %q", in, err, want)
			}
			if sentinelOf(err) != sentinelOf(refErr) && !severalDefects(in, err) {
				t.Fatalf("Canonicalize(%q): %v; the reference: %v", in, err, refErr)
			}
			return
		}
		if refErr != nil {
			t.Fatalf("Canonicalize(%q) = %q; the reference refuses it: %v", in, out, refErr)
		}
		if !bytes.Equal(out, want) {
			t.Fatalf("Canonicalize(%q) = %q; the reference writes %q", in, out, want)
		}
		checkCanonical(t, in, out)
	})
}

// severalDefects reports whether in has more than one defect, so that the
// reference, which looks for them in another order, may name another one
// than err does. Input that is not well-formed JSON must be ErrInvalidJSON
// (the reference may report a lone surrogate or a duplicate key it met
// first); well-formed input may have both a duplicate key and a number
// beyond float64, of which each implementation reports the one it meets
// first.
func severalDefects(in []byte, err error) bool {
	lenient := jsontext.Value(in).IsValid(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if !lenient {
		return errors.Is(err, ErrInvalidJSON)
	}
	return !jsontext.Value(in).IsValid(jsontext.AllowInvalidUTF8(true)) && hasFloatBeyondRange(in)
}

// hasFloatBeyondRange reports whether well-formed in has a number literal
// with a fraction or exponent beyond the float64 range.
func hasFloatBeyondRange(in []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if n, ok := tok.(json.Number); ok && strings.ContainsAny(string(n), ".eE") {
			if _, err := strconv.ParseFloat(string(n), 64); err != nil {
				return true
			}
		}
	}
}

// sentinelOf returns the package sentinel err wraps, or nil.
func sentinelOf(err error) error {
	for _, sentinel := range []error{ErrInvalidJSON, ErrInvalidUTF8, ErrDuplicateKey, ErrNumber, ErrUnsupported} {
		if errors.Is(err, sentinel) {
			return sentinel
		}
	}
	return nil
}

// FuzzMarshal is the differential test of Marshal: Go values built from the
// fuzzer's strings and numbers (invalid UTF-8 included) encode as the
// implementation it replaced encodes them, or both refuse with the same
// sentinel.
func FuzzMarshal(f *testing.F) {
	f.Add("k", "v", 1.5, int64(-3), uint64(1)<<63, []byte(`{"b":[1e21]}`))
	f.Add("\xff", "a\xc3", math.Copysign(0, -1), int64(0), uint64(0), []byte(`"\ud800"`))
	f.Add("<&>", "\u2028\ufffd", 1e-7, int64(math.MaxInt64), uint64(math.MaxUint64), []byte(`{"a":1,"a":2}`))
	f.Fuzz(func(t *testing.T, key, text string, f float64, i int64, u uint64, raw []byte) {
		type inner struct {
			Text  string  `json:"text,omitempty"`
			Float float64 `json:"float"`
		}
		v := map[string]any{
			key:     text,
			"list":  []any{text, f, i, u, nil, true, []string(nil)},
			"inner": &inner{Text: text, Float: f},
			"keyed": map[string]int64{key: i, text: int64(u >> 1)},
			"bytes": []byte(text),
		}
		if json.Valid(raw) {
			v["raw"] = json.RawMessage(raw)
		}
		got, err := Marshal(v)
		if !utf8.ValidString(key) || !utf8.ValidString(text) {
			// Not asked of the reference: it sees invalid UTF-8 only through
			// the \ufffd escape of encoding/json v1, which v2 does not write.
			if !errors.Is(err, ErrInvalidUTF8) && !(errors.Is(err, ErrNumber) && !isFinite(f)) {
				t.Fatalf("Marshal(%#v) = %q, %v; want ErrInvalidUTF8", v, got, err)
			}
			return
		}
		want, refErr := refMarshal(v)
		if (err == nil) != (refErr == nil) || sentinelOf(err) != sentinelOf(refErr) {
			t.Fatalf("Marshal(%#v) = %q, %v; the reference: %q, %v", v, got, err, want, refErr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("Marshal(%#v) = %q; the reference writes %q", v, got, want)
		}
	})
}

func isFinite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// TestMarshalLikeEncodingJSON checks Go types whose encoding encoding/json
// defines in its own way, against the implementation Marshal replaced.
func TestMarshalLikeEncodingJSON(t *testing.T) {
	type tagged struct {
		Omitted  string `json:",omitempty"`
		Renamed  int    `json:"renamed"`
		Stringed int64  `json:"stringed,string"`
		Skipped  string `json:"-"`
		//lint:ignore SA5008 a field named "-" is exactly the encoding/json rule under test
		Dash     string            `json:"-,"`
		Ptr      *int              `json:"ptr"`
		Any      any               `json:"any"`
		NilMap   map[string]string `json:"nil_map"`
		NilSlice []int             `json:"nil_slice"`
		Array    [2]bool           `json:"array"`
		F32      float32           `json:"f32"`
		private  string
	}
	type embedded struct {
		tagged
		Renamed string `json:"renamed"` // shadows the embedded field
	}
	values := []any{
		json.Number("12.50"), json.Number(""), json.Number("-0"), []json.Number{"1e3", "7"},
		map[int]string{2: "b", 10: "a", -1: "c"},
		map[json.Number]bool{"1": true},
		tagged{Renamed: 1, Stringed: 1 << 60, Skipped: "x", Dash: "d", F32: 0.1, private: "p"},
		embedded{tagged: tagged{Renamed: 2, Any: []any{1.0, "x"}}, Renamed: "outer"},
		[]byte{0, 0xff}, json.RawMessage(`[ 1 , {"b":null,"a":0.10} ]`),
		struct{ A, B any }{A: uint64(math.MaxUint64), B: uint8(7)},
	}
	for _, v := range values {
		got, err := Marshal(v)
		want, refErr := refMarshal(v)
		if err != nil || refErr != nil || !bytes.Equal(got, want) {
			t.Errorf("Marshal(%#v) = %s, %v; the reference: %s, %v", v, got, err, want, refErr)
		}
	}
	if _, err := Marshal(json.Number("1x")); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Marshal(json.Number(1x)): err = %v, want ErrUnsupported", err)
	}
}
