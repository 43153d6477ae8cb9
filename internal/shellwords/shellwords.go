// Package shellwords owns the boundary between command strings and argv
// lists (docs/contracts.md §4).
//
// hookbox never runs a shell on its own side: a hook command is an argv. Split
// accepts a string form only when POSIX word splitting alone gives the argv
// the author meant, and refuses, with a RefusedError that says how to write
// the argv instead, any string whose meaning depends on a shell feature
// (pipes, lists, redirection, expansions, globs, comments, brace syntax).
// Refusal is deliberately conservative: a string some shell would read
// differently from plain word splitting is refused even where POSIX sh would
// happen to agree (a lone $ is refused because bash gives $'...' a meaning).
//
// Going the other way, Quote and Join produce the command string hookbox
// hands to an engine that insists on running a shell (sh -c, bash -c), quoted
// so that the shell's word splitting reproduces the argv exactly.
//
// What this package does not do: it does not check that argv[0] exists, and
// it does not refuse words that only a shell would treat as keywords (if,
// while, !); those fail when hookbox execs them, not silently.
package shellwords

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Values of RefusedError.Feature, documented there.
const (
	featEmpty        = "empty"
	featUnterminated = "unterminated-quote"
	featTrailingBS   = "trailing-backslash"
	featPipe         = "pipe"
	featAndOr        = "and-or"
	featBackground   = "background"
	featSequence     = "sequence"
	featRedirect     = "redirect"
	featVariable     = "variable"
	featCommandSubst = "command-substitution"
	featArithmetic   = "arithmetic"
	featGlob         = "glob"
	featSubshell     = "subshell"
	featTilde        = "tilde"
	featComment      = "comment"
	featBrace        = "brace"
	featNUL          = "nul"
)

// RefusedError says why a string cannot be used as an argv.
//
// Feature is one of these stable ids:
//
//	empty                 no words at all (Offset 0)
//	unterminated-quote    a ' or " that is never closed (Offset: the opening quote)
//	trailing-backslash    a backslash that ends the input
//	pipe                  |
//	and-or                && or ||
//	background            &
//	sequence              ;
//	redirect              < > >> << <> >& &> and the like; Offset is the first
//	                      digit of a digit prefix (2>)
//	variable              any unquoted or double-quoted $ other than $( and $((
//	                      ($NAME, ${...}, $1, $?, a lone $, bash's $'...'), and an
//	                      environment assignment NAME=value as the first word
//	                      (Offset: the start of NAME)
//	command-substitution  $( or a backquote, also inside double quotes
//	arithmetic            $((
//	glob                  unquoted * ? [
//	subshell              unquoted ( )
//	tilde                 unquoted ~ starting a word
//	comment               unquoted # starting a word
//	brace                 unquoted { or } as a whole word (a brace group), or a
//	                      brace expansion such as a{b,c} or {1..3} (Offset: the {)
//	nul                   a NUL byte, which no argv element can contain
type RefusedError struct {
	Input   string   // the refused string (it is configuration, not a secret)
	Offset  int      // byte offset of the offending character in Input
	Column  int      // 1-based rune column of that character
	Feature string   // stable id: empty, unterminated-quote, pipe, ...
	Words   []string // best-effort words for the suggestion (may be nil)
}

// Split splits s into words by POSIX shell rules: blanks (space, tab,
// newline) separate words; single quotes are literal; double quotes allow
// backslash escapes only of $ ` " \ and newline; an unquoted backslash
// escapes the next char (backslash-newline is a line continuation that
// vanishes). It refuses any input that needs shell features, and an input
// with no words at all; the error is always a *RefusedError.
//
// A newline is only a blank here: a multi-line string becomes one argv,
// where a shell would run each line as its own command.
//
// For glob, tilde, comment and brace refusals, Words holds the argv the
// string would give if those characters were meant literally, when that
// reading needs no other shell feature.
func Split(s string) ([]string, error) {
	words, err := split(s, 0)
	if err == nil {
		return words, nil
	}
	// Suggest the literal reading for features an author may well have
	// meant literally; each pass allows one more such feature.
	allow := literalFeature(err.Feature)
	for allow != 0 {
		w, e := split(s, allow)
		if e == nil {
			err.Words = w
			break
		}
		next := literalFeature(e.Feature)
		if next == 0 || allow&next != 0 {
			break
		}
		allow |= next
	}
	return nil, err
}

