// Package initsecrets is how a run's secret values reach the engine
// without being written into the OCI spec, which containerd keeps on disk
// (its metadata database and the bundle's config.json; docs/contracts.md
// §3.5).
//
// The spec's environment keeps an entry for each secret, at its place in
// the render's order, with a placeholder for its value, and one more
// variable, EnvName, listing the secrets' names. The launcher writes the
// values to the task's stdin, a pipe from containerd's shim; hookbox-init,
// the container's PID 1, reads them (Read), closes its stdin and starts
// the engine with EnvName removed and each placeholder replaced (Apply).
//
// The stream is one entry per name, in the order EnvName lists them:
// NAME=VALUE, then a NUL byte. No environment variable's value can hold a
// NUL (execve ends each string there), so the framing is exact for every
// value. Errors name variables, never a value or a byte of the stream.
//
// The package imports only the standard library: hookbox-init is a small
// static binary.
package initsecrets

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// EnvName is the variable that lists the secrets the init must read.
const EnvName = "HOOKBOX_INIT_SECRETS"

// MaxStream bounds the stream the init reads: twice the 2 MiB of argv and
// environment that execve accepts, so a stream the engine could receive is
// never cut.
const MaxStream = 4 << 20

// Variable is the EnvName entry that lists names, in order.
func Variable(names []string) string { return EnvName + "=" + strings.Join(names, ",") }

// Encode returns the stream of names' values, in order.
func Encode(names []string, values map[string]string) ([]byte, error) {
	var b strings.Builder
	for _, name := range names {
		v, ok := values[name]
		if !ok {
			return nil, fmt.Errorf("secret %s has no value at launch", name)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return nil, fmt.Errorf("secret %s holds a NUL byte, which no environment variable can hold", name)
		}
		b.WriteString(name)
		b.WriteByte('=')
		b.WriteString(v)
		b.WriteByte(0)
	}
	if b.Len() > MaxStream {
		return nil, fmt.Errorf("secrets %s: %d bytes together, more than an environment can hold (%d)", strings.Join(names, ", "), b.Len(), MaxStream)
	}
	return []byte(b.String()), nil
}

// Expected returns the names that environ's EnvName entry lists (none
// when it has none) and environ without that entry, in order.
func Expected(environ []string) (names, rest []string, err error) {
	rest = make([]string, 0, len(environ))
	found := false
	for _, kv := range environ {
		name, list, _ := strings.Cut(kv, "=")
		if name != EnvName {
			rest = append(rest, kv)
			continue
		}
		if found {
			return nil, nil, fmt.Errorf("%s is set twice", EnvName)
		}
		found = true
		if list == "" {
			continue
		}
		for _, n := range strings.Split(list, ",") {
			if n == "" || strings.ContainsAny(n, "=\x00") {
				return nil, nil, fmt.Errorf("%s=%s: %q is not a variable name", EnvName, list, n)
			}
			if slices.Contains(names, n) {
				return nil, nil, fmt.Errorf("%s=%s: %s is listed twice", EnvName, list, n)
			}
			names = append(names, n)
		}
	}
	return names, rest, nil
}

// Read reads the values of names from r: exactly one entry per name, in
// order. It reads no further than the last entry's NUL, so the writer
// need not close its end.
func Read(r io.Reader, names []string) (map[string]string, error) {
	br := bufio.NewReader(io.LimitReader(r, MaxStream))
	values := make(map[string]string, len(names))
	for i, name := range names {
		entry, err := br.ReadString(0)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("the stream ended before the value of %s (%d of %d read)", name, i, len(names))
			}
			return nil, fmt.Errorf("reading the value of %s: %w", name, err)
		}
		value, ok := strings.CutPrefix(entry[:len(entry)-1], name+"=")
		if !ok {
			return nil, fmt.Errorf("entry %d of the stream is not %s's", i+1, name)
		}
		values[name] = value
	}
	return values, nil
}

// Apply returns environ with the entry of each name in values set to its
// value, in place: the order of environ is kept. A name without an entry
// in environ is an error.
func Apply(environ []string, values map[string]string) ([]string, error) {
	out := make([]string, len(environ))
	seen := make(map[string]bool, len(values))
	for i, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if v, ok := values[name]; ok {
			kv = name + "=" + v
			seen[name] = true
		}
		out[i] = kv
	}
	var missing []string
	for name := range values {
		if !seen[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("no entry in the environment for %s", strings.Join(slices.Sorted(slices.Values(missing)), ", "))
	}
	return out, nil
}
