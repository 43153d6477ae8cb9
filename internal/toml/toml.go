// Package toml owns writing TOML string values for the configuration files
// hookbox generates (the Codex config, the managed containerd's
// config.toml). It quotes; it does not parse TOML or build documents.
package toml

import (
	"strconv"
	"strings"
)

// Quote returns s as a TOML basic string: "…" with the quotation mark,
// the backslash and every control character (U+0000 to U+001F, U+007F)
// escaped, \n \t \r short and the others as \u00XX; everything else, all
// of Unicode included, as is. The result is valid TOML only for valid
// UTF-8: an invalid byte comes out as U+FFFD, so callers that must keep
// bytes exact (paths) refuse non-UTF-8 input before quoting.
func Quote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			b.WriteString(`\u` + strconv.FormatInt(int64(r)+0x10000, 16)[1:])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// QuoteArray returns items as a TOML array of basic strings on one line:
// ["a", "b"], or [] when there are none.
func QuoteArray(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = Quote(s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}
