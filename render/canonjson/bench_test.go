package canonjson

import (
	"encoding/json"
	"os"
	"testing"
)

// goldenRender is a typical render as the compiler's golden test stores it
// (canonical, then indented).
func goldenRender(b *testing.B) []byte {
	data, err := os.ReadFile("../../compiler/testdata/golden/review.json")
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// The Reference variants run the implementation Canonicalize replaced, for
// comparison.

func BenchmarkCanonicalize(b *testing.B)          { benchCanonicalize(b, Canonicalize) }
func BenchmarkCanonicalizeReference(b *testing.B) { benchCanonicalize(b, refCanonicalize) }
func BenchmarkMarshal(b *testing.B)               { benchMarshal(b, Marshal) }
func BenchmarkMarshalReference(b *testing.B)      { benchMarshal(b, refMarshal) }

func benchCanonicalize(b *testing.B, canonicalize func([]byte) ([]byte, error)) {
	data := goldenRender(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := canonicalize(data); err != nil {
			b.Fatal(err)
		}
	}
}

func benchMarshal(b *testing.B, marshal func(any) ([]byte, error)) {
	var v any
	if err := json.Unmarshal(goldenRender(b), &v); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := marshal(v); err != nil {
			b.Fatal(err)
		}
	}
}
