package compiler

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"hookbox.dev/hookbox/internal/yamlnode"
)

// decoder walks a YAML node tree into spec types, recording the position of
// every value by field path and collecting every problem instead of stopping
// at the first. It exists because strict decoding with positions, a field
// path and a fix for each error is more than yaml.v3's Decode offers.
type decoder struct {
	diags *diagnostics
	pos   map[string]Pos
	// aliases counts alias expansions: a spec could otherwise expand
	// exponentially ("billion laughs") or loop through a self-reference.
	aliases int
	// depth is the current nesting, bounded for the same reason.
	depth int
}

const (
	maxAliasExpansions = 1000
	maxDepth           = 64
)

// deref follows an alias node within the expansion budget; ok is false
// (and the problem reported) when the budget is exhausted.
func (d *decoder) deref(n *yaml.Node, path string) (*yaml.Node, bool) {
	for n.Kind == yaml.AliasNode {
		d.aliases++
		if d.aliases > maxAliasExpansions || n.Alias == nil {
			d.errAt(n, path, "write the values out instead of aliasing them", "too many YAML alias expansions")
			return nil, false
		}
		n = n.Alias
	}
	if d.depth > maxDepth {
		d.errAt(n, path, "flatten the document", "nesting deeper than %d levels", maxDepth)
		return nil, false
	}
	return n, true
}

func nodePos(n *yaml.Node) Pos { return Pos{Line: n.Line, Column: n.Column} }

func (d *decoder) errAt(n *yaml.Node, path, hint, format string, args ...any) {
	d.diags.add(nodePos(n), path, hint, format, args...)
}

func (d *decoder) typeErr(n *yaml.Node, path, want string) {
	hint := ""
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		hint = "give a value or remove the field"
	} else if want == "a string" && n.Kind == yaml.ScalarNode {
		hint = "quote the value to make it a string"
	}
	d.errAt(n, path, hint, "expected %s, got %s", want, yamlnode.Describe(n))
}

func (d *decoder) expectScalar(n *yaml.Node, path, want string) bool {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.typeErr(n, path, want)
		return false
	}
	return true
}

// decodeValue decodes n into the value pointed to by ptr.
func (d *decoder) decodeValue(n *yaml.Node, path string, ptr any) {
	d.decode(n, path, reflect.ValueOf(ptr).Elem())
}

func (d *decoder) decode(n *yaml.Node, path string, v reflect.Value) {
	n, ok := d.deref(n, path)
	if !ok {
		return
	}
	d.depth++
	defer func() { d.depth-- }()
	d.pos[path] = nodePos(n)
	if v.CanAddr() {
		if u, ok := v.Addr().Interface().(nodeDecoder); ok {
			u.decodeNode(d, n, path)
			return
		}
	}
	switch v.Kind() {
	case reflect.Pointer:
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			d.errAt(n, path, "remove the field to leave it unset, or write {} or [] for an explicitly empty value", "null is ambiguous here")
			return
		}
		nv := reflect.New(v.Type().Elem())
		d.decode(n, path, nv.Elem())
		v.Set(nv)
	case reflect.Struct:
		d.decodeStruct(n, path, v)
	case reflect.Map:
		d.decodeMap(n, path, v)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.typeErr(n, path, "a list")
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.decode(item, fmt.Sprintf("%s[%d]", path, i), s.Index(i))
		}
		v.Set(s)
	case reflect.String:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			d.typeErr(n, path, "a string")
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			d.typeErr(n, path, "a boolean (true or false)")
			return
		}
		b, _ := strconv.ParseBool(n.Value)
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			d.typeErr(n, path, "an integer")
			return
		}
		i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err != nil || (v.Kind() == reflect.Int && (i > math.MaxInt32 || i < math.MinInt32)) {
			d.errAt(n, path, "", "integer %s is out of range", n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Interface:
		if val, ok := d.anyValue(n, path); ok {
			if val != nil {
				v.Set(reflect.ValueOf(val))
			}
		}
	default:
		d.errAt(n, path, "", "internal error: cannot decode into %s", v.Type())
	}
}