// literalSet is a set of features that split should take literally.
type literalSet uint8

const (
	litGlob literalSet = 1 << iota
	litTilde
	litComment
	litBrace
)

func literalFeature(feature string) literalSet {
	switch feature {
	case featGlob:
		return litGlob
	case featTilde:
		return litTilde
	case featComment:
		return litComment
	case featBrace:
		return litBrace
	}
	return 0
}

func split(s string, allow literalSet) ([]string, *RefusedError) {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return nil, refuse(s, i, featNUL)
	}
	var (
		words []string
		buf   strings.Builder
		// State of the current word; reset by endWord.
		inWord    bool // a word has started, possibly empty ('' or "")
		wordStart int  // byte offset where the current word started
		digits    bool // word so far is unquoted ASCII digits (an IO number before < or >)
		name      bool // word so far is an unquoted shell name (an assignment before =)
		braceOpen = -1 // offset of an unquoted { in this word not yet closed
		braceSep  bool // an unquoted , or .. followed braceOpen (brace expansion)
		prevDot   bool // the previous character was an unquoted .
	)
	startWord := func(at int) {
		if !inWord {
			inWord, wordStart = true, at
			digits, name = true, true
		}
	}
	endWord := func() {
		if inWord {
			words = append(words, buf.String())
			buf.Reset()
		}
		inWord = false
		braceOpen, braceSep, prevDot = -1, false, false
	}
	// quoted marks the current word as containing quoted or escaped text,
	// which a shell never reads as an IO number or an assignment name.
	quoted := func() {
		digits, name = false, false
		prevDot = false
	}
	// wordEndsAt reports whether the word would end right after offset i,
	// that is, whether s[i] alone would form a whole word.
	wordEndsAt := func(i int) bool {
		return i+1 == len(s) || isBlank(s[i+1])
	}

	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case isBlank(c):
			// A newline between words would run the rest as a second
			// command in a shell: refuse it like ';'. Leading and trailing
			// newlines (YAML block scalars) are only blanks.
			if c == '\n' && (inWord || len(words) > 0) && strings.TrimLeft(s[i:], " \t\n") != "" {
				return nil, refuse(s, i, featSequence)
			}
			endWord()
			i++
			continue

		case c == '\\':
			if i+1 == len(s) {
				return nil, refuse(s, i, featTrailingBS)
			}
			if s[i+1] == '\n' {
				i += 2 // line continuation: vanishes, does not start a word
				continue
			}
			startWord(i)
			quoted()
			_, size := utf8.DecodeRuneInString(s[i+1:])
			buf.WriteString(s[i+1 : i+1+size])
			i += 1 + size
			continue

		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, refuse(s, i, featUnterminated)
			}
			startWord(i)
			quoted()
			buf.WriteString(s[i+1 : i+1+end])
			i += end + 2
			continue

		case c == '"':
			startWord(i)
			quoted()
			open := i
			i++
			for {
				if i == len(s) {
					return nil, refuse(s, open, featUnterminated)
				}
				d := s[i]
				if d == '"' {
					i++
					break
				}
				switch d {
				case '\\':
					if i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0 {
						if s[i+1] != '\n' {
							buf.WriteByte(s[i+1])
						}
						i += 2
						continue
					}
					buf.WriteByte('\\') // backslash before anything else is literal
				case '$':
					return nil, refuse(s, i, dollarFeature(s, i))
				case '`':
					return nil, refuse(s, i, featCommandSubst)
				default:
					buf.WriteByte(d)
				}
				i++
			}
			continue

		case c == '$':
			return nil, refuse(s, i, dollarFeature(s, i))
		case c == '`':
			return nil, refuse(s, i, featCommandSubst)
		case c == '|':
			if i+1 < len(s) && s[i+1] == '|' {
				return nil, refuse(s, i, featAndOr)
			}
			return nil, refuse(s, i, featPipe)
		case c == '&':
			switch {
			case i+1 < len(s) && s[i+1] == '&':
				return nil, refuse(s, i, featAndOr)
			case i+1 < len(s) && s[i+1] == '>':
				return nil, refuse(s, i, featRedirect) // bash &> and &>>
			}
			return nil, refuse(s, i, featBackground)
		case c == ';':
			return nil, refuse(s, i, featSequence)
		case c == '<' || c == '>':
			if inWord && digits {
				return nil, refuse(s, wordStart, featRedirect) // 2>err
			}
			return nil, refuse(s, i, featRedirect)
		case c == '(' || c == ')':
			return nil, refuse(s, i, featSubshell)
		case c == '*' || c == '?' || c == '[':
			if allow&litGlob == 0 {
				return nil, refuse(s, i, featGlob)
			}
		case c == '~' && !inWord:
			if allow&litTilde == 0 {
				return nil, refuse(s, i, featTilde)
			}
		case c == '#' && !inWord:
			if allow&litComment == 0 {
				return nil, refuse(s, i, featComment)
			}
		case c == '=' && inWord && name && len(words) == 0:
			// NAME=value before the command is an environment assignment.
			return nil, refuse(s, wordStart, featVariable)
		case c == '{' || c == '}':
			if allow&litBrace != 0 {
				break
			}
			if !inWord && wordEndsAt(i) {
				return nil, refuse(s, i, featBrace) // brace group
			}
			if c == '{' {
				if braceOpen < 0 {
					braceOpen, braceSep = i, false
				}
			} else if braceOpen >= 0 {
				if braceSep {
					return nil, refuse(s, braceOpen, featBrace) // {a,b} or {1..3}
				}
				braceOpen = -1
			}
		case c == ',' && braceOpen >= 0:
			braceSep = true
		case c == '.' && braceOpen >= 0 && prevDot:
			braceSep = true
		}

		// A literal character, unquoted. Copy the whole rune so that
		// multi-byte characters stay intact.
		startWord(i)
		digits = digits && c >= '0' && c <= '9'
		name = name && (c == '_' || isLetter(c) || (c >= '0' && c <= '9' && i > wordStart))
		prevDot = c == '.'
		_, size := utf8.DecodeRuneInString(s[i:])
		buf.WriteString(s[i : i+size])
		i += size
	}
	endWord()
	if len(words) == 0 {
		return nil, refuse(s, 0, featEmpty)
	}
	return words, nil
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' }

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// dollarFeature classifies the expansion an unquoted or double-quoted $ at
// s[i] starts. Every $ is refused, even one POSIX sh would keep literal.
func dollarFeature(s string, i int) string {
	switch {
	case strings.HasPrefix(s[i:], "$(("):
		return featArithmetic
	case strings.HasPrefix(s[i:], "$("):
		return featCommandSubst
	}
	return featVariable
}

