// Package config owns hookbox's host configuration: where its state, cache
// and data live, and the global config file, read and checked once.
//
// Directories follow the XDG base directory spec for a user and the FHS for
// root (Env.StateDir, Env.CacheDir, Env.DataDir): run records are state,
// the runfiles store is a cache, the managed containerd's root is data.
//
// The global config file is found by Env.Files and read by Load:
//
//   - $HOOKBOX_CONFIG, when set, is the only file read.
//   - Otherwise root reads /etc/hookbox/config.yaml, then its user file
//     ($XDG_CONFIG_HOME/hookbox/config.yaml, else
//     ~/.config/hookbox/config.yaml); a user reads only the user file.
//   - A later file replaces an earlier one per top-level key, whole: a user
//     file's notify block replaces the system one, and its secrets block
//     (not just secrets.lookup.argv) replaces the system secrets block. A
//     key whose value is null says nothing and replaces nothing.
//   - A file that does not exist says nothing; one that exists must be
//     readable.
//
// Load is strict about each file: it must be one YAML mapping whose keys
// are secrets and notify, each at most once. Anything else is an *Error
// with the file, line and column and a fix. The two blocks are then parsed
// by the packages that own their shape (secretsconf, notifyconf), which
// keep their own rules: a malformed block is a refused lookup or an invalid
// notify layer, reported when it matters, not an error of Load. No message
// repeats a configured value: keys and values are named by position.
//
// The package runs no program; it sits below the compiler.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"hookbox.dev/hookbox/internal/config/notifyconf"
	"hookbox.dev/hookbox/internal/config/secretsconf"
	"hookbox.dev/hookbox/internal/yamlnode"
)

// maxFileSize bounds how much of a config file is read; the file is a few
// lines of YAML.
const maxFileSize = 1 << 20

// Top-level keys of the global config file.
const (
	keySecrets = "secrets"
	keyNotify  = "notify"
)

var knownKeys = []string{keySecrets, keyNotify}

// File is the global configuration, merged from the files read.
type File struct {
	// Read lists the files that existed and were read, lowest precedence
	// first.
	Read []string
	// Secrets is the secret lookup configuration. Its Source is the file
	// its secrets block came from, else the highest-precedence candidate
	// file (where one would configure it).
	Secrets secretsconf.Lookup
	// Notify is the global config layer of the notify configuration
	// (Source notifyconf.SourceConfig); the zero Setting when no file has
	// a notify block.
	Notify notifyconf.Setting
}

// Error is a config file Load refuses. It never repeats a configured value.
type Error struct {
	Path string
	// Line and Column locate the problem (1-based); 0 when it has no
	// position.
	Line, Column int
	Message      string
}

func (e *Error) Error() string {
	switch {
	case e.Line > 0 && e.Column > 0:
		return fmt.Sprintf("%s:%d:%d: %s", e.Path, e.Line, e.Column, e.Message)
	case e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", e.Path, e.Line, e.Message)
	}
	return e.Path + ": " + e.Message
}

// LoadHost finds the config files of this host and user and loads them.
func LoadHost() (*File, error) {
	files, err := HostEnv().Files()
	if err != nil {
		return nil, err
	}
	return Load(files)
}

// Load reads the config files (lowest precedence first; see the package
// doc for the merge rule).
func Load(paths []string) (*File, error) {
	var files []*blocks
	for _, path := range paths {
		data, err := readFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		b, err := parse(data, path)
		if err != nil {
			return nil, err
		}
		files = append(files, b)
	}
	fallback := ""
	if len(paths) > 0 {
		fallback = paths[len(paths)-1]
	}
	return merge(files, fallback), nil
}

// Parse checks one config file's bytes; path is used in messages only.
func Parse(data []byte, path string) (*File, error) {
	b, err := parse(data, path)
	if err != nil {
		return nil, err
	}
	return merge([]*blocks{b}, path), nil
}

// blocks are the top-level values of one file (nil: absent or null).
type blocks struct {
	path            string
	secrets, notify *yaml.Node
}

