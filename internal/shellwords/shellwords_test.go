package shellwords

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"hookbox.dev/hookbox/internal/testenv"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"a", []string{"a"}},
		{"a b c", []string{"a", "b", "c"}},
		{"  a   b  ", []string{"a", "b"}},
		{"a\tb c\n", []string{"a", "b", "c"}},
		{"\n\n  a b\n\n", []string{"a", "b"}},
		{"'a b'", []string{"a b"}},
		{`"a b"`, []string{"a b"}},
		{`a'b'"c"`, []string{"abc"}},
		{`a'b c'd`, []string{"ab cd"}},
		{`a\ b`, []string{"a b"}},
		{`\|\$\*\?\[\~\#\{\}\(\)\;\&\<\>\'\"\\`, []string{`|$*?[~#{}();&<>'"\`}},
		{`''`, []string{""}},
		{`""`, []string{""}},
		{`a '' b`, []string{"a", "", "b"}},
		{`'' ''`, []string{"", ""}},
		{"a\\\nb", []string{"ab"}},
		{"a \\\n b", []string{"a", "b"}},
		{`"a\"b"`, []string{`a"b`}},
		{`"a\$b"`, []string{"a$b"}},
		{"\"a\\`b\"", []string{"a`b"}},
		{`"a\\b"`, []string{`a\b`}},
		{`"a\b"`, []string{`a\b`}},
		{"\"a\\\nb\"", []string{"ab"}},
		{"\"a\nb\"", []string{"a\nb"}},
		{`'a\b'`, []string{`a\b`}},
		{`'a\'`, []string{`a\`}},
		{`'$HOME | * ; & ~ # { ( "'`, []string{`$HOME | * ; & ~ # { ( "`}},
		{`"| ; & * ? [ ~ # { } ( ) ' < >"`, []string{`| ; & * ? [ ~ # { } ( ) ' < >`}},
		{`héllo 日本 "😀 x"`, []string{"héllo", "日本", "😀 x"}},
		{`\é\日`, []string{"é日"}},
		{"a\xffb", []string{"a\xffb"}},
		{"a\r", []string{"a\r"}},
		{`a~b a#b`, []string{"a~b", "a#b"}},
		{`''~ ""# \~ \#`, []string{"~", "#", "~", "#"}},
		{`a] ]`, []string{"a]", "]"}},
		{`env X=1 --opt=a,b a.b..c`, []string{"env", "X=1", "--opt=a,b", "a.b..c"}},
		{`/bin/x=y`, []string{"/bin/x=y"}},
		{`'A'=b`, []string{"A=b"}},
		{`find . -name x -exec rm {} \;`, []string{"find", ".", "-name", "x", "-exec", "rm", "{}", ";"}},
		{`a{b} {x}y`, []string{"a{b}", "{x}y"}},
		{`a{b,c'}'`, []string{"a{b,c}"}},
		{`a\{b,c}`, []string{"a{b,c}"}},
		{`'{' '}'`, []string{"{", "}"}},
		{`echo 2 33`, []string{"echo", "2", "33"}},
		{`a 2\>x`, []string{"a", "2>x"}},
		{`x ! % @ + = : , . / _ -`, []string{"x", "!", "%", "@", "+", "=", ":", ",", ".", "/", "_", "-"}},
	}
	for _, tt := range tests {
		got, err := Split(tt.in)
		if err != nil {
			t.Errorf("Split(%q): unexpected error: %v", tt.in, err)
			continue
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Split(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSplitRefused(t *testing.T) {
	tests := []struct {
		in      string
		feature string
		column  int
		offset  int // -1: same as column-1 (ASCII input)
	}{
		{"", "empty", 1, -1},
		{"   \n\t", "empty", 1, -1},
		{"\\\n", "empty", 1, -1},
		{`echo 'hi`, "unterminated-quote", 6, -1},
		{`echo "hi`, "unterminated-quote", 6, -1},
		{`echo "hi\"`, "unterminated-quote", 6, -1},
		{`echo don't`, "unterminated-quote", 9, -1},
		{`echo 'a' "b`, "unterminated-quote", 10, -1},
		{`echo hi\`, "trailing-backslash", 8, -1},
		{`echo hi | tee x`, "pipe", 9, -1},
		{`a|b`, "pipe", 2, -1},
		{`a && b`, "and-or", 3, -1},
		{`a || b`, "and-or", 3, -1},
		{`a & b`, "background", 3, -1},
		{`a&`, "background", 2, -1},
		{`a; b`, "sequence", 2, -1},
		{`a ;; b`, "sequence", 3, -1},
		{"a\nb", "sequence", 2, -1},
		{"a b\n  c", "sequence", 4, -1},
		{`a > f`, "redirect", 3, -1},
		{`a >> f`, "redirect", 3, -1},
		{`a < f`, "redirect", 3, -1},
		{`a << EOF`, "redirect", 3, -1},
		{`a <> f`, "redirect", 3, -1},
		{`a >&2`, "redirect", 3, -1},
		{`a 2>err`, "redirect", 3, -1},
		{`a 12>err`, "redirect", 3, -1},
		{`a 2>&1`, "redirect", 3, -1},
		{`a &> f`, "redirect", 3, -1},
		{`a12>f`, "redirect", 4, -1},
		{`a '2'>f`, "redirect", 6, -1},
		{`a <(b)`, "redirect", 3, -1},
		{`echo $HOME`, "variable", 6, -1},
		{`echo ${HOME}`, "variable", 6, -1},
		{`echo $1`, "variable", 6, -1},
		{`echo $?`, "variable", 6, -1},
		{`echo a$`, "variable", 7, -1},
		{`echo $'a'`, "variable", 6, -1},
		{`echo "$HOME"`, "variable", 7, -1},
		{`echo "a ${x}"`, "variable", 9, -1},
		{`FOO=bar cmd`, "variable", 1, -1},
		{`_x1=2 cmd`, "variable", 1, -1},
		{`echo $(date)`, "command-substitution", 6, -1},
		{"echo `date`", "command-substitution", 6, -1},
		{`echo "$(date)"`, "command-substitution", 7, -1},
		{"echo \"`date`\"", "command-substitution", 7, -1},
		{`echo $((1+2))`, "arithmetic", 6, -1},
		{`echo "$((1+2))"`, "arithmetic", 7, -1},
		{`ls *.txt`, "glob", 4, -1},
		{`ls a?`, "glob", 5, -1},
		{`ls [ab]`, "glob", 4, -1},
		{`[ -f x ]`, "glob", 1, -1},
		{`(a)`, "subshell", 1, -1},
		{`a )`, "subshell", 3, -1},
		{`cd ~`, "tilde", 4, -1},
		{`~/bin/x`, "tilde", 1, -1},
		{`echo hi # c`, "comment", 9, -1},
		{`#x`, "comment", 1, -1},
		{`{ a; }`, "brace", 1, -1},
		{`a }`, "brace", 3, -1},
		{`echo a{b,c}`, "brace", 7, -1},
		{`echo {1..3}`, "brace", 6, -1},
		{`echo x{a,{b}}`, "brace", 7, -1},
		{"a\x00b", "nul", 2, -1},
		{"'a\x00'", "nul", 3, -1},
		{`日本 | x`, "pipe", 4, 7},
		{`é "😀`, "unterminated-quote", 3, 3},
	}
	for _, tt := range tests {
		words, err := Split(tt.in)
		var re *RefusedError
		if !errors.As(err, &re) {
			t.Errorf("Split(%q) = %q, %v; want a *RefusedError", tt.in, words, err)
			continue
		}
		offset := tt.offset
		if offset < 0 {
			offset = tt.column - 1
		}
		if re.Feature != tt.feature || re.Column != tt.column || re.Offset != offset || re.Input != tt.in {
			t.Errorf("Split(%q): got feature %q column %d offset %d input %q, want %q %d %d",
				tt.in, re.Feature, re.Column, re.Offset, re.Input, tt.feature, tt.column, offset)
		}
		msg := re.Error()
		if strings.Contains(msg, "\n") {
			t.Errorf("Split(%q): message is not one line: %q", tt.in, msg)
		}
		if tt.feature != "empty" && !strings.Contains(msg, "column ") {
			t.Errorf("Split(%q): message does not say where: %q", tt.in, msg)
		}
		if again := re.Error(); again != msg {
			t.Errorf("Split(%q): message not deterministic: %q vs %q", tt.in, msg, again)
		}
	}
}

func TestRefusedWords(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{`ls *.txt`, []string{"ls", "*.txt"}},
		{`ls ~ #x a{b,c}`, []string{"ls", "~", "#x", "a{b,c}"}},
		{`ls * | x`, nil},
		{`echo hi | tee x`, nil},
		{`echo $HOME`, nil},
	}
	for _, tt := range tests {
		_, err := Split(tt.in)
		var re *RefusedError
		if !errors.As(err, &re) {
			t.Fatalf("Split(%q): want a refusal, got %v", tt.in, err)
		}
		if !slices.Equal(re.Words, tt.want) || (re.Words == nil) != (tt.want == nil) {
			t.Errorf("Split(%q).Words = %q, want %q", tt.in, re.Words, tt.want)
		}
	}
}

func TestRefusedMessages(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"", `an empty command; give argv[0] and its arguments as a list, e.g. ["/usr/bin/true"]`},
		{"echo hi | tee x", `"echo hi | tee x": pipe '|' at column 9 needs a shell, and hookbox runs none; ` +
			`write the command as an argv list, e.g. ["/bin/sh", "-c", "echo hi | tee x"] if you really need a shell ` +
			`(declare /bin/sh in tools), or split it into separate hooks`},
		{`echo "$HOME/x"`, `"echo \"$HOME/x\"": variable '$HOME' at column 7 is expanded by a shell, and hookbox runs none; ` +
			`pass the value through the hook's env, or write the argv list with the value spelled out; ` +
			`for a literal $ write \$ or use single quotes`},
		{`echo don't`, `"echo don't": single quote (') opened at column 9 is never closed; ` +
			`close it, or for a literal ' write \', or write the command as an argv list`},
		{`ls *.txt`, `"ls *.txt": glob '*' at column 4 is expanded by a shell, and hookbox runs none; ` +
			`list the files explicitly, or quote it ('*' or \*) to pass it literally, e.g. ["ls", "*.txt"]`},
		{`a 2>&1`, `"a 2>&1": redirection '2>&' at column 3 needs a shell, and hookbox runs none; ` +
			`write the command as an argv list, e.g. ["/bin/sh", "-c", "a 2>&1"] if you really need a shell ` +
			`(declare /bin/sh in tools), or pass the file to the program as an argument`},
		{`FOO=1 cmd`, `"FOO=1 cmd": environment assignment 'FOO=' at column 1 needs a shell, and hookbox runs none; ` +
			`set FOO in the hook's env instead, or quote the word if it really is the program's name`},
		{"a\tb <x\n", `"a\tb <x\n": redirection '<' at column 5 needs a shell, and hookbox runs none; ` +
			`write the command as an argv list, e.g. ["/bin/sh", "-c", "a\tb <x\n"] if you really need a shell ` +
			`(declare /bin/sh in tools), or pass the file to the program as an argument`},
	}
	for _, tt := range tests {
		_, err := Split(tt.in)
		if err == nil {
			t.Fatalf("Split(%q): want an error", tt.in)
		}
		if got := err.Error(); got != tt.want {
			t.Errorf("Split(%q) error:\n got %s\nwant %s", tt.in, got, tt.want)
		}
	}
}

// A RefusedError built by hand, even a nonsensical one, must still print.
func TestRefusedErrorNoPanic(t *testing.T) {
	for _, f := range []string{"empty", "unterminated-quote", "trailing-backslash", "pipe", "and-or",
		"background", "sequence", "redirect", "variable", "command-substitution", "arithmetic", "glob",
		"subshell", "tilde", "comment", "brace", "nul", "unknown"} {
		for _, e := range []*RefusedError{
			{Feature: f},
			{Feature: f, Input: "x", Offset: 5},
			{Feature: f, Input: "x", Offset: -1},
			{Feature: f, Input: "&", Offset: 0},
			{Feature: f, Input: "$", Offset: 0},
			{Feature: f, Input: "${", Offset: 0},
		} {
			if e.Error() == "" {
				t.Errorf("%+v: empty message", e)
			}
		}
	}
}

func TestQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `''`},
		{"abc", "abc"},
		{"A-Za-z0-9@%+=:,./_", "A-Za-z0-9@%+=:,./_"},
		{"a b", `'a b'`},
		{"it's", `'it'\''s'`},
		{"'", `''\'''`},
		{"$HOME", `'$HOME'`},
		{"~", `'~'`},
		{"é", `'é'`},
		{"a\nb", "'a\nb'"},
	}
	for _, tt := range tests {
		if got := Quote(tt.in); got != tt.want {
			t.Errorf("Quote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestJoin(t *testing.T) {
	tests := []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"/bin/echo", "a b", "", "it's"}, `/bin/echo 'a b' '' 'it'\''s'`},
		{[]string{"if", "if"}, `'if' if`},
		{[]string{"time", "x"}, `'time' x`},
		{[]string{"A=b", "A=b"}, `'A=b' A=b`},
	}
	for _, tt := range tests {
		if got := Join(tt.in); got != tt.want {
			t.Errorf("Join(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// pieces is the alphabet random argv elements are drawn from: everything a
// shell treats specially, blanks, quotes and multi-byte text.
var pieces = []string{
	"a", "Z", "0", "9", "-", "_", "/", ".", "=", ",", ":", "@", "%", "+",
	" ", "\t", "\n", "\r", "'", "''", "\"", "\\", "\\\n", "$", "${x}", "`",
	"|", "||", ";", "&", "&&", "*", "?", "[", "]", "~", "#", "{", "}", "{a,b}",
	"(", ")", "<", ">", "2>", "!", "é", "日本", "😀", "\xff", "if", "A=",
}

func randomArgv(r *rand.Rand) []string {
	argv := make([]string, 1+r.IntN(5))
	for i := range argv {
		var b strings.Builder
		for range r.IntN(8) { // zero pieces gives the empty string
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		argv[i] = b.String()
	}
	return argv
}

func TestJoinSplitProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 5000; n++ {
		argv := randomArgv(r)
		line := Join(argv)
		got, err := Split(line)
		if err != nil {
			t.Fatalf("Split(Join(%q)) = Split(%s): %v", argv, line, err)
		}
		if !slices.Equal(got, argv) {
			t.Fatalf("Split(Join(%q)) = %q (line %s)", argv, got, line)
		}
		// Quote alone is exact for arguments; the command name is Join's job.
		for _, arg := range argv {
			if w, err := Split("cmd " + Quote(arg)); err != nil || !slices.Equal(w, []string{"cmd", arg}) {
				t.Fatalf("Split(cmd Quote(%q)) = %q, %v", arg, w, err)
			}
		}
	}
}

var trickyArgv = [][]string{
	{"plain"},
	{""},
	{"", "", ""},
	{"a b", "c\td", "e\nf", " "},
	{"it's", "'", "''", `"`, `\`, `\\`, "\\\n"},
	{"$HOME", "${x}", "$(date)", "`date`", "$((1+2))", "$'a'", "$"},
	{"|", "&&", ";", "&", ">", "2>&1", "<", "(", ")", "{", "}", "{a,b}"},
	{"*", "?", "[a]", "~", "~/x", "#", "#x", "!", "!!"},
	{"é", "日本", "😀", "a\xffb", "\r\n"},
	{"if", "then", "A=b", "-n", "--", "-e"},
}

// posixShell: the real-shell tests run /bin/sh.
var posixShell = testenv.Requirement{Name: "/bin/sh", Check: func() string {
	if _, err := os.Stat("/bin/sh"); err != nil {
		return "no /bin/sh on this machine"
	}
	return ""
}}

// TestJoinRealShell checks Join against the shells engines actually use:
// the words the shell hands to printf must be exactly argv.
func TestJoinRealShell(t *testing.T) {
	shells := []string{"/bin/sh", "/bin/bash"}
	testenv.Require(t, posixShell)
	for _, sh := range shells {
		if _, err := os.Stat(sh); err != nil {
			t.Logf("%s not installed; checked the others", sh)
			continue
		}
		for _, argv := range trickyArgv {
			cmd := exec.Command(sh, "-c", "printf '%s\\0' "+Join(argv))
			out, err := cmd.Output()
			if err != nil {
				t.Errorf("%s -c printf %s: %v", sh, Join(argv), err)
				continue
			}
			if got := nulRecords(out); !slices.Equal(got, argv) {
				t.Errorf("%s -c printf %s:\n got %q\nwant %q", sh, Join(argv), got, argv)
			}
		}
	}
}

// TestJoinRealShellCommandName checks that argv[0] is run as a program even
// when it looks like a keyword or an assignment to a shell.
func TestJoinRealShellCommandName(t *testing.T) {
	testenv.Require(t, posixShell)
	dir := t.TempDir()
	for _, name := range []string{"if", "time", "A=b", "x y"} {
		script := "#!/bin/sh\nprintf '%s\\0' ran \"$@\"\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, sh := range []string{"/bin/sh", "/bin/bash"} {
			if _, err := os.Stat(sh); err != nil {
				continue
			}
			argv := []string{name, "a b", ""}
			cmd := exec.Command(sh, "-c", Join(argv))
			cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin"}
			out, err := cmd.Output()
			if err != nil {
				t.Errorf("%s -c %s: %v", sh, Join(argv), err)
				continue
			}
			if got, want := nulRecords(out), []string{"ran", "a b", ""}; !slices.Equal(got, want) {
				t.Errorf("%s -c %s: got %q, want %q", sh, Join(argv), got, want)
			}
		}
	}
}

func nulRecords(out []byte) []string {
	recs := strings.Split(string(out), "\x00")
	return recs[:len(recs)-1] // printf '%s\0' ends every record with NUL
}

func addSeeds(f *testing.F) {
	for _, s := range []string{
		"", "a b", "a'b'\"c\"", `''`, "a\\\nb", `"a\"b\$c"`, `echo 'hi`, `echo hi\`,
		"a | b", "a && b", "a & b", "a; b", "a 2>&1", "$HOME", "${x}", "$(x)", "`x`",
		"$((1))", "*.go", "(a)", "~/x", "# c", "{ a; }", "a{b,c}", "{1..3}", "FOO=1 x",
		"é 日本 😀", "a\xffb", "a\x00b", "\"\\\n\"", `\`, `"`, `'`, "a\tb\nc",
	} {
		f.Add(s)
	}
	for _, argv := range trickyArgv {
		f.Add(Join(argv))
		f.Add(strings.Join(argv, "\x00"))
	}
}

func FuzzSplit(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, s string) {
		words, err := Split(s)
		if err != nil {
			var re *RefusedError
			if !errors.As(err, &re) {
				t.Fatalf("Split(%q): error is not a *RefusedError: %v", s, err)
			}
			if re.Offset < 0 || re.Offset > len(s) || re.Column < 1 {
				t.Fatalf("Split(%q): bad position %+v", s, re)
			}
			_ = re.Error()
			return
		}
		if len(words) == 0 {
			t.Fatalf("Split(%q) returned no words and no error", s)
		}
		line := Join(words)
		again, err := Split(line)
		if err != nil || !slices.Equal(again, words) {
			t.Fatalf("Split(%q) = %q; Split(Join) = Split(%s) = %q, %v", s, words, line, again, err)
		}
	})
}

func FuzzJoinRoundTrip(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, s string) {
		if s == "" {
			t.Skip("empty argv")
		}
		argv := strings.Split(s, "\x00")
		line := Join(argv)
		got, err := Split(line)
		if err != nil || !slices.Equal(got, argv) {
			t.Fatalf("Split(Join(%q)) = Split(%s) = %q, %v", argv, line, got, err)
		}
		if bytes.ContainsRune([]byte(line), 0) {
			t.Fatalf("Join(%q) contains NUL", argv)
		}
	})
}