func refuse(s string, offset int, feature string) *RefusedError {
	return &RefusedError{
		Input:   s,
		Offset:  offset,
		Column:  utf8.RuneCountInString(s[:offset]) + 1,
		Feature: feature,
	}
}

// Quote returns arg quoted so that a POSIX shell reads it back as exactly one
// word equal to arg. Words made only of [A-Za-z0-9@%+=:,./_-] (and
// non-empty) stay bare; anything else is single-quoted, with each single
// quote written as quote, backslash, quote, quote. The empty string becomes
// two single quotes:
//
//	Quote("a b")  == `'a b'`
//	Quote("it's") == `'it'\''s'`
//	Quote("")     == `''`
//
// The guarantee is for a word in argument position: as the first word of a
// command, a shell may read a bare result as a keyword (if) or an
// assignment (A=b); Join takes care of that. An arg containing a NUL byte
// cannot be passed through a shell (nor exec'd); Quote does not check for it.
func Quote(arg string) string {
	if arg == "" {
		return "''"
	}
	if isBare(arg) {
		return arg
	}
	return "'" + strings.ReplaceAll(arg, "'", `'\''`) + "'"
}

// Join quotes each element and joins with single spaces: the command string
// hookbox hands to `sh -c`. argv[0] is quoted even when Quote would leave it
// bare if a shell would otherwise read it as a reserved word (if, time, ...)
// or as an environment assignment (NAME=value). Join of an empty argv is "".
//
// A bare argv[0] without a slash is still looked up by the shell, which
// prefers its builtins (echo, printf, test) over programs of the same name;
// give an absolute path where that matters.
func Join(argv []string) string {
	var b strings.Builder
	for i, arg := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		if i == 0 && isBare(arg) && (shellKeywords[arg] || strings.Contains(arg, "=")) {
			b.WriteString("'" + arg + "'") // bare words contain no '
			continue
		}
		b.WriteString(Quote(arg))
	}
	return b.String()
}

