package initsecrets

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// Every byte but NUL survives the round trip, "=" and newlines and
// invalid UTF-8 included, and an empty value stays empty.
func TestRoundTrip(t *testing.T) {
	names := []string{"B_KEY", "A_KEY", "EMPTY"}
	values := map[string]string{"B_KEY": "x=y\nz\xff\xfe", "A_KEY": strings.Repeat("k", 200_000), "EMPTY": ""}
	stream, err := Encode(names, values)
	if err != nil {
		t.Fatal(err)
	}
	// One byte per read: entries never depend on how the pipe splits them.
	got, err := Read(iotest.OneByteReader(bytes.NewReader(stream)), names)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if got[n] != values[n] {
			t.Errorf("%s: got %d bytes, want %d", n, len(got[n]), len(values[n]))
		}
	}
}

// Read stops at the last entry: a writer that keeps its end open (the
// shim does) does not make it wait for an end of stream.
func TestReadStopsAtTheLastEntry(t *testing.T) {
	stream, _ := Encode([]string{"K"}, map[string]string{"K": "v"})
	r := io.MultiReader(bytes.NewReader(stream), blockingReader{t})
	got, err := Read(r, []string{"K"})
	if err != nil || got["K"] != "v" {
		t.Fatalf("%q %v", got, err)
	}
}

// blockingReader fails the test if read: it stands for a pipe with no
// more data whose writer is still open.
type blockingReader struct{ t *testing.T }

func (b blockingReader) Read([]byte) (int, error) {
	b.t.Error("read past the last entry")
	return 0, io.EOF
}

// A stream that is short, out of order or cut mid-value is refused, and
// the error names variables only: never a byte of a value.
func TestReadRefusesWithoutValues(t *testing.T) {
	const value = "hbx-sentinel-value"
	names := []string{"A", "B"}
	full, _ := Encode(names, map[string]string{"A": value, "B": value})
	swapped, _ := Encode([]string{"B", "A"}, map[string]string{"A": value, "B": value})
	for _, tc := range []struct {
		name, stream, want string
	}{
		{"empty", "", "ended before the value of A (0 of 2 read)"},
		{"one entry", string(full[:len(value)+3]), "ended before the value of B (1 of 2 read)"},
		{"cut mid-value", string(full[:len(full)-4]), "ended before the value of B (1 of 2 read)"},
		{"other order", string(swapped), "entry 1 of the stream is not A's"},
		{"no name", value + "\x00", "entry 1 of the stream is not A's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tc.stream), names)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "sentinel") {
				t.Errorf("the error shows a value: %v", err)
			}
		})
	}
	t.Run("read error", func(t *testing.T) {
		_, err := Read(iotest.ErrReader(errors.New("i/o timeout")), names)
		if err == nil || !strings.Contains(err.Error(), "reading the value of A: i/o timeout") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("endless", func(t *testing.T) {
		_, err := Read(io.MultiReader(strings.NewReader("A="), zeros{}), names)
		if err == nil || !strings.Contains(err.Error(), "ended before the value of A") {
			t.Fatalf("a stream over MaxStream must end the read: %v", err)
		}
	})
}

// zeros is an endless stream of '0' (not NUL) bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	return len(p), nil
}

func TestEncodeRefuses(t *testing.T) {
	if _, err := Encode([]string{"A"}, map[string]string{}); err == nil || err.Error() != "secret A has no value at launch" {
		t.Errorf("missing value: %v", err)
	}
	_, err := Encode([]string{"A"}, map[string]string{"A": "hbx-sentinel\x00rest"})
	if err == nil || !strings.Contains(err.Error(), "secret A holds a NUL byte") || strings.Contains(err.Error(), "sentinel") {
		t.Errorf("NUL: %v", err)
	}
	_, err = Encode([]string{"A"}, map[string]string{"A": strings.Repeat("x", MaxStream)})
	if err == nil || !strings.Contains(err.Error(), "more than an environment can hold") {
		t.Errorf("oversized: %v", err)
	}
}

func TestExpected(t *testing.T) {
	environ := []string{"PATH=/bin", "S=<resolved at launch>", Variable([]string{"S", "T"}), "T=x"}
	names, rest, err := Expected(environ)
	if err != nil || !slices.Equal(names, []string{"S", "T"}) || !slices.Equal(rest, []string{"PATH=/bin", "S=<resolved at launch>", "T=x"}) {
		t.Fatalf("names %q rest %q err %v", names, rest, err)
	}
	names, rest, err = Expected([]string{"PATH=/bin", "HOME=/h"})
	if err != nil || names != nil || len(rest) != 2 {
		t.Errorf("without %s: names %q rest %q err %v", EnvName, names, rest, err)
	}
	for _, bad := range [][]string{
		{EnvName + "=A,,B"},
		{EnvName + "=A,A"},
		{EnvName + "=A", EnvName + "=B"},
		{EnvName + "=A=B"},
	} {
		if _, _, err := Expected(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

// Apply sets each value in its entry's place and keeps the order; an
// entry of another name that merely starts with the name is not touched.
func TestApply(t *testing.T) {
	environ := []string{"A=1", "S=<resolved at launch>", "SX=2", "T=<resolved at launch>", "B=3"}
	got, err := Apply(environ, map[string]string{"S": "s=v", "T": ""})
	want := []string{"A=1", "S=s=v", "SX=2", "T=", "B=3"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %q err %v, want %q", got, err, want)
	}
	if environ[1] != "S=<resolved at launch>" {
		t.Error("Apply changed its input")
	}
	_, err = Apply([]string{"A=1"}, map[string]string{"S": "hbx-sentinel", "R": "hbx-sentinel"})
	if err == nil || err.Error() != "no entry in the environment for R, S" {
		t.Errorf("missing entries: %v", err)
	}
}
