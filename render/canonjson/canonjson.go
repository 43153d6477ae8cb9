// Package canonjson owns the canonical JSON form that names a render: the
// same value gives byte-identical bytes on any machine, so its sha256 can
// serve as the render's identity.
//
// The form is RFC 8785 (JCS), except for integers beyond 2^53 (third item):
//
//   - Object members are sorted by their keys' UTF-16 code units; there is
//     no insignificant whitespace.
//   - Strings are written as UTF-8 with only ", \ and the control characters
//     below U+0020 escaped: \b \f \n \r \t in short form, the others as
//     \u00xx with lowercase hex. Nothing else is escaped (not <, >, &, nor
//     U+2028). Invalid UTF-8 and escaped lone surrogates are errors, never
//     replaced.
//   - A number written as an integer literal (no fraction, no exponent) keeps
//     its exact digits, whatever its size; -0 becomes 0. This is the
//     difference from JCS, which would round integers beyond 2^53 through a
//     float64: hookbox keeps them exact because they are counts and sizes,
//     and an exact literal is just as stable. Go float64 values are not
//     affected (encoding/json writes them so that the next rule applies or
//     the digits already agree), so for them the output is exactly JCS.
//   - Any other number is read as a float64 and written as ECMAScript's
//     Number.prototype.toString does (1.5, 1e+21, 1e-7). A number beyond
//     the float64 range is an error.
//
// Duplicate object keys (compared after unescaping) and data after the
// value are errors. The package does not sort arrays or otherwise interpret
// values: ordering of lists is the caller's business.
package canonjson

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Sentinel errors; every error from this package wraps exactly one of them.
var (
	// ErrInvalidJSON: the input is not a single well-formed JSON value.
	ErrInvalidJSON = errors.New("invalid JSON")
	// ErrInvalidUTF8: a string is not valid Unicode text.
	ErrInvalidUTF8 = errors.New("invalid UTF-8")
	// ErrDuplicateKey: an object has two members with the same key.
	ErrDuplicateKey = errors.New("duplicate object key")
	// ErrNumber: a number cannot be represented (NaN, infinite, beyond float64).
	ErrNumber = errors.New("unrepresentable number")
	// ErrUnsupported: encoding/json cannot encode the Go value.
	ErrUnsupported = errors.New("value cannot be encoded as JSON")
)

// maxDepth bounds nesting so hostile input cannot exhaust the stack; it is
// the limit encoding/json itself applies.
const maxDepth = 10000

// Marshal encodes v (anything encoding/json can encode) as canonical JSON.
//
// Go strings (and map keys) holding invalid UTF-8 are an error, where
// encoding/json would silently write U+FFFD. encoding/json marks each such
// replacement with the escape \ufffd, which it never uses for a real U+FFFD,
// so Marshal refuses output containing that escape; a json.Marshaler that
// writes the escape itself is refused too (it should write the character).
func Marshal(v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		var uve *json.UnsupportedValueError
		if errors.As(err, &uve) && uve.Value.CanFloat() {
			return nil, fmt.Errorf("canonjson: %w: %w", ErrNumber, err) // NaN or ±Inf
		}
		return nil, fmt.Errorf("canonjson: %w: %w", ErrUnsupported, err)
	}
	if hasReplacementEscape(data) {
		return nil, fmt.Errorf("canonjson: %w: a string in the value is not valid UTF-8; "+
			"convert it to valid text (or encode the bytes, e.g. as base64) before rendering", ErrInvalidUTF8)
	}
	return Canonicalize(data)
}

// Canonicalize re-encodes arbitrary JSON bytes canonically (same rules as
// Marshal). Duplicate object keys are an error; trailing data is an error.
func Canonicalize(data []byte) ([]byte, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("canonjson: %w at byte %d", ErrInvalidUTF8, invalidUTF8At(data))
	}
	if off, ok := loneSurrogate(data); !ok {
		return nil, fmt.Errorf("canonjson: %w: escaped lone surrogate at byte %d; "+
			"a \\uD800-\\uDFFF escape must be half of a pair", ErrInvalidUTF8, off)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err == io.EOF {
		return nil, fmt.Errorf("canonjson: %w: no value", ErrInvalidJSON)
	}
	if err != nil {
		return nil, fmt.Errorf("canonjson: %w: %w", ErrInvalidJSON, err)
	}
	root, err := parseValue(dec, tok, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("canonjson: %w: data after the value at byte %d", ErrInvalidJSON, dec.InputOffset())
	}
	var out bytes.Buffer
	out.Grow(len(data))
	root.write(&out)
	return out.Bytes(), nil
}

// Digest returns "sha256:" + lowercase hex of sha256(canonical bytes of v),
// and those bytes.
func Digest(v any) (string, []byte, error) {
	data, err := Marshal(v)
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:]), data, nil
}