// mappingPairs checks that n is a mapping with string keys and no duplicates
// and returns its key and value nodes.
func (d *decoder) mappingPairs(n *yaml.Node, path string) (keys, values []*yaml.Node, ok bool) {
	if n.Kind != yaml.MappingNode {
		d.typeErr(n, path, "a mapping")
		return nil, nil, false
	}
	seen := map[string]Pos{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || (k.Tag != "!!str" && k.Tag != "!!int" && k.Tag != "!!bool") {
			d.errAt(k, path, "keys must be plain strings", "mapping key %d is %s", i/2, yamlnode.Describe(k))
			continue
		}
		if k.Value == "<<" {
			d.errAt(k, path, "write the fields out; merge keys are not supported", "YAML merge key << is not supported")
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errAt(k, joinPath(path, k.Value), "remove one of them", "duplicate key %q (first at line %d:%d)", k.Value, first.Line, first.Column)
			continue
		}
		seen[k.Value] = nodePos(k)
		keys = append(keys, k)
		values = append(values, val)
	}
	return keys, values, true
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// fieldIndex maps the json names of a struct type's fields to their index.
func fieldIndex(t reflect.Type) (map[string]int, []string) {
	idx := map[string]int{}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		idx[name] = i
		names = append(names, name)
	}
	return idx, names
}

func (d *decoder) decodeStruct(n *yaml.Node, path string, v reflect.Value) {
	keys, values, ok := d.mappingPairs(n, path)
	if !ok {
		return
	}
	idx, names := fieldIndex(v.Type())
	for i, k := range keys {
		fi, known := idx[k.Value]
		if !known {
			d.errAt(k, joinPath(path, k.Value), unknownFieldHint(k.Value, names), "unknown field %q", k.Value)
			continue
		}
		d.decode(values[i], joinPath(path, k.Value), v.Field(fi))
	}
}

func (d *decoder) decodeMap(n *yaml.Node, path string, v reflect.Value) {
	keys, values, ok := d.mappingPairs(n, path)
	if !ok {
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(keys))
	for i, k := range keys {
		elem := reflect.New(v.Type().Elem()).Elem()
		d.decode(values[i], joinPath(path, k.Value), elem)
		m.SetMapIndex(reflect.ValueOf(k.Value), elem)
	}
	v.Set(m)
}

// anyValue decodes free-form data (scripted print steps) into plain Go
// values that encoding/json writes deterministically.
func (d *decoder) anyValue(n *yaml.Node, path string) (any, bool) {
	n, ok := d.deref(n, path)
	if !ok {
		return nil, false
	}
	d.depth++
	defer func() { d.depth-- }()
	switch n.Kind {
	case yaml.MappingNode:
		keys, values, ok := d.mappingPairs(n, path)
		if !ok {
			return nil, false
		}
		m := make(map[string]any, len(keys))
		for i, k := range keys {
			val, ok := d.anyValue(values[i], joinPath(path, k.Value))
			if !ok {
				return nil, false
			}
			m[k.Value] = val
		}
		return m, true
	case yaml.SequenceNode:
		list := make([]any, 0, len(n.Content))
		for i, item := range n.Content {
			val, ok := d.anyValue(item, fmt.Sprintf("%s[%d]", path, i))
			if !ok {
				return nil, false
			}
			list = append(list, val)
		}
		return list, true
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			return n.Value, true
		case "!!bool":
			b, _ := strconv.ParseBool(n.Value)
			return b, true
		case "!!null":
			return nil, true
		case "!!int":
			i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
			if err != nil {
				d.errAt(n, path, "quote it to keep it as text", "integer %s is out of range", n.Value)
				return nil, false
			}
			return i, true
		}
		d.errAt(n, path, "quote it to keep it as text; only strings, integers, booleans, lists and mappings are accepted here", "unsupported value of type %s", strings.TrimPrefix(n.Tag, "!!"))
		return nil, false
	}
	d.typeErr(n, path, "a value")
	return nil, false
}

// unknownFieldHint suggests the closest known field name.
func unknownFieldHint(got string, names []string) string {
	best, bestDist := "", 3
	for _, name := range names {
		dist := editDistance(strings.ToLower(got), strings.ToLower(name))
		if dist < bestDist {
			best, bestDist = name, dist
		}
	}
	if best != "" {
		return fmt.Sprintf("did you mean %q?", best)
	}
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	return "known fields: " + strings.Join(sorted, ", ")
}

func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
