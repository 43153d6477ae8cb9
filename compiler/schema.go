package compiler

import (
	"encoding/json"
	"reflect"
	"strings"

	"hookbox.dev/hookbox/render"
)

// SchemaID names the spawn spec schema.
const SchemaID = "https://hookbox.dev/schemas/spawn-v1alpha1.json"

// JSONSchema returns the JSON Schema (draft 2020-12) of spawn spec files,
// generated from the Go spec types so the two cannot drift: fields come from
// json tags (without omitempty: required), descriptions from doc tags,
// closed vocabularies from enum tags.
func JSONSchema() ([]byte, error) {
	g := &schemaGen{defs: map[string]any{}}
	spawn := g.ref(reflect.TypeFor[Spawn]())
	list := g.ref(reflect.TypeFor[SpawnList]())
	root := map[string]any{
		"$schema":     "https://json-schema.org/draft/2020-12/schema",
		"$id":         SchemaID,
		"title":       "hookbox spawn spec",
		"description": "A spawn (kind: Spawn) or a list of spawns (kind: SpawnList). See `hookbox schema` and README.md.",
		"oneOf":       []any{spawn, list},
		"$defs":       g.defs,
	}
	return json.MarshalIndent(root, "", "  ")
}

type schemaGen struct {
	defs map[string]any
}

// Types that decode themselves get hand-written schemas matching their
// decodeNode rules.
var (
	durationSchema = map[string]any{
		"type":        "string",
		"pattern":     `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`,
		"description": "A Go duration, e.g. 45s, 10m, 1h30m.",
	}
	quantitySchema = map[string]any{
		"type":        []string{"string", "integer"},
		"pattern":     `^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$`,
		"description": "A quantity, e.g. 512Mi, 4Gi, 2, 500m.",
	}
	commandSchema = map[string]any{
		"description": "An argv list; a string is accepted only when it splits as POSIX words and needs no shell feature.",
		"oneOf": []any{
			map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "minItems": 1},
			map[string]any{"type": "string", "minLength": 1},
		},
	}
)

func (g *schemaGen) ref(t reflect.Type) map[string]any {
	name := t.Name()
	if _, done := g.defs[name]; !done {
		g.defs[name] = nil // placeholder against recursion
		g.defs[name] = g.structSchema(t)
	}
	return map[string]any{"$ref": "#/$defs/" + name}
}

// handWritten maps the types that decode themselves to their schemas.
var handWritten = map[reflect.Type]map[string]any{
	reflect.TypeFor[Duration]():  durationSchema,
	reflect.TypeFor[Quantity]():  quantitySchema,
	reflect.TypeFor[Command]():   commandSchema,
	reflect.TypeFor[Network]():   networkSchema,
	reflect.TypeFor[Workspace](): workspaceSchema,
	reflect.TypeFor[Secret]():    secretSchema,
}

func (g *schemaGen) schemaFor(t reflect.Type) map[string]any {
	if s, ok := handWritten[t]; ok {
		return s
	}
	switch t.Kind() {
	case reflect.Pointer:
		return g.schemaFor(t.Elem())
	case reflect.Struct:
		return g.ref(t)
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schemaFor(t.Elem())}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": g.schemaFor(t.Elem())}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Interface:
		return map[string]any{}
	}
	return map[string]any{}
}

func (g *schemaGen) structSchema(t reflect.Type) map[string]any {
	props := map[string]any{}
	required := []string{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		s := map[string]any{}
		for k, v := range g.schemaFor(f.Type) {
			s[k] = v
		}
		if doc := f.Tag.Get("doc"); doc != "" {
			s["description"] = doc
		}
		if enum := f.Tag.Get("enum"); enum != "" {
			s["enum"] = strings.Split(enum, ",")
		}
		props[name] = s
		if !strings.Contains(opts, "omitempty") {
			required = append(required, name)
		}
	}
	out := map[string]any{
		"type":                 "object",
		"properties":           props,
		"additionalProperties": false,
	}
	if len(required) > 0 {
		out["required"] = required
	}
	if t == reflect.TypeFor[ScriptStep]() {
		out["minProperties"], out["maxProperties"] = 1, 1
	}
	if t == reflect.TypeFor[SpawnSpec]() {
		props["hooks"].(map[string]any)["maxItems"] = render.MaxHooks
	}
	return out
}
