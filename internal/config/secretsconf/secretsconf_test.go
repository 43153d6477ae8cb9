package secretsconf

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"hookbox.dev/hookbox/internal/yamlnode"
)

// parseLookup hands ParseNode the secrets block of a config document as the
// config loader does; the document's other keys are the loader's to check.
func parseLookup(data []byte, source string) Lookup {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return ParseNode(nil, source)
	}
	root := yamlnode.Deref(doc.Content[0])
	if root == nil || root.Kind != yaml.MappingNode {
		return ParseNode(nil, source)
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "secrets" {
			return ParseNode(root.Content[i+1], source)
		}
	}
	return ParseNode(nil, source)
}

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"ANTHROPIC_API_KEY", true},
		{"_", true},
		{"_x9", true},
		{"a", true},
		{"Mixed_Case_123", true},
		{strings.Repeat("A", MaxNameLen), true},
		{strings.Repeat("A", MaxNameLen+1), false},
		{"", false},
		{"1ABC", false},
		{"API-KEY", false},
		{"API KEY", false},
		{"API.KEY", false},
		{"A=B", false},
		{"KEY\x00", false},
		{"ÄPI_KEY", false},
		{"KEY_ÿ", false},
		{"{name}", false},
	}
	for _, tt := range tests {
		if got := ValidName(tt.name); got != tt.want {
			t.Errorf("ValidName(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestCheckNames(t *testing.T) {
	long := strings.Repeat("B", MaxNameLen+100)
	tests := []struct {
		desc   string
		names  []string
		reason Refusal // empty: accepted
		index  int
		quoted string // must appear in the message
	}{
		{desc: "nil block", names: nil},
		{desc: "valid", names: []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "_X"}},
		{desc: "case differs", names: []string{"key", "KEY"}},
		{desc: "leading digit", names: []string{"GOOD", "9LIVES"}, reason: RefusalNameInvalid, index: 1, quoted: `"9LIVES"`},
		{desc: "dash", names: []string{"API-KEY"}, reason: RefusalNameInvalid, index: 0, quoted: `"API-KEY"`},
		{desc: "empty", names: []string{"A", "B", ""}, reason: RefusalNameInvalid, index: 2, quoted: `""`},
		{desc: "unicode", names: []string{"CLÉ"}, reason: RefusalNameInvalid, index: 0, quoted: strconv.Quote("CLÉ")},
		{desc: "control char", names: []string{"A\nB"}, reason: RefusalNameInvalid, index: 0, quoted: `"A\nB"`},
		{desc: "too long", names: []string{long}, reason: RefusalNameInvalid, index: 0, quoted: strconv.Quote(long[:64])},
		{desc: "duplicate", names: []string{"A", "B", "A"}, reason: RefusalNameDuplicate, index: 2, quoted: `"A"`},
		{desc: "bad among good is total", names: []string{"A", "B", "C-D", "E"}, reason: RefusalNameInvalid, index: 2, quoted: `"C-D"`},
		{desc: "first problem wins", names: []string{"A", "A", "1"}, reason: RefusalNameDuplicate, index: 1, quoted: `"A"`},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			err := CheckNames(tt.names)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("CheckNames(%q) = %v, want nil", tt.names, err)
				}
				return
			}
			var re *RefusedError
			if !errors.As(err, &re) {
				t.Fatalf("CheckNames(%q) = %v, want *RefusedError", tt.names, err)
			}
			if re.Reason != tt.reason || re.Index != tt.index {
				t.Errorf("reason, index = %s, %d; want %s, %d", re.Reason, re.Index, tt.reason, tt.index)
			}
			msg := err.Error()
			if !strings.Contains(msg, fmt.Sprintf("secrets[%d]", tt.index)) || !strings.Contains(msg, tt.quoted) {
				t.Errorf("message %q should name secrets[%d] and %s", msg, tt.index, tt.quoted)
			}
			if tt.reason == RefusalNameInvalid && !strings.Contains(msg, "letters, digits and underscores") {
				t.Errorf("message %q should say what a valid name looks like", msg)
			}
			if strings.Contains(msg, long) {
				t.Errorf("message repeats an over-long name in full")
			}
		})
	}
}

