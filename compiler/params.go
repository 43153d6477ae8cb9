package compiler

// Template slots: pipeline values (a PR number, a git ref) given on the
// command line with `hookbox render --set NAME=VALUE`.
//
// A spec declares its params at the top level (beside spec, or beside items
// in a SpawnList): `params: {pr: {}, ref: {default: main}}`; `{}` is a
// required param. A scalar value whose WHOLE text is a slot, `"{{ pr }}"`
// (quoted: unquoted braces are YAML flow syntax), is replaced by the value,
// as a string, before the spec is decoded, so every later rule (types,
// names, argv checks) applies to the substituted value. A value therefore
// always becomes a whole field or a whole argv element, never part of a
// longer string: a slot inside a longer string is refused, as are slots in
// mapping keys and in params itself. `--set` of an undeclared name and a
// required param without a value are refused too; all problems of a file
// are reported together, with file:line:col.
//
// Text that merely contains braces ("{{ .Name }}", "{{}}") is not a slot
// and is left alone.

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"hookbox.dev/hookbox/render"
)

// ParseOptions change how a spec is read.
type ParseOptions struct {
	// Params are the values of the spec's template slots, by name
	// (hookbox render --set NAME=VALUE). A name the spec does not declare
	// is an error.
	Params map[string]string
	// Lstat, when set, checks at compile time that the workspace and each
	// addDirs entry are directories (not missing, not files, not
	// symlinks). hookbox render and run set it to os.Lstat (HostChecks).
	Lstat func(string) (fs.FileInfo, error)
	// Stat, when set, checks at compile time that each program the spec
	// names (engine.path, tools, hook argv[0]) is, once its symlinks are
	// followed as exec follows them, a regular file that other users may
	// read and execute. hookbox render and run set it to os.Stat
	// (HostChecks).
	Stat func(string) (fs.FileInfo, error)
}

// HostChecks are the options that check the host paths a spec mounts and
// the programs it names.
func HostChecks(params map[string]string) ParseOptions {
	return ParseOptions{Params: params, Lstat: os.Lstat, Stat: os.Stat}
}

// Param is one declared template slot.
type Param struct {
	Default *string `json:"default,omitempty" doc:"Value used when --set gives none. Without a default the param is required."`
}

// paramsField is the top-level key that declares params.
const paramsField = "params"

