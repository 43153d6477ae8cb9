package canonjson

// This file keeps the canonicalizer hookbox used before it moved onto
// jsontext, unchanged apart from names, as the oracle of the differential
// tests: every byte the old code wrote for an accepted input, the new code
// must write too. Test code only.

import (
	"bytes"
	"cmp"
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

// refMaxDepth bounds nesting so hostile input cannot exhaust the stack; it is
// the limit encoding/json itself applies.
const refMaxDepth = 10000

// refMarshal encodes v (anything encoding/json can encode) as canonical JSON.
//
// Go strings (and map keys) holding invalid UTF-8 are an error, where
// encoding/json would silently write U+FFFD. encoding/json marks each such
// replacement with the escape \ufffd, which it never uses for a real U+FFFD,
// so Marshal refuses output containing that escape; a json.Marshaler that
// writes the escape itself is refused too (it should write the character).
func refMarshal(v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		var uve *json.UnsupportedValueError
		if errors.As(err, &uve) && uve.Value.CanFloat() {
			return nil, fmt.Errorf("canonjson: %w: %w", ErrNumber, err) // NaN or ±Inf
		}
		return nil, fmt.Errorf("canonjson: %w: %w", ErrUnsupported, err)
	}
	if refHasReplacementEscape(data) {
		return nil, fmt.Errorf("canonjson: %w: a string in the value is not valid UTF-8; "+
			"convert it to valid text (or encode the bytes, e.g. as base64) before rendering", ErrInvalidUTF8)
	}
	return refCanonicalize(data)
}