// shellKeywords are the reserved words of POSIX sh and bash that consist only
// of characters Quote leaves bare; as the first word they are syntax.
var shellKeywords = map[string]bool{
	"case": true, "do": true, "done": true, "elif": true, "else": true,
	"esac": true, "fi": true, "for": true, "if": true, "in": true,
	"then": true, "until": true, "while": true,
	"coproc": true, "function": true, "select": true, "time": true,
}

func isBare(arg string) bool {
	if arg == "" {
		return false
	}
	for i := 0; i < len(arg); i++ {
		c := arg[i]
		if isLetter(c) || c >= '0' && c <= '9' || strings.IndexByte("@%+=:,./_-", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// Error is one line: what was refused, where, and how to write it instead.
func (e *RefusedError) Error() string {
	in := strconv.Quote(e.Input)
	tok := e.token()
	if tok == "\n" {
		tok = `\n` // keep the message on one line
	}
	asShell := jsonList([]string{"/bin/sh", "-c", e.Input})
	needsShell := func(what, alternative string) string {
		return fmt.Sprintf("%s: %s '%s' at column %d needs a shell, and hookbox runs none; "+
			"write the command as an argv list, e.g. %s if you really need a shell (declare /bin/sh in tools)%s",
			in, what, tok, e.Column, asShell, alternative)
	}
	literally := func() string {
		if e.Words == nil {
			return ""
		}
		return ", e.g. " + jsonList(e.Words)
	}

	switch e.Feature {
	case featEmpty:
		msg := `an empty command; give argv[0] and its arguments as a list, e.g. ["/usr/bin/true"]`
		if e.Input == "" {
			return msg
		}
		return in + ": " + msg
	case featUnterminated:
		kind := "single"
		if tok == `"` {
			kind = "double"
		}
		return fmt.Sprintf("%s: %s quote (%s) opened at column %d is never closed; "+
			"close it, or for a literal %s write \\%s, or write the command as an argv list",
			in, kind, tok, e.Column, tok, tok)
	case featTrailingBS:
		return fmt.Sprintf(`%s: backslash at column %d ends the command and escapes nothing; `+
			`remove it, or write \\ for a literal backslash, or write the command as an argv list`,
			in, e.Column)
	case featPipe:
		return needsShell("pipe", ", or split it into separate hooks")
	case featAndOr:
		return needsShell("list operator", ", or split it into separate hooks")
	case featBackground:
		return needsShell("background operator", ", or split it into separate hooks")
	case featSequence:
		if tok == `\n` {
			return needsShell("line break", ", or split it into separate hooks")
		}
		return needsShell("command separator", ", or split it into separate hooks")
	case featRedirect:
		return needsShell("redirection", ", or pass the file to the program as an argument")
	case featSubshell:
		return needsShell("subshell parenthesis", "; for a literal parenthesis write \\"+tok+" or quote it")
	case featCommandSubst:
		return needsShell("command substitution", ", or compute the value beforehand and write it into the argv")
	case featArithmetic:
		return needsShell("arithmetic expansion", ", or compute the value beforehand and write it into the argv")
	case featVariable:
		if !strings.HasPrefix(tok, "$") {
			return fmt.Sprintf("%s: environment assignment '%s' at column %d needs a shell, and hookbox runs none; "+
				"set %s in the hook's env instead, or quote the word if it really is the program's name",
				in, tok, e.Column, strings.TrimSuffix(tok, "="))
		}
		if tok == "$" {
			return fmt.Sprintf(`%s: '$' at column %d starts a shell expansion, and hookbox runs none; `+
				`for a literal $ write \$ or use single quotes`, in, e.Column)
		}
		return fmt.Sprintf(`%s: variable '%s' at column %d is expanded by a shell, and hookbox runs none; `+
			`pass the value through the hook's env, or write the argv list with the value spelled out; `+
			`for a literal $ write \$ or use single quotes`, in, tok, e.Column)
	case featGlob:
		return fmt.Sprintf(`%s: glob '%s' at column %d is expanded by a shell, and hookbox runs none; `+
			`list the files explicitly, or quote it ('%s' or \%s) to pass it literally%s`,
			in, tok, e.Column, tok, tok, literally())
	case featTilde:
		return fmt.Sprintf(`%s: tilde '~' at column %d is expanded by a shell to a home directory, and hookbox runs none; `+
			`write the absolute path, or quote it ('~' or \~) to pass it literally%s`, in, e.Column, literally())
	case featComment:
		return fmt.Sprintf(`%s: '#' at column %d starts a shell comment; `+
			`remove the comment, or quote it ('#' or \#) to pass it literally%s`, in, e.Column, literally())
	case featBrace:
		return fmt.Sprintf(`%s: brace '%s' at column %d is shell syntax (a brace group or brace expansion), and hookbox runs none; `+
			`write the words out, or quote it ('%s' or \%s) to pass it literally%s`,
			in, tok, e.Column, tok, tok, literally())
	case featNUL:
		return fmt.Sprintf("%s: NUL byte at column %d cannot be part of a command's arguments; remove it", in, e.Column)
	}
	return fmt.Sprintf("%s: %s at column %d cannot be used as an argv", in, e.Feature, e.Column)
}

// token is the text of the refused construct, for messages. It is derived
// from Input and Offset only, so a RefusedError built by hand still prints.
func (e *RefusedError) token() string {
	if e.Offset < 0 || e.Offset >= len(e.Input) {
		return ""
	}
	rest := e.Input[e.Offset:]
	switch e.Feature {
	case featAndOr:
		if len(rest) >= 2 {
			return rest[:2]
		}
	case featArithmetic:
		return "$(("
	case featCommandSubst:
		if rest[0] == '$' {
			return "$("
		}
		return "`"
	case featRedirect:
		n := 0
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		for _, op := range []string{"&>>", "<<<", "<<-", "&>", "<<", "<>", "<&", "<(", ">>", ">&", ">|", ">(", "<", ">"} {
			if strings.HasPrefix(rest[n:], op) {
				return rest[:n+len(op)]
			}
		}
	case featVariable:
		if rest[0] != '$' {
			// An assignment: the name and its =.
			return rest[:strings.IndexByte(rest, '=')+1]
		}
		return variableToken(rest)
	}
	_, size := utf8.DecodeRuneInString(rest)
	return rest[:size]
}

// variableToken is the expansion starting at rest[0] == '$': $NAME, ${NAME},
// $1, $?, or just $ when what follows is not short and simple.
func variableToken(rest string) string {
	if len(rest) < 2 {
		return "$"
	}
	c := rest[1]
	switch {
	case c == '{':
		end := strings.IndexByte(rest, '}')
		if end > 0 && end <= 64 && !strings.ContainsAny(rest[:end], "\n'") {
			return rest[:end+1]
		}
		return "${"
	case c == '_' || isLetter(c):
		n := 2
		for n < len(rest) && (rest[n] == '_' || isLetter(rest[n]) || rest[n] >= '0' && rest[n] <= '9') {
			n++
		}
		return rest[:n]
	case c >= '0' && c <= '9' || strings.IndexByte("@*#?-$!", c) >= 0:
		return rest[:2]
	}
	return "$"
}

// jsonList writes words as a JSON array, which is also a YAML flow
// sequence, so the suggestion can be pasted into either.
func jsonList(words []string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, w := range words {
		if i > 0 {
			b.WriteString(", ")
		}
		var s strings.Builder
		enc := json.NewEncoder(&s)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(w); err != nil {
			// Encoding a string cannot fail; keep the message usable anyway.
			s.Reset()
			s.WriteString(strconv.Quote(w))
		}
		b.WriteString(strings.TrimSuffix(s.String(), "\n"))
	}
	b.WriteByte(']')
	return b.String()
}
