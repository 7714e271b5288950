package costed

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// scanner reads one JSON document token by token from a reader through a
// window that slides over the file, so a graph of a million ops is
// decoded in one pass without holding the file or a tree of it in memory
// (encoding/json's Decoder.Token allocates per token and decodes a few
// MB/s; this reads at memory speed). It knows JSON, not the costed
// format: parse.go drives it. Errors are *Error with the line and column.
type scanner struct {
	r    io.Reader
	file string
	buf  []byte
	// pos is the next unread byte of buf, end the end of what was read.
	pos, end int
	// base is the file offset of buf[0]; lines counts the newlines
	// before it and lineStart is the offset just after the last of them.
	base, lineStart int64
	lines           int
	eof             bool
	rerr            error
	// scratch holds a string with escapes, decoded.
	scratch []byte
}

const scanWindow = 1 << 20

func newScanner(r io.Reader, file string) *scanner {
	return &scanner{r: r, file: file, buf: make([]byte, scanWindow)}
}

// more reads more of the file, keeping buf[pos:end], and reports whether
// it got any. The window grows only for a token longer than itself.
func (s *scanner) more() bool {
	if s.eof {
		return false
	}
	s.countLines(s.buf[:s.pos])
	n := copy(s.buf, s.buf[s.pos:s.end])
	s.base += int64(s.pos)
	s.pos, s.end = 0, n
	if n == len(s.buf) {
		s.buf = append(s.buf, make([]byte, len(s.buf))...)
	}
	for {
		m, err := s.r.Read(s.buf[s.end:])
		s.end += m
		if err != nil {
			s.eof = true
			if err != io.EOF {
				s.rerr = err
			}
			return m > 0
		}
		if m > 0 {
			return true
		}
	}
}

// countLines accounts for the newlines of b, the start of the window,
// before the window moves past it.
func (s *scanner) countLines(b []byte) {
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		s.lines += bytes.Count(b, []byte{'\n'})
		s.lineStart = s.base + int64(i) + 1
	}
}

// where is "line:column" of buf[i], both from 1.
func (s *scanner) where(i int) string {
	line, start := s.lines+1, s.lineStart
	for j := 0; j < i && j < s.end; j++ {
		if s.buf[j] == '\n' {
			line++
			start = s.base + int64(j) + 1
		}
	}
	return fmt.Sprintf("%d:%d", line, s.base+int64(i)-start+1)
}

// errAt is a syntax error at buf[i].
func (s *scanner) errAt(i int, format string, args ...any) error {
	return errorf(s.file, "", "invalid JSON at line %s: %s", s.where(i), fmt.Sprintf(format, args...))
}

// truncated is the error for a file that ends inside a value.
func (s *scanner) truncated() error {
	if s.rerr != nil {
		return errorf(s.file, "", "cannot read the graph: %v", s.rerr)
	}
	return errorf(s.file, "", "the JSON ends early: the file is truncated")
}

// peek skips white space and returns the next byte without consuming it;
// ok is false at the end of the file.
func (s *scanner) peek() (byte, bool) {
	for {
		for s.pos < s.end {
			switch c := s.buf[s.pos]; c {
			case ' ', '\t', '\r', '\n':
				s.pos++
			default:
				return c, true
			}
		}
		if !s.more() {
			return 0, false
		}
	}
}

// quoteChar renders a byte as encoding/json does in its messages.
func quoteChar(c byte) string {
	switch {
	case c == '\'':
		return `'\''`
	case c == '"':
		return `'"'`
	}
	q := strconv.Quote(string(c))
	return "'" + q[1:len(q)-1] + "'"
}

// expect consumes c, after white space; context says what was being read
// for the message ("after object key").
func (s *scanner) expect(c byte, context string) error {
	got, ok := s.peek()
	if !ok {
		return s.truncated()
	}
	if got != c {
		return s.errAt(s.pos, "invalid character %s %s", quoteChar(got), context)
	}
	s.pos++
	return nil
}

