package compiler

import (
	"time"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/api/resource"

	"hookbox.dev/hookbox/internal/shellwords"
)

// nodeDecoder is implemented by spec types that decode themselves from a
// YAML node (durations, quantities, commands).
type nodeDecoder interface {
	decodeNode(d *decoder, n *yaml.Node, path string)
}

// Duration is a Go duration string in the spec ("90s", "5m", "1h30m").
type Duration struct {
	time.Duration
	Set bool
}

func (v *Duration) decodeNode(d *decoder, n *yaml.Node, path string) {
	if !d.expectScalar(n, path, "a duration such as 30s or 5m") {
		return
	}
	if n.Tag == "!!int" || n.Tag == "!!float" {
		d.errAt(n, path, "write the duration with a unit, e.g. "+n.Value+"s", "%q has no unit", n.Value)
		return
	}
	dur, err := time.ParseDuration(n.Value)
	if err != nil {
		d.errAt(n, path, "use a Go duration such as 45s, 10m or 1h30m", "%q is not a duration", n.Value)
		return
	}
	if dur <= 0 {
		d.errAt(n, path, "give a positive duration, or omit the field for the default", "duration %q is not positive", n.Value)
		return
	}
	*v = Duration{Duration: dur, Set: true}
}

// Quantity is a Kubernetes-style quantity: 512Mi, 4Gi, 2, 500m.
type Quantity struct {
	resource.Quantity
	Set bool
}

func (v *Quantity) decodeNode(d *decoder, n *yaml.Node, path string) {
	if !d.expectScalar(n, path, "a quantity such as 512Mi, 4Gi or 500m") {
		return
	}
	q, err := resource.ParseQuantity(n.Value)
	if err != nil {
		d.errAt(n, path, "use a quantity such as 512Mi, 4Gi, 2 or 500m", "%q is not a quantity", n.Value)
		return
	}
	if q.Sign() <= 0 {
		d.errAt(n, path, "give a positive quantity, or omit the field for the default", "quantity %q is not positive", n.Value)
		return
	}
	*v = Quantity{Quantity: q, Set: true}
}

// Command is an argv. The spec may give it as a list (preferred) or as a
// string that splits into POSIX words and needs no shell feature
// (docs/contracts.md §4); anything else is refused with an argv suggestion.
type Command []string

func (c *Command) decodeNode(d *decoder, n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.SequenceNode:
		var argv []string
		d.decodeValue(n, path, &argv)
		*c = argv
	case yaml.ScalarNode:
		if n.Tag != "!!str" {
			d.typeErr(n, path, "a list of strings")
			return
		}
		words, err := shellwords.Split(n.Value)
		if err != nil {
			d.errAt(n, path, "", "%v", err)
			return
		}
		*c = words
	default:
		d.typeErr(n, path, "a list of strings")
	}
}
