package compiler

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"hookbox.dev/hookbox/render"
)

// Parsed is one spawn decoded from a spec file, with its relative paths
// resolved against the spec file's directory and its prompt loaded. It keeps
// the position of every field so that later checks (engine rules) can report
// file:line:col too.
type Parsed struct {
	Spawn Spawn
	File  string // the spec file as named by the user
	Dir   string // absolute directory relative paths resolve against
	// baseDir is Dir, moved up as far as the spec's relative paths reach
	// ("" while none was resolved): the render's BaseDir.
	baseDir string
	Prompt  string // prompt text (from prompt or promptFile)
	// HasPrompt distinguishes an empty prompt from none.
	HasPrompt bool

	// workspaceCodexServers are the MCP servers the workspace's own
	// .codex/config.toml declares (read only for codex with an explicit set).
	workspaceCodexServers []codexWorkspaceServer
	// egress is the allowlist of spec.network, normalised; nil for none.
	egress *render.Egress

	prefix string // "" or "items[N]." for SpawnList items
	pos    map[string]Pos
	// lstat checks host directories at compile time (ParseOptions.Lstat).
	lstat func(string) (fs.FileInfo, error)
	// stat checks named programs at compile time (ParseOptions.Stat).
	stat func(string) (fs.FileInfo, error)
}

// at returns the position of a field path (relative to the spawn), falling
// back to the nearest enclosing field that has one.
func (p *Parsed) at(path string) Pos { return nearestPos(p.pos, p.prefix+path) }

// nearestPos returns the position recorded for path or, failing that, for
// its nearest enclosing field.
func nearestPos(pos map[string]Pos, path string) Pos {
	for {
		if at, ok := pos[path]; ok {
			return at
		}
		i := lastSep(path)
		if i < 0 {
			return pos[""]
		}
		path = path[:i]
	}
}

func lastSep(path string) int {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '.' || path[i] == '[' {
			return i
		}
	}
	return -1
}

// ReadFile reads a spec file and decodes every spawn in it. All problems of
// the file are reported together as a *SpecError (errors.Is ErrSpec); an
// unreadable file is an ordinary error.
func ReadFile(path string) ([]*Parsed, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	return Parse(data, path, filepath.Dir(abs), os.ReadFile)
}

// Parse decodes and validates spec bytes. file names the spec in messages;
// dir is the absolute directory relative paths resolve against; readFile
// loads promptFile contents (a seam for tests).
func Parse(data []byte, file, dir string, readFile func(string) ([]byte, error)) ([]*Parsed, error) {
	return ParseWithOptions(data, file, dir, readFile, ParseOptions{})
}

// ParseWithOptions is Parse with options: template slot values (see
// params.go) are substituted before the spec is decoded.
func ParseWithOptions(data []byte, file, dir string, readFile func(string) ([]byte, error), opts ParseOptions) ([]*Parsed, error) {
	diags := &diagnostics{file: file}
	dec := &decoder{diags: diags, pos: map[string]Pos{}}

	var doc yaml.Node
	yd := yaml.NewDecoder(bytes.NewReader(data))
	if err := yd.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			diags.add(Pos{Line: 1, Column: 1}, "", "start from an example: hookbox render examples/hello.yaml", "the file is empty")
			return nil, diags.err()
		}
		diags.add(yamlErrorPos(err), "", "fix the YAML or JSON syntax", "%s", yamlErrorText(err))
		return nil, diags.err()
	}
	var extra yaml.Node
	if err := yd.Decode(&extra); err == nil {
		diags.add(nodePos(&extra), "", "use kind: SpawnList with items to put several spawns in one file", "the file holds more than one YAML document")
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	dec.pos[""] = nodePos(root)

	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if root.Kind != yaml.MappingNode {
		dec.typeErr(root, "", "a mapping with apiVersion, kind, metadata and spec")
		return nil, diags.err()
	}
	if !dec.fillParams(root, opts.Params) {
		return nil, diags.err()
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "apiVersion":
			dec.decodeValue(v, "apiVersion", &head.APIVersion)
		case "kind":
			dec.decodeValue(v, "kind", &head.Kind)
		}
	}
	if head.APIVersion != APIVersion {
		diags.add(dec.at("apiVersion"), "apiVersion", "write apiVersion: "+APIVersion, "apiVersion is %q, expected %q", head.APIVersion, APIVersion)
	}

	var parsed []*Parsed
	switch head.Kind {
	case KindSpawn:
		var s Spawn
		dec.decodeValue(root, "", &s)
		parsed = append(parsed, &Parsed{Spawn: s, File: file, Dir: dir, pos: dec.pos})
	case KindSpawnList:
		var list SpawnList
		dec.decodeValue(root, "", &list)
		if len(list.Items) == 0 && dec.has("items") {
			diags.add(dec.at("items"), "items", "add at least one spawn", "a SpawnList needs items")
		} else if !dec.has("items") {
			diags.add(dec.at(""), "items", "add items: a list of {metadata, spec}", "a SpawnList needs items")
		}
		names := map[string]string{}
		for i, item := range list.Items {
			prefix := fmt.Sprintf("items[%d].", i)
			if item.APIVersion != "" && item.APIVersion != APIVersion {
				diags.add(dec.at(prefix+"apiVersion"), prefix+"apiVersion", "remove it or write "+APIVersion, "item apiVersion is %q", item.APIVersion)
			}
			if item.Kind != "" && item.Kind != KindSpawn {
				diags.add(dec.at(prefix+"kind"), prefix+"kind", "remove it or write Spawn", "item kind is %q", item.Kind)
			}
			if name := item.Metadata.Name; name != "" {
				if first, dup := names[name]; dup {
					diags.add(dec.at(prefix+"metadata.name"), prefix+"metadata.name", "give each spawn its own name", "spawn name %q is already used by %s", name, first)
				}
				names[name] = prefix + "metadata.name"
			}
			s := Spawn{APIVersion: APIVersion, Kind: KindSpawn, Metadata: item.Metadata, Spec: item.Spec}
			parsed = append(parsed, &Parsed{Spawn: s, File: file, Dir: dir, prefix: prefix, pos: dec.pos})
		}
	case "":
		diags.add(dec.at(""), "kind", "write kind: Spawn (or SpawnList)", "kind is missing")
	default:
		diags.add(dec.at("kind"), "kind", "write kind: Spawn or kind: SpawnList", "unknown kind %q", head.Kind)
	}

	for _, p := range parsed {
		p.lstat, p.stat = opts.Lstat, opts.Stat
		p.validate(diags, readFile)
	}
	if err := diags.err(); err != nil {
		return nil, err
	}
	return parsed, nil
}

func (d *decoder) has(path string) bool { _, ok := d.pos[path]; return ok }

func (d *decoder) at(path string) Pos { return nearestPos(d.pos, path) }

// yamlErrorPos extracts the line from yaml.v3's syntax errors ("yaml: line
// 3: ..."); the library reports no column. Its "did not find expected …"
// parser errors count lines from 0 (measured: an unclosed flow list opened
// on line 2 is reported as line 1), so those are shifted to 1-based.
func yamlErrorPos(err error) Pos {
	var line int
	if _, scanErr := fmt.Sscanf(err.Error(), "yaml: line %d:", &line); scanErr == nil {
		if strings.Contains(err.Error(), ": did not find expected") {
			line++
		}
		return Pos{Line: line, Column: 1}
	}
	return Pos{Line: 1, Column: 1}
}

func yamlErrorText(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if _, after, found := strings.Cut(rest, ": "); found {
			msg = after
		}
	}
	return "syntax error: " + msg
}
