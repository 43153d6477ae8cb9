// Package yamlnode owns how hookbox names a YAML node's type in messages
// ("expected a list, got a string"). A description never contains the
// node's text, nor a custom tag: the secrets package puts descriptions in
// refusals that must never repeat a configured value.
package yamlnode

import "go.yaml.in/yaml/v3"

// Describe names n's type with an article: "a mapping", "a list", "a
// string", "an integer", "a number", "a boolean", "null", "a timestamp"…
// A scalar with a tag YAML does not define is "a scalar with a custom tag".
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.DocumentNode:
		return "a document"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return "a string"
		case "!!int":
			return "an integer"
		case "!!float":
			return "a number"
		case "!!bool":
			return "a boolean"
		case "!!null":
			return "null"
		case "!!timestamp":
			return "a timestamp"
		case "!!binary":
			return "binary data"
		case "!!merge":
			return "a merge key (<<)"
		}
		return "a scalar with a custom tag"
	}
	return "an unknown YAML node"
}
