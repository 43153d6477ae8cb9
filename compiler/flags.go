package compiler

import (
	"fmt"

	"hookbox.dev/hookbox/render/canonjson"
)

// flagKind is how a spec field becomes argv (docs/contracts.md §6).
// Engines declare their flags as a table of these; nothing assembles argv
// by hand.
type flagKind int

const (
	// flagValue: --flag VALUE; omitted when the value is "".
	flagValue flagKind = iota
	// flagBool: --flag when true, omitted when false.
	flagBool
	// flagBoolPair: --flag when true, the negated flag when false, omitted when unset (nil).
	flagBoolPair
	// flagListArgs: one flag followed by every value; omitted when empty.
	flagListArgs
	// flagJSONValue: a map or list serialized as one canonical JSON argument; omitted when nil.
	flagJSONValue
	// flagRepeat: the flag repeated once per value.
	flagRepeat
)

func (k flagKind) String() string {
	return [...]string{"value", "bool", "bool_pair", "list_args", "json_value", "repeat"}[k]
}

// engineFlag is one row of an engine's flag table. value returns, by kind:
// string (value, and repeat's items via []string), bool, *bool, []string, any.
type engineFlag struct {
	kind    flagKind
	name    string
	negated string // bool_pair's false form, e.g. --no-sandbox
	value   func(c *compilation) any
}

type flagTable []engineFlag

// argv renders the table in order.
func (t flagTable) argv(c *compilation) ([]string, error) {
	var out []string
	for _, f := range t {
		v := f.value(c)
		switch f.kind {
		case flagValue:
			s, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("flag %s: value kind needs a string, got %T", f.name, v)
			}
			if s != "" {
				out = append(out, f.name, s)
			}
		case flagBool:
			b, ok := v.(bool)
			if !ok {
				return nil, fmt.Errorf("flag %s: bool kind needs a bool, got %T", f.name, v)
			}
			if b {
				out = append(out, f.name)
			}
		case flagBoolPair:
			b, ok := v.(*bool)
			if !ok {
				return nil, fmt.Errorf("flag %s: bool_pair kind needs a *bool, got %T", f.name, v)
			}
			if b != nil && *b {
				out = append(out, f.name)
			} else if b != nil {
				out = append(out, f.negated)
			}
		case flagListArgs, flagRepeat:
			list, ok := v.([]string)
			if !ok {
				return nil, fmt.Errorf("flag %s: %s kind needs a []string, got %T", f.name, f.kind, v)
			}
			if len(list) == 0 {
				continue
			}
			if f.kind == flagListArgs {
				out = append(out, f.name)
				out = append(out, list...)
				continue
			}
			for _, item := range list {
				out = append(out, f.name, item)
			}
		case flagJSONValue:
			if v == nil {
				continue
			}
			data, err := canonjson.Marshal(v)
			if err != nil {
				return nil, fmt.Errorf("flag %s: %w", f.name, err)
			}
			out = append(out, f.name, string(data))
		}
	}
	return out, nil
}

// Small constructors keep engine tables readable.
func constant(s string) func(*compilation) any { return func(*compilation) any { return s } }
func always(*compilation) any                  { return true }
