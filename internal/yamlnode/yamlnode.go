// Package yamlnode owns the YAML node helpers hookbox's strict parsers
// share: following aliases (Deref), telling null and string scalars apart
// (IsNull, IsString), and how a node's type is named in messages
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

// maxAliasDepth bounds Deref; the YAML library already refuses alias
// cycles, so only a malformed tree reaches it.
const maxAliasDepth = 16

// Deref follows aliases to the anchored node. It returns nil for a nil
// node or when the chain does not end in a node that is not an alias.
func Deref(n *yaml.Node) *yaml.Node {
	for depth := 0; n != nil && n.Kind == yaml.AliasNode; depth++ {
		if depth == maxAliasDepth {
			return nil
		}
		n = n.Alias
	}
	return n
}

// IsNull reports whether n is the null scalar (~, null or an empty value).
func IsNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// IsString reports whether n is a plain string scalar.
func IsString(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str"
}