// node is a parsed value. Canonicalize builds the whole tree before writing
// so that each byte of output is written once, however deep the nesting.
type node struct {
	kind    nodeKind
	text    string // literal: canonical text; str: the decoded string
	items   []node
	members []member
}

type nodeKind uint8

const (
	literal nodeKind = iota // null, true, false or a number, already canonical
	str
	array
	object
)

type member struct {
	key   string
	at    int64 // input offset just after the key, for messages
	value node
}

// parseValue parses the value that starts with tok, reading the rest of it
// from dec.
func parseValue(dec *json.Decoder, tok json.Token, depth int) (node, error) {
	switch t := tok.(type) {
	case json.Delim:
		if depth >= maxDepth {
			return node{}, fmt.Errorf("canonjson: %w: nested deeper than %d at byte %d", ErrInvalidJSON, maxDepth, dec.InputOffset())
		}
		switch t {
		case '[':
			return parseArray(dec, depth+1)
		case '{':
			return parseObject(dec, depth+1)
		}
		return node{}, fmt.Errorf("canonjson: %w: unexpected %q at byte %d", ErrInvalidJSON, rune(t), dec.InputOffset())
	case string:
		return node{kind: str, text: t}, nil
	case json.Number:
		n, err := canonicalNumber(string(t))
		if err != nil {
			return node{}, fmt.Errorf("canonjson: number before byte %d: %w", dec.InputOffset(), err)
		}
		return node{text: n}, nil
	case bool:
		return node{text: strconv.FormatBool(t)}, nil
	case nil:
		return node{text: "null"}, nil
	}
	return node{}, fmt.Errorf("canonjson: %w: unexpected token %v", ErrInvalidJSON, tok)
}

func next(dec *json.Decoder) (json.Token, error) {
	tok, err := dec.Token()
	if err == io.EOF {
		return nil, fmt.Errorf("canonjson: %w: unexpected end of input", ErrInvalidJSON)
	}
	if err != nil {
		return nil, fmt.Errorf("canonjson: %w: %w", ErrInvalidJSON, err)
	}
	return tok, nil
}

func parseArray(dec *json.Decoder, depth int) (node, error) {
	n := node{kind: array}
	for {
		tok, err := next(dec)
		if err != nil {
			return node{}, err
		}
		if tok == json.Delim(']') {
			return n, nil
		}
		item, err := parseValue(dec, tok, depth)
		if err != nil {
			return node{}, err
		}
		n.items = append(n.items, item)
	}
}

func parseObject(dec *json.Decoder, depth int) (node, error) {
	n := node{kind: object}
	for {
		tok, err := next(dec)
		if err != nil {
			return node{}, err
		}
		if tok == json.Delim('}') {
			break
		}
		key, ok := tok.(string)
		if !ok { // the decoder enforces string keys; this only guards the assertion
			return node{}, fmt.Errorf("canonjson: %w: object key is not a string", ErrInvalidJSON)
		}
		at := dec.InputOffset()
		if tok, err = next(dec); err != nil {
			return node{}, err
		}
		value, err := parseValue(dec, tok, depth)
		if err != nil {
			return node{}, err
		}
		n.members = append(n.members, member{key: key, at: at, value: value})
	}
	// Sorting makes equal keys adjacent; the stable sort keeps them in input
	// order, so the second one is the duplicate to point at.
	slices.SortStableFunc(n.members, func(a, b member) int { return compareUTF16(a.key, b.key) })
	for i := 1; i < len(n.members); i++ {
		if n.members[i].key == n.members[i-1].key {
			return node{}, fmt.Errorf("canonjson: %w %s before byte %d; an object may name each key once",
				ErrDuplicateKey, strconv.Quote(n.members[i].key), n.members[i].at)
		}
	}
	return n, nil
}

func (n *node) write(out *bytes.Buffer) {
	switch n.kind {
	case literal:
		out.WriteString(n.text)
	case str:
		writeString(out, n.text)
	case array:
		out.WriteByte('[')
		for i := range n.items {
			if i > 0 {
				out.WriteByte(',')
			}
			n.items[i].write(out)
		}
		out.WriteByte(']')
	case object:
		out.WriteByte('{')
		for i := range n.members {
			if i > 0 {
				out.WriteByte(',')
			}
			writeString(out, n.members[i].key)
			out.WriteByte(':')
			n.members[i].value.write(out)
		}
		out.WriteByte('}')
	}
}

// compareUTF16 orders valid UTF-8 strings by their UTF-16 code units (RFC
// 8785 §3.2.3). That is code point order except that characters beyond the
// BMP, written as surrogates D800-DFFF, sort before U+E000-U+FFFF.
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			const firstSurrogate = 0xd800
			sa, sb := ra > 0xffff, rb > 0xffff
			switch {
			case sa == sb:
				return cmp.Compare(ra, rb)
			case sa: // rb is in the BMP and, in valid UTF-8, not a surrogate
				return cmp.Compare(firstSurrogate, rb)
			default:
				return cmp.Compare(ra, firstSurrogate)
			}
		}
		a, b = a[na:], b[nb:]
	}
	return cmp.Compare(len(a), len(b))
}

