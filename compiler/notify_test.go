package compiler

import (
	"testing"

	"hookbox.dev/hookbox/internal/config/notifyconf"
)

// The notify block is carried beside the render: it never changes the
// render digest, and a malformed block never fails compilation.
func TestNotifyIsNotInTheRender(t *testing.T) {
	base := digestOf(t, digestBase)
	for _, block := range []string{
		"  notify:\n    argv: [/usr/local/bin/post, '{payload}']\n    timeout: 10s\n    filter: {statuses: [failed]}\n",
		"  notify: {argv: 'post | tee log'}\n",
		"  notify: {enabled: false}\n",
	} {
		if got := digestOf(t, digestBase+block); got != base {
			t.Errorf("notify block %q changed the render digest", block)
		}
	}
}

func TestNotifySetting(t *testing.T) {
	for _, tc := range []struct {
		block, reason string
		argv0         string
	}{
		{"  notify:\n    argv: [/usr/local/bin/post, '{payload}']\n", "", "/usr/local/bin/post"},
		{"  notify: {argv: 'post && echo'}\n", notifyconf.ReasonArgvRefused, ""},
		{"  notify: {argv: [/bin/post, 'x={payload}']}\n", notifyconf.ReasonPlaceholderEmbedded, ""},
		{"  notify: {argv: [/bin/post], colour: red}\n", notifyconf.ReasonConfigInvalid, ""},
	} {
		parsed, err := Parse([]byte(digestBase+tc.block), "spec.yaml", "/src", func(string) ([]byte, error) { return nil, nil })
		if err != nil {
			t.Fatalf("%q: %v", tc.block, err)
		}
		s := NotifySetting(parsed, "digest")
		if !s.Present || s.Source != notifyconf.SourceSpec || s.Reason != tc.reason || (tc.argv0 != "" && s.Argv[0] != tc.argv0) {
			t.Errorf("%q: %+v", tc.block, s)
		}
	}
}
