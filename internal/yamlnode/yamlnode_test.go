package yamlnode

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestDescribe(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"{a: 1}", "a mapping"},
		{"[1, 2]", "a list"},
		{"- x", "a list"},
		{"text", "a string"},
		{`"42"`, "a string"},
		{"!!str 42", "a string"},
		{"42", "an integer"},
		{"0x2A", "an integer"},
		{"4.2", "a number"},
		{".inf", "a number"},
		{"true", "a boolean"},
		{"null", "null"},
		{"~", "null"},
		{"2001-12-14", "a timestamp"},
		{"!!binary aGk=", "binary data"},
		{"!<tag:yaml.org,2002:int> 7", "an integer"},
		{"!secret-HBX-SENTINEL x", "a scalar with a custom tag"},
		{"!!python/object x", "a scalar with a custom tag"},
	} {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(tc.doc), &doc); err != nil {
			t.Fatalf("%q: %v", tc.doc, err)
		}
		n := doc.Content[0]
		got := Describe(n)
		if got != tc.want {
			t.Errorf("Describe(%q) = %q, want %q", tc.doc, got, tc.want)
		}
		if strings.Contains(got, "SENTINEL") || strings.Contains(got, "python") {
			t.Errorf("Describe(%q) = %q repeats the tag", tc.doc, got)
		}
	}

	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("a: &x 1\nb: *x\nc: {<<: {d: 1}}\n"), &doc); err != nil {
		t.Fatal(err)
	}
	m := doc.Content[0]
	for _, tc := range []struct {
		n    *yaml.Node
		want string
	}{
		{&doc, "a document"},
		{m.Content[3], "an alias"},
		{m.Content[5].Content[0], "a merge key (<<)"},
		{&yaml.Node{}, "an unknown YAML node"},
	} {
		if got := Describe(tc.n); got != tc.want {
			t.Errorf("Describe(kind %d, tag %q) = %q, want %q", tc.n.Kind, tc.n.Tag, got, tc.want)
		}
	}
}
