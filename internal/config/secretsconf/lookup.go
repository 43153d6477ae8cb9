package secretsconf

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"hookbox.dev/hookbox/internal/yamlnode"
)

// Placeholder is replaced by the variable name in every argv element after
// argv[0] when the lookup runs.
const Placeholder = "{name}"

const (
	// DefaultTimeout bounds a lookup when the config sets no timeout.
	DefaultTimeout = 10 * time.Second
	// MaxTimeout is the largest timeout the config may set.
	MaxTimeout = 10 * time.Minute
)

// LookupState is what the user's global config says about secret lookup.
type LookupState int

const (
	// NotConfigured: no config file, or no secrets.lookup block in it.
	NotConfigured LookupState = iota
	// Disabled: secrets.lookup.enabled is false.
	Disabled
	// Enabled: a valid lookup command is configured.
	Enabled
	// Refused: secrets or secrets.lookup is malformed; see Lookup.Reason.
	Refused
)

func (s LookupState) String() string {
	switch s {
	case NotConfigured:
		return "not-configured"
	case Disabled:
		return "disabled"
	case Enabled:
		return "enabled"
	case Refused:
		return "refused"
	}
	return "LookupState(" + strconv.Itoa(int(s)) + ")"
}

// Lookup is the secret lookup configuration read from the global config.
type Lookup struct {
	State LookupState
	// Reason is set only when State is Refused. NotConfigured and Disabled
	// carry no reason, so they stay distinguishable from a refusal.
	Reason Refusal
	// Message explains a refusal to a human (only when State is Refused). It
	// never contains a configured value.
	Message string
	// Index is, when State is Refused, the argv position the refusal is
	// about, or -1.
	Index int
	// Argv is the lookup command, only when State is Enabled.
	Argv []string
	// Timeout bounds each lookup, only when State is Enabled (DefaultTimeout
	// unless configured).
	Timeout time.Duration
	// Source is the config file path, for messages.
	Source string
}

// Err returns the refusal as a *RefusedError when State is Refused, else nil.
func (l Lookup) Err() error {
	if l.State != Refused {
		return nil
	}
	return &RefusedError{Reason: l.Reason, Index: l.Index, Source: l.Source, Message: l.Message}
}

// ParseNode reads the value of the global config's top-level secrets key
// (nil when the key is absent); source is the config file's path, used in
// messages only. The document around it is the config loader's to check.
//
// The secrets and secrets.lookup mappings are checked strictly: an unknown
// field is refused rather than ignored, so a typo cannot silently turn the
// lookup off. When enabled is false, argv and timeout are not validated, so
// a half-written lookup can be switched off. A refusal is a state of the
// returned Lookup, not an error, so that a launch that needs no lookup is
// not blocked by it.
func ParseNode(secretsNode *yaml.Node, source string) Lookup {
	if secretsNode == nil {
		return notConfigured(source)
	}
	secretsNode = yamlnode.Deref(secretsNode)
	if secretsNode == nil {
		return refuse(source, RefusalConfigInvalid, -1, "secrets is an unresolved alias")
	}
	if yamlnode.IsNull(secretsNode) {
		return notConfigured(source)
	}
	if secretsNode.Kind != yaml.MappingNode {
		return refuse(source, RefusalConfigInvalid, -1, "secrets must be a mapping (it is "+yamlnode.Describe(secretsNode)+"); the lookup goes under secrets.lookup")
	}
	secretsFields, refusal := fields(secretsNode, "secrets", []string{"lookup"}, source)
	if refusal != nil {
		return *refusal
	}
	lookupNode := secretsFields["lookup"]
	if lookupNode == nil {
		return notConfigured(source)
	}
	if lookupNode.Kind != yaml.MappingNode {
		return refuse(source, RefusalConfigInvalid, -1, "secrets.lookup must be a mapping with argv (and optionally enabled, timeout); it is "+yamlnode.Describe(lookupNode))
	}
	lf, refusal := fields(lookupNode, "secrets.lookup", []string{"enabled", "argv", "timeout"}, source)
	if refusal != nil {
		return *refusal
	}

	if n, ok := lf["enabled"]; ok {
		enabled, isBool := boolValue(n)
		if !isBool {
			return refuse(source, RefusalEnabledNotBool, -1, "secrets.lookup.enabled must be true or false; it is "+yamlnode.Describe(n))
		}
		if !enabled {
			return Lookup{State: Disabled, Source: source}
		}
	}

	argv, bad := argvValue(lf["argv"], source)
	if bad != nil {
		return *bad
	}
	if reason, index, msg := CheckArgv(argv); reason != "" {
		return refuse(source, reason, index, msg)
	}

	timeout := DefaultTimeout
	if n, ok := lf["timeout"]; ok {
		d, msg := timeoutValue(n)
		if msg != "" {
			return refuse(source, RefusalTimeoutInvalid, -1, msg)
		}
		timeout = d
	}
	return Lookup{State: Enabled, Argv: argv, Timeout: timeout, Source: source}
}

func notConfigured(source string) Lookup {
	return Lookup{State: NotConfigured, Source: source}
}

func refuse(source string, reason Refusal, index int, msg string) Lookup {
	return Lookup{State: Refused, Reason: reason, Index: index, Message: msg, Source: source}
}

