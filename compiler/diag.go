package compiler

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// ErrSpec marks every error caused by the spec's content (as opposed to an
// unreadable file). The CLI maps it to exit code 2.
var ErrSpec = errors.New("invalid spawn spec")

// Pos is a place in a spec file. Line and Column are 1-based; zero means
// unknown (for example a spec built in Go rather than parsed).
type Pos struct {
	Line   int
	Column int
}

// Diagnostic is one problem in a spec: where, which field, what is wrong and
// how to fix it.
type Diagnostic struct {
	File    string
	Pos     Pos
	Path    string // field path, e.g. spec.hooks[1].argv
	Message string // what is wrong
	Hint    string // how to fix it; may be empty
}

func (d Diagnostic) String() string {
	var b strings.Builder
	b.WriteString(d.File)
	if d.Pos.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", d.Pos.Line, d.Pos.Column)
	}
	b.WriteString(": ")
	if d.Path != "" {
		b.WriteString(d.Path)
		b.WriteString(": ")
	}
	b.WriteString(d.Message)
	if d.Hint != "" {
		b.WriteString("; ")
		b.WriteString(d.Hint)
	}
	return b.String()
}

// SpecError holds every problem found in one spec file, in file order.
type SpecError struct {
	Diagnostics []Diagnostic
}

func (e *SpecError) Error() string {
	lines := make([]string, len(e.Diagnostics))
	for i, d := range e.Diagnostics {
		lines[i] = d.String()
	}
	return strings.Join(lines, "\n")
}

// Is makes errors.Is(err, ErrSpec) true for every SpecError.
func (e *SpecError) Is(target error) bool { return target == ErrSpec }

// diagnostics collects problems while a file is decoded and validated.
type diagnostics struct {
	file string
	list []Diagnostic
}

func (d *diagnostics) add(pos Pos, path, hint, format string, args ...any) {
	d.list = append(d.list, Diagnostic{
		File:    d.file,
		Pos:     pos,
		Path:    path,
		Message: fmt.Sprintf(format, args...),
		Hint:    hint,
	})
}

// err returns nil when nothing was found, else a *SpecError sorted by
// position so the report reads top to bottom.
func (d *diagnostics) err() error {
	if len(d.list) == 0 {
		return nil
	}
	list := append([]Diagnostic(nil), d.list...)
	sort.SliceStable(list, func(i, j int) bool {
		a, b := list[i].Pos, list[j].Pos
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	return &SpecError{Diagnostics: list}
}
