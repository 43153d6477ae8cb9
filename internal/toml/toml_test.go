package toml

import "testing"

func TestQuote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `""`},
		{"plain", `"plain"`},
		{`say "hi"`, `"say \"hi\""`},
		{`C:\dir\`, `"C:\\dir\\"`},
		{"a\nb\tc\rd", `"a\nb\tc\rd"`},
		{"\x00", `"\u0000"`},
		{"\x1b[31m", `"\u001b[31m"`},
		{"\b\f\x1f", `"\u0008\u000c\u001f"`},
		{"del\x7f", `"del\u007f"`},
		{"/srv/we\"ird\\dir", `"/srv/we\"ird\\dir"`},
		{"café ü 日本 🦀", `"café ü 日本 🦀"`},
		{"\u0080\u2028\ufeff", "\"\u0080\u2028\ufeff\""}, // not TOML control characters
		{"'single'", `"'single'"`},
		{"a\xffb", "\"a\ufffdb\""}, // invalid UTF-8: U+FFFD
	} {
		if got := Quote(tc.in); got != tc.want {
			t.Errorf("Quote(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestQuoteArray(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{nil, `[]`},
		{[]string{}, `[]`},
		{[]string{"-y"}, `["-y"]`},
		{[]string{"--dir", `a "b"`, "x\ny"}, `["--dir", "a \"b\"", "x\ny"]`},
	} {
		if got := QuoteArray(tc.in); got != tc.want {
			t.Errorf("QuoteArray(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