func TestParseLookupRefusals(t *testing.T) {
	tests := []struct {
		desc   string
		yaml   string
		reason Refusal
		index  int
		want   string // substring of Message
	}{
		{"secrets not mapping", "secrets: [ANTHROPIC_API_KEY]\n", RefusalConfigInvalid, -1, "secrets must be a mapping"},
		{"lookup not mapping", "secrets:\n  lookup: [a, '{name}']\n", RefusalConfigInvalid, -1, "secrets.lookup must be a mapping"},
		{"duplicate field", "secrets:\n  lookup:\n    argv: [a, '{name}']\n    argv: [b, '{name}']\n", RefusalConfigInvalid, -1, "secrets.lookup.argv is given twice"},
		{"unknown lookup field", "secrets:\n  lookup:\n    argv: [a, '{name}']\n    tiemout: 1s\n", RefusalUnknownField, -1, "line 4, column 5"},
		{"unknown secrets field", "secrets:\n  lookpu:\n    argv: [a, '{name}']\n", RefusalUnknownField, -1, "allowed fields: lookup"},
		{"non-string key", "secrets:\n  lookup:\n    1: x\n", RefusalUnknownField, -1, "an integer"},
		{"merge key", "secrets:\n  lookup:\n    <<: {argv: [a, '{name}']}\n", RefusalUnknownField, -1, "merge key"},
		{"argv string", "secrets:\n  lookup:\n    argv: pass show {name}\n", RefusalArgvNotList, -1, "never a string"},
		{"argv mapping", "secrets:\n  lookup:\n    argv: {a: b}\n", RefusalArgvNotList, -1, "a mapping"},
		{"argv int", "secrets:\n  lookup:\n    argv: 3\n", RefusalArgvNotList, -1, "an integer"},
		{"argv missing", "secrets:\n  lookup:\n    timeout: 5s\n", RefusalArgvEmpty, -1, "missing"},
		{"argv null", "secrets:\n  lookup:\n    argv:\n", RefusalArgvEmpty, -1, "missing"},
		{"argv empty", "secrets:\n  lookup:\n    argv: []\n", RefusalArgvEmpty, -1, "empty"},
		{"argv0 empty", "secrets:\n  lookup:\n    argv: ['', '{name}']\n", RefusalArgvEmpty, 0, "argv[0]"},
		{"argv element mapping", "secrets:\n  lookup:\n    argv: [pass, show, {a: b}]\n", RefusalArgvElementNotString, 2, "argv[2] is a mapping"},
		{"argv element int", "secrets:\n  lookup:\n    argv: [pass, 1, '{name}']\n", RefusalArgvElementNotString, 1, "argv[1] is an integer"},
		{"argv element null", "secrets:\n  lookup:\n    argv: [pass, ~]\n", RefusalArgvElementNotString, 1, "argv[1] is null"},
		{"argv element custom tag", "secrets:\n  lookup:\n    argv: [!x pass, '{name}']\n", RefusalArgvElementNotString, 0, "custom tag"},
		{"argv0 placeholder", "secrets:\n  lookup:\n    argv: ['/bin/{name}', '{name}']\n", RefusalArgv0HasPlaceholder, 0, "argv[0] contains {name}"},
		{"argv0 relative", "secrets:\n  lookup:\n    argv: [bin/pass, '{name}']\n", RefusalArgv0Relative, 0, "relative path"},
		{"argv0 tilde", "secrets:\n  lookup:\n    argv: [~/bin/pass, '{name}']\n", RefusalArgv0Relative, 0, "relative path"},
		{"placeholder missing", "secrets:\n  lookup:\n    argv: [/usr/bin/pass, show]\n", RefusalPlaceholderMissing, -1, "{name}"},
		{"placeholder missing, argv0 only", "secrets:\n  lookup:\n    argv: [/usr/bin/pass]\n", RefusalPlaceholderMissing, -1, "{name}"},
		{"enabled string", "secrets:\n  lookup:\n    enabled: \"true\"\n    argv: [a, '{name}']\n", RefusalEnabledNotBool, -1, "a string"},
		{"enabled yes", "secrets:\n  lookup:\n    enabled: yes\n    argv: [a, '{name}']\n", RefusalEnabledNotBool, -1, "true or false"},
		{"enabled int", "secrets:\n  lookup:\n    enabled: 1\n    argv: [a, '{name}']\n", RefusalEnabledNotBool, -1, "an integer"},
		{"enabled null", "secrets:\n  lookup:\n    enabled:\n    argv: [a, '{name}']\n", RefusalEnabledNotBool, -1, "null"},
		{"timeout int", "secrets:\n  lookup:\n    argv: [a, '{name}']\n    timeout: 10\n", RefusalTimeoutInvalid, -1, "an integer"},
		{"timeout text", "secrets:\n  lookup:\n    argv: [a, '{name}']\n    timeout: soon\n", RefusalTimeoutInvalid, -1, "not a valid duration"},
		{"timeout zero", "secrets:\n  lookup:\n    argv: [a, '{name}']\n    timeout: 0s\n", RefusalTimeoutInvalid, -1, "out of range"},
		{"timeout negative", "secrets:\n  lookup:\n    argv: [a, '{name}']\n    timeout: -1s\n", RefusalTimeoutInvalid, -1, "out of range"},
		{"timeout too long", "secrets:\n  lookup:\n    argv: [a, '{name}']\n    timeout: 10m1s\n", RefusalTimeoutInvalid, -1, "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			l := parseLookup([]byte(tt.yaml), "/cfg.yaml")
			if l.State != Refused || l.Reason != tt.reason || l.Index != tt.index {
				t.Fatalf("got state %s reason %q index %d (%s); want refused %q index %d", l.State, l.Reason, l.Index, l.Message, tt.reason, tt.index)
			}
			if l.Argv != nil || l.Timeout != 0 {
				t.Errorf("refused lookup carries argv %q / timeout %v; refusal must be total", l.Argv, l.Timeout)
			}
			if !strings.Contains(l.Message, tt.want) {
				t.Errorf("Message %q lacks %q", l.Message, tt.want)
			}
			var re *RefusedError
			if err := l.Err(); !errors.As(err, &re) || re.Reason != tt.reason {
				t.Fatalf("Err() = %v, want *RefusedError %s", err, tt.reason)
			}
			if msg := l.Err().Error(); !strings.Contains(msg, "/cfg.yaml") || !strings.Contains(msg, string(tt.reason)) {
				t.Errorf("Err() %q should name the file and the reason", msg)
			}
		})
	}
}