var (
	// paramName is what a param may be called.
	paramName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
	// slotWhole matches a scalar that is exactly one slot; slotAnywhere, a
	// slot inside longer text. Names are matched loosely so that a badly
	// named slot is reported rather than silently kept as text.
	slotWhole    = regexp.MustCompile(`^\{\{\s*([A-Za-z_][A-Za-z0-9_-]*)\s*\}\}$`)
	slotAnywhere = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_-]*)\s*\}\}`)
)

// ReadFileWithOptions is ReadFile with options (template slot values).
func ReadFileWithOptions(path string, opts ParseOptions) ([]*Parsed, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	return ParseWithOptions(data, path, filepath.Dir(abs), os.ReadFile, opts)
}

// CompileFileWithParams reads, validates and compiles every spawn in a spec
// file, substituting template slot values (nil for none). All problems of
// the file are reported together.
func CompileFileWithParams(file string, params map[string]string) ([]*render.Render, error) {
	return CompileFileWithOptions(file, ParseOptions{Params: params})
}

// CompileFileWithOptions is CompileFileWithParams with every parse option.
func CompileFileWithOptions(file string, opts ParseOptions) ([]*render.Render, error) {
	parsed, err := ReadFileWithOptions(file, opts)
	if err != nil {
		return nil, err
	}
	return CompileAll(parsed)
}

// ParseSetFlags turns NAME=VALUE strings (repeated --set flags) into
// params. The value is everything after the first '='; a repeated name is an
// error, so a pipeline cannot silently override itself.
func ParseSetFlags(flags []string) (map[string]string, error) {
	out := make(map[string]string, len(flags))
	for _, f := range flags {
		name, value, ok := strings.Cut(f, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--set %q: write NAME=VALUE", f)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--set %s is given twice; give each param once", name)
		}
		out[name] = value
	}
	return out, nil
}

// fillParams declares the params of root (a mapping) and substitutes their
// values into every slot of the document. It reports false, with the
// problems in d.diags, when the document cannot be decoded as intended.
func (d *decoder) fillParams(root *yaml.Node, values map[string]string) bool {
	before := len(d.diags.list)
	var paramsNode *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == paramsField {
			paramsNode = root.Content[i+1]
		}
	}

	declared := map[string]Param{}
	if paramsNode != nil {
		d.decodeValue(paramsNode, paramsField, &declared)
		for name := range declared {
			if !paramName.MatchString(name) {
				d.diags.add(d.at(paramsField+"."+name), paramsField+"."+name,
					"use lowercase letters, digits and '_', starting with a letter (at most 63)", "invalid param name %q", name)
			}
		}
		d.refuseSlots(paramsNode, paramsField, "a param's default is a plain value; it cannot use a template slot")
	}
	names := sortedKeys(declared)

	for _, name := range sortedKeys(values) {
		if _, ok := declared[name]; !ok {
			hint := "declare it under params (" + name + ": {} for a required param), or drop the --set"
			if len(names) > 0 {
				hint = "declared params: " + strings.Join(names, ", ")
			}
			d.diags.add(d.at(paramsField), paramsField, hint, "--set %s: the spec declares no param %q", name, name)
		}
	}

	filled := map[string]string{}
	var missing []string
	for _, name := range names {
		switch v, ok := values[name]; {
		case ok:
			filled[name] = v
		case declared[name].Default != nil:
			filled[name] = *declared[name].Default
		default:
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		sets := make([]string, len(missing))
		for i, name := range missing {
			sets[i] = "--set " + name + "=VALUE"
		}
		d.diags.add(d.at(paramsField), paramsField, "pass "+strings.Join(sets, " ")+", or give each a default",
			"required params without a value: %s", strings.Join(missing, ", "))
	}

	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value == paramsField {
			continue
		}
		d.substitute(k, v, joinPath("", k.Value), declared, filled, 0)
	}
	return len(d.diags.list) == before
}

// substitute replaces the slots under value node v (whose key node is k,
// nil in a sequence) and refuses slots that would not be whole values.
func (d *decoder) substitute(k, v *yaml.Node, path string, declared map[string]Param, filled map[string]string, depth int) {
	if k != nil && slotAnywhere.MatchString(k.Value) {
		d.errAt(k, path, "params fill values only; write the key literally", "template slot in a mapping key")
	}
	if depth > maxDepth {
		return // the decoder reports the nesting
	}
	switch v.Kind {
	case yaml.MappingNode:
		if unquotedSlot(v) {
			d.errAt(v, path, `quote it: "{{ name }}" (unquoted braces are a YAML mapping)`, "unquoted template slot")
			return
		}
		for i := 0; i+1 < len(v.Content); i += 2 {
			d.substitute(v.Content[i], v.Content[i+1], joinPath(path, v.Content[i].Value), declared, filled, depth+1)
		}
	case yaml.SequenceNode:
		for i, item := range v.Content {
			d.substitute(nil, item, fmt.Sprintf("%s[%d]", path, i), declared, filled, depth+1)
		}
	case yaml.ScalarNode:
		if m := slotWhole.FindStringSubmatch(v.Value); m != nil {
			name := m[1]
			if _, ok := declared[name]; !ok {
				d.errAt(v, path, "declare it under params ("+name+": {} for a required param)", "template slot {{ %s }} names no declared param", name)
				return
			}
			if value, ok := filled[name]; ok {
				v.Value, v.Tag, v.Style = value, "!!str", yaml.DoubleQuotedStyle
			}
			return
		}
		if m := slotAnywhere.FindStringSubmatch(v.Value); m != nil {
			d.errAt(v, path, "a param fills a whole value: make the slot its own field or argv element",
				"template slot {{ %s }} is part of a longer string", m[1])
		}
	}
	// Aliases are not followed: the anchored node is visited where it is
	// defined, and its substituted value is what every alias sees.
}

// refuseSlots reports every slot under n (used for the params block).
func (d *decoder) refuseSlots(n *yaml.Node, path, hint string) {
	var walk func(n *yaml.Node, path string, depth int)
	walk = func(n *yaml.Node, path string, depth int) {
		if depth > maxDepth {
			return
		}
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(n.Content[i+1], joinPath(path, n.Content[i].Value), depth+1)
			}
		case yaml.SequenceNode:
			for i, item := range n.Content {
				walk(item, fmt.Sprintf("%s[%d]", path, i), depth+1)
			}
		case yaml.ScalarNode:
			if slotAnywhere.MatchString(n.Value) {
				d.errAt(n, path, hint, "template slot in params")
			}
		}
	}
	walk(n, path, 0)
}

// unquotedSlot recognizes what YAML makes of an unquoted {{ name }}: a flow
// mapping whose only key is a flow mapping {name: null}, with a null value.
func unquotedSlot(n *yaml.Node) bool {
	if n.Style&yaml.FlowStyle == 0 || len(n.Content) != 2 {
		return false
	}
	k, v := n.Content[0], n.Content[1]
	if k.Kind != yaml.MappingNode || len(k.Content) != 2 || v.Tag != "!!null" {
		return false
	}
	return k.Content[0].Kind == yaml.ScalarNode && k.Content[1].Tag == "!!null"
}