// writeString writes s as RFC 8785 §3.2.2.2 requires. s is valid UTF-8
// (checked on input), so it is copied through except for the escapes.
func writeString(out *bytes.Buffer, s string) {
	const hexDigits = "0123456789abcdef"
	out.WriteByte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		out.WriteString(s[start:i])
		switch c {
		case '"', '\\':
			out.WriteByte('\\')
			out.WriteByte(c)
		case '\b':
			out.WriteString(`\b`)
		case '\f':
			out.WriteString(`\f`)
		case '\n':
			out.WriteString(`\n`)
		case '\r':
			out.WriteString(`\r`)
		case '\t':
			out.WriteString(`\t`)
		default:
			out.WriteString(`\u00`)
			out.WriteByte(hexDigits[c>>4])
			out.WriteByte(hexDigits[c&0xf])
		}
		start = i + 1
	}
	out.WriteString(s[start:])
	out.WriteByte('"')
}

// canonicalNumber rewrites a JSON number literal (already validated by the
// decoder) in canonical form.
func canonicalNumber(lit string) (string, error) {
	if !strings.ContainsAny(lit, ".eE") {
		if lit == "-0" {
			return "0", nil
		}
		return lit, nil // JSON forbids leading zeros, so the digits are canonical
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return "", fmt.Errorf("%w: %s is beyond the float64 range", ErrNumber, lit)
	}
	return formatES(f)
}

// formatES formats f as ECMAScript's Number.prototype.toString (ECMA-262
// Number::toString, radix 10). Go's shortest round-trip digits are the same
// digits ECMAScript chooses.
func formatES(f float64) (string, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "", fmt.Errorf("%w: %v", ErrNumber, f)
	}
	if f == 0 {
		return "0", nil // also -0
	}
	var b strings.Builder
	if f < 0 {
		b.WriteByte('-')
		f = -f
	}
	// "d.ddddde±x": digits and the decimal exponent of the first digit.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, exp, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	x, err := strconv.Atoi(exp)
	if err != nil {
		return "", fmt.Errorf("%w: cannot format %v", ErrNumber, f)
	}
	k := len(digits)
	n := x + 1 // ECMAScript's n: the value is 0.digits × 10^n
	switch {
	case k <= n && n <= 21:
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", n-k))
	case 0 < n && n <= 21:
		b.WriteString(digits[:n])
		b.WriteByte('.')
		b.WriteString(digits[n:])
	case -6 < n && n <= 0:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -n))
		b.WriteString(digits)
	default:
		b.WriteByte(digits[0])
		if k > 1 {
			b.WriteByte('.')
			b.WriteString(digits[1:])
		}
		b.WriteByte('e')
		if n-1 >= 0 {
			b.WriteByte('+')
		}
		b.WriteString(strconv.Itoa(n - 1))
	}
	return b.String(), nil
}

// loneSurrogate scans the strings in data for \uXXXX escapes of UTF-16
// surrogates that are not a high-low pair. encoding/json would replace them
// with U+FFFD, which would make two different inputs canonicalize alike.
// It returns the offset of the first bad escape and false, or 0 and true.
// Malformed JSON is left to the decoder to report.
func loneSurrogate(data []byte) (int, bool) {
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 >= len(data) {
				return 0, true
			}
			if data[i+1] != 'u' {
				i++ // a one-character escape
				continue
			}
			r, ok := hex4(data, i+2)
			if !ok {
				return 0, true // malformed; the decoder says so
			}
			switch {
			case utf16.IsSurrogate(r) && r < 0xdc00: // high half: a low half must follow
				lo, ok := -1, false
				if i+7 < len(data) && data[i+6] == '\\' && data[i+7] == 'u' {
					var r2 rune
					r2, ok = hex4(data, i+8)
					lo = int(r2)
				}
				if !ok || lo < 0xdc00 || lo > 0xdfff {
					return i, false
				}
				i += 11
			case utf16.IsSurrogate(r): // low half on its own
				return i, false
			default:
				i += 5
			}
		}
	}
	return 0, true
}

func hex4(data []byte, at int) (rune, bool) {
	if at+4 > len(data) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(data[at:at+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	return rune(v), true
}

// hasReplacementEscape reports whether a string in data (output of
// json.Marshal) contains the escape \ufffd.
func hasReplacementEscape(data []byte) bool {
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 < len(data) && data[i+1] == 'u' {
				if r, ok := hex4(data, i+2); ok && r == utf8.RuneError {
					return true
				}
			}
			i++
		}
	}
	return false
}

func invalidUTF8At(data []byte) int {
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return len(data)
}
