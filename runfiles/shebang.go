package runfiles

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// shebangBufSize is how much of a file the kernel reads to find "#!"
// (BINPRM_BUF_SIZE).
const shebangBufSize = 256

// parseShebang reads a "#!" line from the first bytes of a file exactly as
// Linux's binfmt_script does (fs/binfmt_script.c): the kernel sees
// shebangBufSize bytes, zero-padded when the file is shorter; without a
// newline in them, the interpreter name must end (blank or NUL) before the
// buffer does. ok is false when the file is not a script. interp is the
// interpreter path, arg the optional single argument (everything after the
// interpreter, trimmed: the kernel never splits it). A line the kernel
// would refuse (ENOEXEC) is an error.
func parseShebang(head []byte) (interp, arg string, ok bool, err error) {
	var buf [shebangBufSize]byte
	copy(buf[:], head)
	if buf[0] != '#' || buf[1] != '!' {
		return "", "", false, nil
	}
	const bufEnd = shebangBufSize - 1
	iEnd := bytes.IndexByte(buf[:], '\n')
	if iEnd < 0 {
		p := nextNonBlank(buf[:], 2, bufEnd)
		if p < 0 {
			return "", "", true, fmt.Errorf("%w: \"#!\" line names no interpreter", ErrUnsupported)
		}
		if nextTerminator(buf[:], p, bufEnd) < 0 {
			return "", "", true, fmt.Errorf("%w: \"#!\" line longer than %d bytes", ErrUnsupported, shebangBufSize)
		}
		iEnd = bufEnd
	}
	for iEnd > 2 && isBlank(buf[iEnd-1]) {
		iEnd--
	}
	iName := nextNonBlank(buf[:], 2, iEnd)
	if iName < 0 {
		return "", "", true, fmt.Errorf("%w: \"#!\" line names no interpreter", ErrUnsupported)
	}
	iSep := nextTerminator(buf[:], iName, iEnd)
	if iSep < 0 {
		return string(buf[iName:iEnd]), "", true, nil
	}
	interp = string(buf[iName:iSep])
	if interp == "" {
		return "", "", true, fmt.Errorf("%w: \"#!\" line names no interpreter", ErrUnsupported)
	}
	if buf[iSep] != 0 {
		if iArg := nextNonBlank(buf[:], iSep, iEnd); iArg >= 0 {
			a := buf[iArg:iEnd]
			if z := bytes.IndexByte(a, 0); z >= 0 {
				a = a[:z]
			}
			arg = string(a)
		}
	}
	return interp, arg, true, nil
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// nextNonBlank returns the index of the first byte in b[from:to] that is
// not a blank, or -1.
func nextNonBlank(b []byte, from, to int) int {
	for i := from; i < to; i++ {
		if !isBlank(b[i]) {
			return i
		}
	}
	return -1
}

// nextTerminator returns the index of the first blank or NUL in b[from:to],
// or -1.
func nextTerminator(b []byte, from, to int) int {
	for i := from; i < to; i++ {
		if isBlank(b[i]) || b[i] == 0 {
			return i
		}
	}
	return -1
}

// envCommand returns the program that "#!/usr/bin/env <arg>" runs. Without
// -S the whole argument is one program name (that is what env receives);
// with -S it is split on blanks and leading options and NAME=VALUE
// assignments are skipped.
func envCommand(arg string) (string, error) {
	if arg == "" {
		return "", fmt.Errorf("%w: \"#!\" env without a command", ErrUnsupported)
	}
	if !strings.HasPrefix(arg, "-") {
		return arg, nil
	}
	var words []string
	switch {
	case arg == "-S" || strings.HasPrefix(arg, "-S ") || strings.HasPrefix(arg, "-S\t"):
		words = strings.Fields(arg[2:])
	case strings.HasPrefix(arg, "--split-string="):
		words = strings.Fields(strings.TrimPrefix(arg, "--split-string="))
	case strings.HasPrefix(arg, "--split-string ") || strings.HasPrefix(arg, "--split-string\t"):
		words = strings.Fields(strings.TrimPrefix(arg, "--split-string"))
	case strings.HasPrefix(arg, "-S"):
		words = strings.Fields(arg[2:])
	default:
		return "", fmt.Errorf("%w: \"#!\" env options %q without -S", ErrUnsupported, arg)
	}
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case w == "-u" || w == "-C" || w == "--unset" || w == "--chdir":
			i++ // the option's value
		case strings.HasPrefix(w, "-"):
		case strings.Contains(w, "="):
		default:
			return w, nil
		}
	}
	return "", fmt.Errorf("%w: \"#!\" env %q names no command", ErrUnsupported, arg)
}

// LookPath finds name the way env's execvp does: the first directory of
// path (a PATH value) holding an executable regular file of that name.
// Programs appear in the container at their host paths, so this is also
// where a PATH search inside the container finds name once the result is
// a runfile. A name with a slash is taken as is (absolute only).
func LookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		if filepath.IsAbs(name) {
			return filepath.Clean(name), nil
		}
		return "", fmt.Errorf("%w: command %q is a relative path", ErrUnsupported, name)
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue // the container's working directory is not the host's
		}
		cand := filepath.Join(dir, name)
		if fi, err := os.Stat(cand); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return cand, nil
		}
	}
	return "", fmt.Errorf("%q is not on PATH %s: %w", name, path, fs.ErrNotExist)
}

// ScriptInfo is what a "#!" line says: the interpreter, its optional
// argument, and for an env interpreter the command env runs (EnvCommand).
type ScriptInfo struct {
	Interpreter string
	Arg         string
	EnvCommand  string
}

// ReadShebang reads the "#!" line of the file at path the way the kernel
// does. ok is false for a file that is not a script (or cannot be read, or
// is not a regular file: the closure reports that later, with context).
func ReadShebang(path string) (info ScriptInfo, ok bool, err error) {
	// Non-blocking: opening a FIFO would otherwise wait for a writer.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return ScriptInfo{}, false, nil
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return ScriptInfo{}, false, nil
	}
	head := make([]byte, shebangBufSize)
	n, _ := io.ReadFull(f, head)
	interp, arg, isScript, err := parseShebang(head[:n])
	if !isScript || err != nil {
		return ScriptInfo{}, isScript, err
	}
	info = ScriptInfo{Interpreter: interp, Arg: arg}
	if filepath.Base(interp) == "env" {
		if info.EnvCommand, err = envCommand(arg); err != nil {
			return info, true, err
		}
	}
	return info, true, nil
}