// next reports, inside an object or an array whose opening byte was
// consumed, whether another member follows: it consumes the comma (or
// nothing before the first member) and false means the closing byte was
// consumed.
func (s *scanner) next(first bool, close byte) (bool, error) {
	c, ok := s.peek()
	if !ok {
		return false, s.truncated()
	}
	if c == close {
		s.pos++
		return false, nil
	}
	if first {
		return true, nil
	}
	if c != ',' {
		what := "after array element"
		if close == '}' {
			what = "after object key:value pair"
		}
		return false, s.errAt(s.pos, "invalid character %s %s", quoteChar(c), what)
	}
	s.pos++
	if close == '}' {
		// A trailing comma is an error in JSON: a key must follow.
		c, ok := s.peek()
		if !ok {
			return false, s.truncated()
		}
		if c != '"' {
			return false, s.errAt(s.pos, "invalid character %s looking for beginning of object key string", quoteChar(c))
		}
	}
	return true, nil
}

// key reads an object key and its colon. The bytes are valid until the
// scanner reads on.
func (s *scanner) key() ([]byte, error) {
	c, ok := s.peek()
	if !ok {
		return nil, s.truncated()
	}
	if c != '"' {
		return nil, s.errAt(s.pos, "invalid character %s looking for beginning of object key string", quoteChar(c))
	}
	k, err := s.str()
	if err != nil {
		return nil, err
	}
	// The colon may sit past the window: keep the key in scratch then.
	if s.pos < s.end && s.buf[s.pos] == ':' {
		s.pos++
		return k, nil
	}
	s.scratch = append(s.scratch[:0], k...)
	if err := s.expect(':', "after object key"); err != nil {
		return nil, err
	}
	return s.scratch, nil
}

// str reads a string whose opening quote is at pos and returns its
// decoded bytes, valid until the scanner reads on: a view of the window
// when the string has no escapes, else scratch.
func (s *scanner) str() ([]byte, error) {
	i := s.pos + 1
	plain := true
	for {
		if i >= s.end {
			n := i - s.pos
			if !s.more() {
				return nil, s.truncated()
			}
			i = s.pos + n
			continue
		}
		// Skip plain bytes in a tight loop: strings are most of a file.
		for _, c := range s.buf[i:s.end] {
			if !plainByte[c] {
				break
			}
			i++
		}
		if i >= s.end {
			continue
		}
		c := s.buf[i]
		switch {
		case c == '"':
			raw := s.buf[s.pos+1 : i]
			s.pos = i + 1
			if plain {
				return raw, nil
			}
			return s.unescape(raw)
		case c == '\\':
			plain = false
			i += 2 // the escaped byte is checked by unescape
			continue
		case c < 0x20:
			return nil, s.errAt(i, "invalid character %s in string literal", quoteChar(c))
		case c >= utf8.RuneSelf:
			plain = false
		}
		i++
	}
}

// plainByte marks the bytes a string holds as they are: printable ASCII
// but the quote and the backslash.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// unescape decodes a string's escapes and replaces invalid UTF-8 with
// U+FFFD, as encoding/json does.
func (s *scanner) unescape(raw []byte) ([]byte, error) {
	out := s.scratch[:0]
	start := s.pos - len(raw) - 1 // raw's offset in buf, for messages
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			if i+1 >= len(raw) {
				return nil, s.errAt(start+i, "invalid escape in string literal")
			}
			switch e := raw[i+1]; e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, bad := hex4(raw[i+2:])
				if bad >= 0 {
					at := i + 2 + bad
					if at >= len(raw) { // the closing quote
						return nil, s.errAt(start+at, "invalid character '\"' in \\u hexadecimal character escape")
					}
					return nil, s.errAt(start+at, "invalid character %s in \\u hexadecimal character escape", quoteChar(raw[at]))
				}
				i += 6
				if utf16.IsSurrogate(r) {
					r2, ok := rune(0), false
					if i+1 < len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
						var bad int
						r2, bad = hex4(raw[i+2:])
						ok = bad < 0
					}
					if d := utf16.DecodeRune(r, r2); ok && d != utf8.RuneError {
						r = d
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				out = utf8.AppendRune(out, r)
				continue
			default:
				return nil, s.errAt(start+i+1, "invalid character %s in string escape code", quoteChar(e))
			}
			i += 2
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, n := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && n == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, raw[i:i+n]...)
			}
			i += n
		}
	}
	s.scratch = out
	return out, nil
}