// refCanonicalize re-encodes arbitrary JSON bytes canonically (same rules as
// refMarshal). Duplicate object keys are an error; trailing data is an error.
func refCanonicalize(data []byte) ([]byte, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("canonjson: %w at byte %d", ErrInvalidUTF8, refInvalidUTF8At(data))
	}
	if off, ok := refLoneSurrogate(data); !ok {
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
	root, err := refParseValue(dec, tok, 0)
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

// refNode is a parsed value. Canonicalize builds the whole tree before writing
// so that each byte of output is written once, however deep the nesting.
type refNode struct {
	kind    refNodeKind
	text    string // literal: canonical text; str: the decoded string
	items   []refNode
	members []refMember
}

type refNodeKind uint8

const (
	refLiteral refNodeKind = iota // null, true, false or a number, already canonical
	refStr
	refArray
	refObject
)

type refMember struct {
	key   string
	at    int64 // input offset just after the key, for messages
	value refNode
}

// refParseValue parses the value that starts with tok, reading the rest of it
// from dec.
func refParseValue(dec *json.Decoder, tok json.Token, depth int) (refNode, error) {
	switch t := tok.(type) {
	case json.Delim:
		if depth >= refMaxDepth {
			return refNode{}, fmt.Errorf("canonjson: %w: nested deeper than %d at byte %d", ErrInvalidJSON, refMaxDepth, dec.InputOffset())
		}
		switch t {
		case '[':
			return refParseArray(dec, depth+1)
		case '{':
			return refParseObject(dec, depth+1)
		}
		return refNode{}, fmt.Errorf("canonjson: %w: unexpected %q at byte %d", ErrInvalidJSON, rune(t), dec.InputOffset())
	case string:
		return refNode{kind: refStr, text: t}, nil
	case json.Number:
		n, err := refCanonicalNumber(string(t))
		if err != nil {
			return refNode{}, fmt.Errorf("canonjson: number before byte %d: %w", dec.InputOffset(), err)
		}
		return refNode{text: n}, nil
	case bool:
		return refNode{text: strconv.FormatBool(t)}, nil
	case nil:
		return refNode{text: "null"}, nil
	}
	return refNode{}, fmt.Errorf("canonjson: %w: unexpected token %v", ErrInvalidJSON, tok)
}

func refNext(dec *json.Decoder) (json.Token, error) {
	tok, err := dec.Token()
	if err == io.EOF {
		return nil, fmt.Errorf("canonjson: %w: unexpected end of input", ErrInvalidJSON)
	}
	if err != nil {
		return nil, fmt.Errorf("canonjson: %w: %w", ErrInvalidJSON, err)
	}
	return tok, nil
}

func refParseArray(dec *json.Decoder, depth int) (refNode, error) {
	n := refNode{kind: refArray}
	for {
		tok, err := refNext(dec)
		if err != nil {
			return refNode{}, err
		}
		if tok == json.Delim(']') {
			return n, nil
		}
		item, err := refParseValue(dec, tok, depth)
		if err != nil {
			return refNode{}, err
		}
		n.items = append(n.items, item)
	}
}

func refParseObject(dec *json.Decoder, depth int) (refNode, error) {
	n := refNode{kind: refObject}
	for {
		tok, err := refNext(dec)
		if err != nil {
			return refNode{}, err
		}
		if tok == json.Delim('}') {
			break
		}
		key, ok := tok.(string)
		if !ok { // the decoder enforces string keys; this only guards the assertion
			return refNode{}, fmt.Errorf("canonjson: %w: refObject key is not a string", ErrInvalidJSON)
		}
		at := dec.InputOffset()
		if tok, err = refNext(dec); err != nil {
			return refNode{}, err
		}
		value, err := refParseValue(dec, tok, depth)
		if err != nil {
			return refNode{}, err
		}
		n.members = append(n.members, refMember{key: key, at: at, value: value})
	}
	// Sorting makes equal keys adjacent; the stable sort keeps them in input
	// order, so the second one is the duplicate to point at.
	slices.SortStableFunc(n.members, func(a, b refMember) int { return refCompareUTF16(a.key, b.key) })
	for i := 1; i < len(n.members); i++ {
		if n.members[i].key == n.members[i-1].key {
			return refNode{}, fmt.Errorf("canonjson: %w %s before byte %d; an refObject may name each key once",
				ErrDuplicateKey, strconv.Quote(n.members[i].key), n.members[i].at)
		}
	}
	return n, nil
}

func (n *refNode) write(out *bytes.Buffer) {
	switch n.kind {
	case refLiteral:
		out.WriteString(n.text)
	case refStr:
		refWriteString(out, n.text)
	case refArray:
		out.WriteByte('[')
		for i := range n.items {
			if i > 0 {
				out.WriteByte(',')
			}
			n.items[i].write(out)
		}
		out.WriteByte(']')
	case refObject:
		out.WriteByte('{')
		for i := range n.members {
			if i > 0 {
				out.WriteByte(',')
			}
			refWriteString(out, n.members[i].key)
			out.WriteByte(':')
			n.members[i].value.write(out)
		}
		out.WriteByte('}')
	}
}

// refCompareUTF16 orders valid UTF-8 strings by their UTF-16 code units (RFC
// 8785 §3.2.3). That is code point order except that characters beyond the
// BMP, written as surrogates D800-DFFF, sort before U+E000-U+FFFF.
func refCompareUTF16(a, b string) int {
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

// refWriteString writes s as RFC 8785 §3.2.2.2 requires. s is valid UTF-8
// (checked on input), so it is copied through except for the escapes.
func refWriteString(out *bytes.Buffer, s string) {
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

// refCanonicalNumber rewrites a JSON number literal (already validated by the
// decoder) in canonical form.
func refCanonicalNumber(lit string) (string, error) {
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
	return refFormatES(f)
}

// refFormatES formats f as ECMAScript's Number.prototype.toString (ECMA-262
// Number::toString, radix 10). Go's shortest round-trip digits are the same
// digits ECMAScript chooses.
func refFormatES(f float64) (string, error) {
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

// refLoneSurrogate scans the strings in data for \uXXXX escapes of UTF-16
// surrogates that are not a high-low pair. encoding/json would replace them
// with U+FFFD, which would make two different inputs canonicalize alike.
// It returns the offset of the first bad escape and false, or 0 and true.
// Malformed JSON is left to the decoder to report.
func refLoneSurrogate(data []byte) (int, bool) {
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
			r, ok := refHex4(data, i+2)
			if !ok {
				return 0, true // malformed; the decoder says so
			}
			switch {
			case utf16.IsSurrogate(r) && r < 0xdc00: // high half: a low half must follow
				lo, ok := -1, false
				if i+7 < len(data) && data[i+6] == '\\' && data[i+7] == 'u' {
					var r2 rune
					r2, ok = refHex4(data, i+8)
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

func refHex4(data []byte, at int) (rune, bool) {
	if at+4 > len(data) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(data[at:at+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	return rune(v), true
}

// refHasReplacementEscape reports whether a string in data (output of
// json.Marshal) contains the escape \ufffd.
func refHasReplacementEscape(data []byte) bool {
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
				if r, ok := refHex4(data, i+2); ok && r == utf8.RuneError {
					return true
				}
			}
			i++
		}
	}
	return false
}

func refInvalidUTF8At(data []byte) int {
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return len(data)
}