// merge applies the per-key rule: the last file with a key decides it.
// fallback is the Secrets source when no file has a secrets block.
func merge(files []*blocks, fallback string) *File {
	f := &File{}
	var secrets, notify *blocks
	for _, b := range files {
		f.Read = append(f.Read, b.path)
		if b.secrets != nil {
			secrets = b
		}
		if b.notify != nil {
			notify = b
		}
	}
	if secrets != nil {
		f.Secrets = secretsconf.ParseNode(secrets.secrets, secrets.path)
	} else {
		f.Secrets = secretsconf.ParseNode(nil, fallback)
	}
	if notify != nil {
		f.Notify = notifyconf.ParseNode(notify.notify, notifyconf.SourceConfig)
		if f.Notify.Message != "" {
			f.Notify.Message = notify.path + ": " + f.Notify.Message
		}
	}
	return f
}

func readFile(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("read hookbox config: %w", err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read hookbox config %s: %w", path, err)
	}
	return data, nil
}

// parse checks the document and its top-level keys, and returns the
// blocks for their owners to parse.
func parse(data []byte, path string) (*blocks, error) {
	refuse := func(n *yaml.Node, format string, args ...any) error {
		e := &Error{Path: path, Message: fmt.Sprintf(format, args...)}
		if n != nil {
			e.Line, e.Column = n.Line, n.Column
		}
		return e
	}
	b := &blocks{path: path}
	if len(data) > maxFileSize {
		return nil, refuse(nil, "the file is larger than %d bytes; a hookbox config is a few lines of YAML", maxFileSize)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	err := decodeNode(dec, &doc)
	if errors.Is(err, io.EOF) {
		return b, nil // empty, or comments only
	}
	if err != nil {
		e := &Error{Path: path, Line: parseErrorLine(err), Message: "not valid YAML; fix its syntax"}
		return nil, e
	}
	var extra yaml.Node
	if err := decodeNode(dec, &extra); !errors.Is(err, io.EOF) {
		return nil, refuse(&extra, "the file must hold exactly one YAML document; remove the extra --- documents")
	}
	top := &doc
	if top.Kind == yaml.DocumentNode {
		if len(top.Content) == 0 {
			return b, nil
		}
		top = top.Content[0]
	}
	n := yamlnode.Deref(top)
	switch {
	case n == nil:
		return nil, refuse(top, "the top level is an unresolved alias; it must be a mapping with %s", strings.Join(knownKeys, " and "))
	case yamlnode.IsNull(n):
		return b, nil
	case n.Kind != yaml.MappingNode:
		return nil, refuse(n, "the top level must be a mapping with %s; it is %s", strings.Join(knownKeys, " and "), yamlnode.Describe(n))
	}
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := yamlnode.Deref(n.Content[i])
		if k == nil || !yamlnode.IsString(k) {
			what := "an unresolved alias"
			if k != nil {
				what = yamlnode.Describe(k)
			}
			return nil, refuse(n.Content[i], "a top-level key is %s, not a key name; the keys are %s", what, strings.Join(knownKeys, " and "))
		}
		var slot **yaml.Node
		switch k.Value {
		case keySecrets:
			slot = &b.secrets
		case keyNotify:
			slot = &b.notify
		default:
			// The key is not repeated: it may be a value pasted in the
			// wrong place.
			return nil, refuse(k, "unknown top-level key; the keys are %s: fix its spelling, or move it into the block it belongs to", strings.Join(knownKeys, " and "))
		}
		if first, dup := seen[k.Value]; dup {
			return nil, refuse(k, "%s is given twice (first at line %d); keep one", k.Value, first.Line)
		}
		seen[k.Value] = k
		v := yamlnode.Deref(n.Content[i+1])
		if v == nil {
			return nil, refuse(n.Content[i+1], "%s is an unresolved alias", k.Value)
		}
		if !yamlnode.IsNull(v) {
			*slot = v
		}
	}
	return b, nil
}

// decodeNode shields the caller from a panic inside the YAML library: input
// must never crash hookbox, and a parser bug is reported as invalid YAML.
func decodeNode(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = errors.New("yaml: parser failure")
		}
	}()
	return dec.Decode(n)
}

// parseErrorLine extracts N from a YAML parse error's "line N", or 0. The
// rest of the library's message is dropped because some messages quote the
// input (an unknown anchor's name, for one).
func parseErrorLine(err error) int {
	msg := err.Error()
	const prefix = "yaml: line "
	if !strings.HasPrefix(msg, prefix) {
		return 0
	}
	line := 0
	for _, c := range msg[len(prefix):] {
		if c < '0' || c > '9' || line > 1e8 {
			break
		}
		line = line*10 + int(c-'0')
	}
	return line
}