// hex4 decodes four hex digits; bad is the index of the first byte that
// is not one (len(b) when b is short), or -1.
func hex4(b []byte) (r rune, bad int) {
	for i := range 4 {
		if i >= len(b) {
			return 0, i
		}
		c := b[i]
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, i
		}
		r = r<<4 | rune(c)
	}
	return r, -1
}

// kind names the JSON value starting with c, for type errors.
func kind(c byte) string {
	switch c {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// value reports the kind of the next value after white space without
// consuming it: one of the names kind returns.
func (s *scanner) value() (string, error) {
	c, ok := s.peek()
	if !ok {
		return "", s.truncated()
	}
	if !(c == '"' || c == '{' || c == '[' || c == 't' || c == 'f' || c == 'n' || c == '-' || '0' <= c && c <= '9') {
		return "", s.errAt(s.pos, "invalid character %s looking for beginning of value", quoteChar(c))
	}
	return kind(c), nil
}

// literal consumes true, false or null, the next value.
func (s *scanner) literal() error {
	c, _ := s.peek()
	word := "null"
	switch c {
	case 't':
		word = "true"
	case 'f':
		word = "false"
	}
	for s.end-s.pos < len(word) {
		if !s.more() {
			break
		}
	}
	for i := 0; i < len(word); i++ {
		if s.pos+i >= s.end {
			return s.truncated()
		}
		if s.buf[s.pos+i] != word[i] {
			return s.errAt(s.pos+i, "invalid character %s in literal %s (expecting %s)", quoteChar(s.buf[s.pos+i]), word, quoteChar(word[i]))
		}
	}
	s.pos += len(word)
	return nil
}

// at returns the byte off bytes past pos, reading on as needed; offsets
// from pos stay valid when the window moves.
func (s *scanner) at(off int) (byte, bool) {
	for s.pos+off >= s.end {
		if !s.more() {
			return 0, false
		}
	}
	return s.buf[s.pos+off], true
}

// number reads a number, the next value, checking JSON's grammar, and
// returns its text, valid until the scanner reads on.
func (s *scanner) number() ([]byte, error) {
	off := 0
	digits := func() int {
		n := 0
		for {
			c, ok := s.at(off)
			if !ok || c < '0' || c > '9' {
				return n
			}
			off++
			n++
		}
	}
	bad := func(where string) error {
		c, ok := s.at(off)
		if !ok {
			return s.truncated()
		}
		return s.errAt(s.pos+off, "invalid character %s %s", quoteChar(c), where)
	}
	if c, _ := s.at(off); c == '-' {
		off++
	}
	switch c, _ := s.at(off); {
	case c == '0':
		off++
	case '1' <= c && c <= '9':
		digits()
	default:
		return nil, bad("in numeric literal")
	}
	if c, ok := s.at(off); ok && c == '.' {
		off++
		if digits() == 0 {
			return nil, bad("after decimal point in numeric literal")
		}
	}
	if c, ok := s.at(off); ok && (c == 'e' || c == 'E') {
		off++
		if c, ok := s.at(off); ok && (c == '+' || c == '-') {
			off++
		}
		if digits() == 0 {
			return nil, bad("in exponent of numeric literal")
		}
	}
	text := s.buf[s.pos : s.pos+off]
	s.pos += off
	return text, nil
}

// finish checks that nothing but white space follows the document.
func (s *scanner) finish() error {
	if _, ok := s.peek(); ok {
		return errorf(s.file, "", "unexpected data after the JSON object at line %s", s.where(s.pos))
	}
	if s.rerr != nil {
		return errorf(s.file, "", "cannot read the graph: %v", s.rerr)
	}
	return nil
}

// unsafeString views b as a string without copying, for parsing numbers
// and looking keys up in maps; the string must not outlive b's contents.
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