// fields collects the known fields of a mapping owned by this package. Null
// values count as absent for "lookup" only; callers see the node otherwise.
// An unknown key is reported by position, never by text: it may be a value
// pasted into the wrong place.
func fields(m *yaml.Node, path string, known []string, source string) (map[string]*yaml.Node, *Lookup) {
	out := make(map[string]*yaml.Node, len(known))
	lines := make(map[string]int, len(known))
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := yamlnode.Deref(m.Content[i])
		if k == nil || k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			what := "an unresolved alias"
			line, col := m.Content[i].Line, m.Content[i].Column
			if k != nil {
				what = yamlnode.Describe(k)
			}
			r := refuse(source, RefusalUnknownField, -1, fmt.Sprintf("%s has a key at line %d, column %d that is %s, not a field name; allowed fields: %s", path, line, col, what, strings.Join(known, ", ")))
			return nil, &r
		}
		if !slices.Contains(known, k.Value) {
			r := refuse(source, RefusalUnknownField, -1, fmt.Sprintf("%s has an unknown field at line %d, column %d; allowed fields: %s", path, k.Line, k.Column, strings.Join(known, ", ")))
			return nil, &r
		}
		if first, dup := lines[k.Value]; dup {
			r := refuse(source, RefusalConfigInvalid, -1, fmt.Sprintf("%s.%s is given twice (lines %d and %d); keep one", path, k.Value, first, k.Line))
			return nil, &r
		}
		v := yamlnode.Deref(m.Content[i+1])
		if v == nil {
			r := refuse(source, RefusalConfigInvalid, -1, fmt.Sprintf("%s.%s is an unresolved alias", path, k.Value))
			return nil, &r
		}
		lines[k.Value] = k.Line
		if k.Value == "lookup" && yamlnode.IsNull(v) {
			continue // "lookup:" with everything commented out
		}
		out[k.Value] = v
	}
	return out, nil
}

// argvValue extracts argv as strings. Elements that are not plain strings are
// reported by position and type only.
func argvValue(n *yaml.Node, source string) ([]string, *Lookup) {
	if n == nil || yamlnode.IsNull(n) {
		r := refuse(source, RefusalArgvEmpty, -1, `secrets.lookup.argv is missing; give the lookup command as a list, e.g. argv: ["/usr/bin/pass", "show", "hookbox/{name}"]`)
		return nil, &r
	}
	if n.Kind != yaml.SequenceNode {
		r := refuse(source, RefusalArgvNotList, -1, "secrets.lookup.argv is "+yamlnode.Describe(n)+`; the lookup command is an argv list, never a string: write argv: ["/usr/bin/pass", "show", "hookbox/{name}"]`)
		return nil, &r
	}
	argv := make([]string, 0, len(n.Content))
	for i, e := range n.Content {
		e = yamlnode.Deref(e)
		if e == nil || e.Kind != yaml.ScalarNode || e.ShortTag() != "!!str" {
			what := "an unresolved alias"
			if e != nil {
				what = yamlnode.Describe(e)
			}
			r := refuse(source, RefusalArgvElementNotString, i, fmt.Sprintf("secrets.lookup.argv[%d] is %s; every argv element must be a string (quote it)", i, what))
			return nil, &r
		}
		argv = append(argv, e.Value)
	}
	return argv, nil
}

// CheckArgv validates a lookup argv. It is shared by the parser and the
// resolver, because a Lookup can also be built in code.
func CheckArgv(argv []string) (reason Refusal, index int, msg string) {
	if len(argv) == 0 {
		return RefusalArgvEmpty, -1, `secrets.lookup.argv is empty; give the lookup command as a list, e.g. argv: ["/usr/bin/pass", "show", "hookbox/{name}"]`
	}
	if argv[0] == "" {
		return RefusalArgvEmpty, 0, "secrets.lookup.argv[0] is an empty string; it must name the lookup program"
	}
	if strings.Contains(argv[0], Placeholder) {
		return RefusalArgv0HasPlaceholder, 0, "secrets.lookup.argv[0] contains {name}; the program is fixed, only its arguments may carry the variable name"
	}
	if strings.Contains(argv[0], "/") && !filepath.IsAbs(argv[0]) {
		return RefusalArgv0Relative, 0, "secrets.lookup.argv[0] is a relative path; use an absolute path or a bare program name found on PATH (~ is not expanded)"
	}
	for _, a := range argv[1:] {
		if strings.Contains(a, Placeholder) {
			return "", -1, ""
		}
	}
	return RefusalPlaceholderMissing, -1, "no argument after secrets.lookup.argv[0] contains {name}; at least one must, so the lookup knows which variable to read"
}

// timeoutValue parses the timeout field. The message never repeats the text.
func timeoutValue(n *yaml.Node) (time.Duration, string) {
	const want = "; write a Go duration greater than 0 and at most 10m, e.g. timeout: 10s"
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return 0, "secrets.lookup.timeout is " + yamlnode.Describe(n) + want
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return 0, "secrets.lookup.timeout is not a valid duration" + want
	}
	if d <= 0 || d > MaxTimeout {
		return 0, "secrets.lookup.timeout is out of range" + want
	}
	return d, ""
}

func boolValue(n *yaml.Node) (value, ok bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		return false, false
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		return false, false
	}
	return b, true
}
