package secretsconf

import (
	"fmt"
	"strconv"
)

// MaxNameLen is the longest secret name ValidName accepts, in bytes.
const MaxNameLen = 256

// Refusal is a stable machine-readable reason for refusing configuration.
// Its string values are part of hookbox's interface: never rename them.
type Refusal string

// Refusals of the spec's secret names (CheckNames).
const (
	// RefusalNameInvalid: a name is not ^[A-Za-z_][A-Za-z0-9_]*$ or is longer
	// than MaxNameLen bytes.
	RefusalNameInvalid Refusal = "name-invalid"
	// RefusalNameDuplicate: a name appears more than once.
	RefusalNameDuplicate Refusal = "name-duplicate"
)

// Refusals of the global config's secrets block (ParseNode).
const (
	// RefusalConfigInvalid: secrets or secrets.lookup is not a mapping, or
	// a field is given twice. (A file that is not one YAML mapping is the
	// config loader's error, not a refusal.)
	RefusalConfigInvalid Refusal = "config-invalid"
	// RefusalUnknownField: secrets or secrets.lookup has a field this version
	// does not know (or a key that is not a string).
	RefusalUnknownField Refusal = "unknown-field"
	// RefusalArgvNotList: argv is a string or anything else but a sequence.
	// The lookup command is an argv list, never a string.
	RefusalArgvNotList Refusal = "argv-not-list"
	// RefusalArgvEmpty: argv is missing, null or empty, or argv[0] is "".
	RefusalArgvEmpty Refusal = "argv-empty"
	// RefusalArgvElementNotString: an argv element is not a plain string.
	RefusalArgvElementNotString Refusal = "argv-element-not-string"
	// RefusalArgv0HasPlaceholder: argv[0] contains {name}.
	RefusalArgv0HasPlaceholder Refusal = "argv0-has-placeholder"
	// RefusalArgv0Relative: argv[0] is a relative path containing a slash
	// (including "~/..."), which would resolve against the working directory —
	// typically a repository. Use an absolute path or a bare program name
	// found on PATH.
	RefusalArgv0Relative Refusal = "argv0-relative"
	// RefusalPlaceholderMissing: no argument after argv[0] contains {name}.
	RefusalPlaceholderMissing Refusal = "placeholder-missing"
	// RefusalEnabledNotBool: enabled is not true or false.
	RefusalEnabledNotBool Refusal = "enabled-not-bool"
	// RefusalTimeoutInvalid: timeout is not a Go duration string in
	// (0, MaxTimeout].
	RefusalTimeoutInvalid Refusal = "timeout-invalid"
)

// RefusedError reports refused configuration: the spec's secret names or the
// global config's secrets.lookup block. Message never contains a configured
// value (secret names, which are keys, may be quoted).
type RefusedError struct {
	Reason Refusal
	// Index is the position of the offending entry (a name in the secrets
	// block, or an argv element), or -1 when the refusal is not about one
	// entry.
	Index int
	// Source is the config file the refusal is about; empty for spec names.
	Source  string
	Message string
}

func (e *RefusedError) Error() string {
	where := "spec secrets"
	if e.Source != "" {
		where = e.Source
	}
	return fmt.Sprintf("%s: %s (refused: %s)", where, e.Message, e.Reason)
}

// ValidName reports whether name is a usable environment variable name:
// ^[A-Za-z_][A-Za-z0-9_]*$ and at most MaxNameLen bytes.
func ValidName(name string) bool {
	if name == "" || len(name) > MaxNameLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// CheckNames validates the spec's secret names as a block. Refusal is total:
// one invalid or duplicated name rejects the whole block, and the caller must
// use none of them. The first offending entry (in order) is reported by its
// 0-based index. Names are case-sensitive, as environment variables are.
func CheckNames(names []string) error {
	seen := make(map[string]int, len(names))
	for i, name := range names {
		if !ValidName(name) {
			return &RefusedError{
				Reason:  RefusalNameInvalid,
				Index:   i,
				Message: fmt.Sprintf("secrets[%d] = %s is not a valid environment variable name; a name is ASCII letters, digits and underscores, does not start with a digit and is at most %d bytes (e.g. ANTHROPIC_API_KEY); the whole secrets block is refused", i, quoteName(name), MaxNameLen),
			}
		}
		if first, dup := seen[name]; dup {
			return &RefusedError{
				Reason:  RefusalNameDuplicate,
				Index:   i,
				Message: fmt.Sprintf("secrets[%d] = %q repeats secrets[%d]; name each secret once; the whole secrets block is refused", i, name, first),
			}
		}
		seen[name] = i
	}
	return nil
}

// quoteName quotes an invalid name for a message. An over-long name is cut so
// that one bad entry cannot flood the error.
func quoteName(name string) string {
	const shown = 64
	if len(name) <= shown {
		return strconv.Quote(name)
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(name[:shown]), len(name))
}