func TestParseLookupNotConfiguredAndDisabled(t *testing.T) {
	tests := []struct {
		desc string
		yaml string
		want LookupState
	}{
		{"empty file", "", NotConfigured},
		{"comments only", "# nothing here\n", NotConfigured},
		{"null document", "~\n", NotConfigured},
		{"no secrets key", "engine: claude\n", NotConfigured},
		{"secrets null", "secrets:\n", NotConfigured},
		{"secrets empty", "secrets: {}\n", NotConfigured},
		{"lookup null", "secrets:\n  lookup:\n", NotConfigured},
		{"disabled", "secrets:\n  lookup:\n    enabled: false\n    argv: [/usr/bin/pass, show, 'hookbox/{name}']\n", Disabled},
		{"disabled with unfinished argv", "secrets:\n  lookup:\n    enabled: false\n    argv: pass show\n", Disabled},
		{"disabled only", "secrets:\n  lookup:\n    enabled: false\n", Disabled},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			l := parseLookup([]byte(tt.yaml), "/cfg.yaml")
			if l.State != tt.want {
				t.Fatalf("state = %s (%s %s), want %s", l.State, l.Reason, l.Message, tt.want)
			}
			if l.Reason != "" || l.Message != "" || l.Err() != nil {
				t.Errorf("%s must carry no reason; got %q %q", l.State, l.Reason, l.Message)
			}
			if l.Argv != nil {
				t.Errorf("%s carries argv %q", l.State, l.Argv)
			}
			if l.Source != "/cfg.yaml" {
				t.Errorf("Source = %q", l.Source)
			}
		})
	}
}

func TestParseLookupEnabled(t *testing.T) {
	tests := []struct {
		desc    string
		yaml    string
		argv    []string
		timeout time.Duration
	}{
		{"default timeout", "secrets:\n  lookup:\n    argv: [\"/usr/bin/pass\", \"show\", \"hookbox/{name}\"]\n",
			[]string{"/usr/bin/pass", "show", "hookbox/{name}"}, DefaultTimeout},
		{"explicit", "other: 1\nsecrets:\n  lookup:\n    enabled: true\n    argv:\n      - pass\n      - '{name}'\n    timeout: 1m30s\n",
			[]string{"pass", "{name}"}, 90 * time.Second},
		{"max timeout", "secrets:\n  lookup:\n    argv: [op, read, 'op://v/{name}/x']\n    timeout: 10m\n",
			[]string{"op", "read", "op://v/{name}/x"}, MaxTimeout},
		{"alias", "base: &cmd [/bin/lookup, '{name}']\nsecrets:\n  lookup:\n    argv: *cmd\n",
			[]string{"/bin/lookup", "{name}"}, DefaultTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			l := parseLookup([]byte(tt.yaml), "/cfg.yaml")
			if l.State != Enabled {
				t.Fatalf("state = %s (%s: %s), want enabled", l.State, l.Reason, l.Message)
			}
			if fmt.Sprint(l.Argv) != fmt.Sprint(tt.argv) || len(l.Argv) != len(tt.argv) {
				t.Errorf("argv = %q, want %q", l.Argv, tt.argv)
			}
			if l.Timeout != tt.timeout {
				t.Errorf("timeout = %v, want %v", l.Timeout, tt.timeout)
			}
			if l.Reason != "" || l.Message != "" {
				t.Errorf("enabled lookup carries reason %q %q", l.Reason, l.Message)
			}
		})
	}
}
