package compiler

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

const committedSchema = "../schema/spawn.schema.json"

// TestSchemaCommittedInSync: the committed schema is what `hookbox schema`
// prints for the current Go types.
func TestSchemaCommittedInSync(t *testing.T) {
	got, err := JSONSchema()
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	if *update {
		if err := os.WriteFile(committedSchema, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(committedSchema)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run `go run ./cmd/hookbox schema > schema/spawn.schema.json` (or go test ./compiler -update)", committedSchema)
	}
}

// TestSchemaCoversEveryField walks the Go spec types: every json field has
// a property in the schema, with required exactly for fields without
// omitempty, and no property exists that the types lack.
func TestSchemaCoversEveryField(t *testing.T) {
	data, err := JSONSchema()
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Defs map[string]struct {
			Properties map[string]any `json:"properties"`
			Required   []string       `json:"required"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] || handWritten[typ] != nil {
			return
		}
		seen[typ] = true
		def, ok := schema.Defs[typ.Name()]
		if !ok {
			t.Errorf("schema has no definition for %s", typ.Name())
			return
		}
		names := map[string]bool{}
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			if !f.IsExported() {
				continue // not a spec field (e.g. Notify's parsed setting)
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			names[name] = true
			if _, ok := def.Properties[name]; !ok {
				t.Errorf("%s.%s is missing from the schema", typ.Name(), name)
			}
			required := false
			for _, r := range def.Required {
				required = required || r == name
			}
			if required == strings.Contains(opts, "omitempty") {
				t.Errorf("%s.%s: required in schema = %v, but omitempty = %v", typ.Name(), name, required, strings.Contains(opts, "omitempty"))
			}
			walk(f.Type)
		}
		for name := range def.Properties {
			if !names[name] {
				t.Errorf("schema property %s.%s has no Go field", typ.Name(), name)
			}
		}
	}
	walk(reflect.TypeFor[Spawn]())
	walk(reflect.TypeFor[SpawnList]())
}

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	data, err := JSONSchema()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(SchemaID, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(SchemaID)
	if err != nil {
		t.Fatalf("the schema is not valid draft 2020-12: %v", err)
	}
	return s
}

// yamlToJSONValue turns a spec file into the JSON value a schema validator
// checks.
func yamlToJSONValue(t *testing.T, data []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSchemaAgreesWithParser: every example validates against the schema,
// and specs the parser refuses for shape reasons are refused by the schema.
func TestSchemaAgreesWithParser(t *testing.T) {
	s := compileSchema(t)
	files, _ := filepath.Glob("../examples/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(yamlToJSONValue(t, data)); err != nil {
			t.Errorf("%s does not validate against the schema: %v", file, err)
		}
	}
	for name, spec := range map[string]string{
		"unknown field":      spawnYAML("{kind: claude, path: /c}", "  promt: x"),
		"wrong type":         spawnYAML("{kind: claude, path: /c, model: 5}", "  prompt: x"),
		"unknown engine":     spawnYAML("{kind: cursor, path: /c}"),
		"bad network":        spawnYAML("{kind: exec, path: /c}", "  network: host"),
		"network mapping":    spawnYAML("{kind: exec, path: /c}", "  network: {}"),
		"empty allow list":   spawnYAML("{kind: exec, path: /c}", "  network: {allow: []}"),
		"network extra key":  spawnYAML("{kind: exec, path: /c}", "  network: {allow: [a.example.com], deny: [b.example.com]}"),
		"allow not a list":   spawnYAML("{kind: exec, path: /c}", "  network: {allow: a.example.com}"),
		"missing path":       spawnYAML("{kind: exec}"),
		"bad trace mode":     spawnYAML("{kind: exec, path: /c}", "  trace: {mode: paranoid}"),
		"bad duration":       spawnYAML("{kind: exec, path: /c}", "  limits: {timeout: soon}"),
		"two script actions": spawnYAML("{kind: scripted, path: /c, script: [{print: a, exit: 0}]}"),
	} {
		if _, err := tryCompile(spec); err == nil {
			t.Errorf("%s: the parser accepts it", name)
		}
		if err := s.Validate(yamlToJSONValue(t, []byte(spec))); err == nil {
			t.Errorf("%s: the schema accepts what the parser refuses", name)
		}
	}
}
