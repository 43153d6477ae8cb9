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
//     affected (they are encoded so that the next rule applies or the digits
//     already agree), so for them the output is exactly JCS.
//   - Any other number is read as a float64 and written as ECMAScript's
//     Number.prototype.toString does (1.5, 1e+21, 1e-7). A number beyond
//     the float64 range is an error.
//
// Duplicate object keys (compared after unescaping), nesting deeper than
// 10000 levels and data after the value are errors; each error wraps one of
// the sentinels below. When input has several defects, which one is named is
// not specified, except that invalid UTF-8 bytes are always ErrInvalidUTF8
// and otherwise input that is not well-formed JSON is ErrInvalidJSON. The
// package does not sort arrays or otherwise interpret values: ordering of
// lists is the caller's business.
//
// The work is done by the JSON v2 implementation that encoding/json runs on
// under GOEXPERIMENT=jsonv2 (github.com/go-json-experiment/json). Marshal
// uses its encoding/json (v1) semantics, because only that encoder can
// refuse invalid UTF-8 in a Go string: encoding/json replaces it with U+FFFD,
// and on v2 even without a trace in the output. Canonicalize is jsontext's
// RFC 8785 canonicalization, asked to keep integer literals as written; this
// package adds what that leaves to the caller: a number beyond float64 is
// refused where jsontext would write ±MaxFloat64. The hand-written
// canonicalizer this replaced is kept in reference_test.go, and FuzzMarshal
// and FuzzCanonicalize check that both give the same bytes.
package canonjson

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
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

// marshalOptions encode Go values as encoding/json does (struct tags,
// omitempty, Marshaler methods: the semantics every digest was computed
// with) except that a string holding invalid UTF-8 is an error, where
// encoding/json would write U+FFFD and so give two different values one
// digest.
var marshalOptions = jsonv2.JoinOptions(
	jsonv1.DefaultOptionsV1(),
	jsontext.AllowInvalidUTF8(false),
	// encoding/json writes its Number as the literal it holds; to this
	// encoder it is just a string type unless told.
	jsonv2.WithMarshalers(jsonv2.MarshalToFunc(func(enc *jsontext.Encoder, n json.Number) error {
		return jsonv1.Number(n).MarshalJSONTo(enc)
	})),
)

// Marshal encodes v (anything encoding/json can encode) as canonical JSON.
// Go strings (and map keys) holding invalid UTF-8 are an error.
func Marshal(v any) ([]byte, error) {
	data, err := jsonv2.Marshal(v, marshalOptions)
	if err != nil {
		return nil, marshalError(v, err)
	}
	return Canonicalize(data)
}

func marshalError(v any, err error) error {
	// NaN and ±Inf are reported as the value's text (Value is not set by
	// every version of the encoder); the other unsupported value is a cycle.
	var uve *jsonv1.UnsupportedValueError
	if errors.As(err, &uve) && (uve.Str == "NaN" || uve.Str == "+Inf" || uve.Str == "-Inf") {
		return fmt.Errorf("canonjson: %w: %w", ErrNumber, err)
	}
	// The encoder's invalid-UTF-8 error is not exported; it was the cause
	// if the value encodes once invalid UTF-8 is let through.
	if _, lenient := jsonv2.Marshal(v, marshalOptions, jsontext.AllowInvalidUTF8(true)); lenient == nil {
		return fmt.Errorf("canonjson: %w: %w; convert the string to valid text "+
			"(or encode the bytes, e.g. as base64) before rendering", ErrInvalidUTF8, err)
	}
	return fmt.Errorf("canonjson: %w: %w", ErrUnsupported, err)
}

// Canonicalize re-encodes arbitrary JSON bytes canonically (same rules as
// Marshal). Duplicate object keys are an error; trailing data is an error.
func Canonicalize(data []byte) ([]byte, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("canonjson: %w at byte %d", ErrInvalidUTF8, invalidUTF8At(data))
	}
	out := jsontext.Value(bytes.Clone(data)) // canonicalized in place
	if err := out.Canonicalize(jsontext.CanonicalizeRawInts(false)); err != nil {
		return nil, syntaxError(data, err)
	}
	// jsontext writes a float literal beyond the float64 range as
	// ±MaxFloat64; only output holding that literal can have come from one.
	if bytes.Contains(out, []byte(maxFloat64)) {
		if err := checkFloatRange(data); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// syntaxError names what jsontext refused in data (valid UTF-8). Input that
// is not well-formed JSON is ErrInvalidJSON whatever else is wrong with it;
// in well-formed input a lone surrogate is reported before a duplicate key.
func syntaxError(data []byte, err error) error {
	if malformed := decodeError(data, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)); malformed != nil {
		return fmt.Errorf("canonjson: %w: %w", ErrInvalidJSON, malformed)
	}
	// With the bytes valid UTF-8, what invalid Unicode alone trips on is an
	// escaped lone surrogate.
	if surrogate := decodeError(data, jsontext.AllowDuplicateNames(true)); surrogate != nil {
		return fmt.Errorf("canonjson: %w: %w; a \\uD800-\\uDFFF escape must be half of a pair", ErrInvalidUTF8, surrogate)
	}
	if errors.Is(err, jsontext.ErrDuplicateName) {
		return fmt.Errorf("canonjson: %w: %w; an object may name each key once", ErrDuplicateKey, err)
	}
	return fmt.Errorf("canonjson: %w: %w", ErrInvalidJSON, err)
}

// decodeError returns why data is not exactly one JSON value under opts, or
// nil.
func decodeError(data []byte, opts ...jsontext.Options) error {
	dec := jsontext.NewDecoder(bytes.NewReader(data), opts...)
	if _, err := dec.ReadValue(); err != nil {
		return err
	}
	end := dec.InputOffset()
	switch _, err := dec.ReadToken(); err {
	case io.EOF:
		return nil
	case nil: // the decoder reads a stream of values
		return fmt.Errorf("data after the value that ends at byte %d", end)
	default:
		return err
	}
}

// maxFloat64 is math.MaxFloat64 in canonical form.
const maxFloat64 = "1.7976931348623157e+308"

// checkFloatRange reports a number literal in input (well-formed JSON) that
// has a fraction or an exponent and is beyond the float64 range.
func checkFloatRange(input []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(input), jsontext.AllowDuplicateNames(true))
	for {
		tok, err := dec.ReadToken()
		if err == io.EOF {
			return nil
		}
		if err != nil { // input was canonicalized, so it is well formed
			return fmt.Errorf("canonjson: %w: %w", ErrInvalidJSON, err)
		}
		if tok.Kind() != '0' {
			continue
		}
		lit := tok.String()
		if !strings.ContainsAny(lit, ".eE") {
			continue // integer literals are kept exact, whatever their size
		}
		if _, err := strconv.ParseFloat(lit, 64); err != nil {
			return fmt.Errorf("canonjson: %w: %s before byte %d is beyond the float64 range",
				ErrNumber, lit, dec.InputOffset())
		}
	}
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

// AppendString appends s to dst as a canonical JSON string, as Marshal
// writes it. A string that is not valid UTF-8 is an error (ErrInvalidUTF8).
// With InsertMember it lets a caller encode a large value of a known type
// directly instead of reformatting it through Marshal.
func AppendString(dst []byte, s string) ([]byte, error) {
	if plainASCII(s) { // most strings: nothing to escape or check
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"'), nil
	}
	out, err := jsontext.AppendQuote(dst, s)
	if err != nil {
		return dst, fmt.Errorf("canonjson: %w: %q: %w", ErrInvalidUTF8, s, err)
	}
	return out, nil
}

// InsertMember returns the canonical JSON object obj with the member
// name: value added where its key sorts. obj must be canonical (Marshal's
// output) and without a member name (ErrDuplicateKey otherwise); value must
// be canonical JSON, which is not checked: it is what a caller's direct
// encoder wrote (tests compare it with Marshal), and checking it would cost
// what writing it directly saves.
func InsertMember(obj []byte, name string, value []byte) ([]byte, error) {
	if len(obj) < 2 || obj[0] != '{' || obj[len(obj)-1] != '}' {
		return nil, fmt.Errorf("canonjson: %w: inserting member %q into a value that is not an object", ErrInvalidJSON, name)
	}
	key, err := AppendString(nil, name)
	if err != nil {
		return nil, err
	}
	// Canonicalize places the member (with a null for now) where its key
	// sorts, and refuses it if the object already has one.
	placed := append([]byte{}, obj[:len(obj)-1]...)
	if len(obj) > 2 {
		placed = append(placed, ',')
	}
	placed = append(append(placed, key...), ":null}"...)
	if placed, err = Canonicalize(placed); err != nil {
		return nil, err
	}
	at, err := memberValueAt(placed, name)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(placed)-len("null")+len(value))
	out = append(append(append(out, placed[:at]...), value...), placed[at+len("null"):]...)
	return out, nil
}

// memberValueAt is the offset of the value of the top-level member name in
// the canonical object obj.
func memberValueAt(obj []byte, name string) (int, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.ReadToken(); err != nil {
		return 0, fmt.Errorf("canonjson: %w: %w", ErrInvalidJSON, err)
	}
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return 0, fmt.Errorf("canonjson: %w: %w", ErrInvalidJSON, err)
		}
		if tok.String() == name {
			at := int(dec.InputOffset()) + len(":") // canonical: no whitespace
			if !bytes.HasPrefix(obj[at:], []byte("null")) {
				break
			}
			return at, nil
		}
		if err := dec.SkipValue(); err != nil {
			return 0, fmt.Errorf("canonjson: %w: %w", ErrInvalidJSON, err)
		}
	}
	return 0, fmt.Errorf("canonjson: %w: member %q not found where it was placed", ErrInvalidJSON, name)
}

// plainASCII: s is printable ASCII without '"' or '\\', which a canonical
// string holds as it is.
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
