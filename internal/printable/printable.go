// Package printable escapes the characters of untrusted text (op, tensor
// and device names read from model and cluster files) that a terminal,
// browser or trace viewer would act on instead of showing: C0 and C1
// control characters (BEL, CR, ESC, NEL ...), DEL, the bidirectional and
// other invisible format characters (U+202E RIGHT-TO-LEFT OVERRIDE,
// U+200B ZERO WIDTH SPACE, U+FEFF ...), the line and paragraph
// separators, and bytes that are not UTF-8. Each becomes a visible
// escape, \a or \u202e or \U000e0001 for a rune (Go's short form
// where Go has one) and \xff for a stray byte, so
// two names that differ only there still read differently. Every writer
// of what a person reads (the table, the HTML report, the Graphviz views,
// the schedule trace, errors and warnings) sends names through here;
// the plan file keeps them as they are.
package printable

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"
)

// String is s with every character a reader would not see escaped,
// newlines and tabs included: one line, whatever s holds.
func String(s string) string { return escape(s, false) }

// Text is s with every character a reader would not see escaped, except
// newlines and tabs: for a whole document, whose lines and columns are
// its own.
func Text(s string) string { return escape(s, true) }

// Safe reports whether r shows as itself. Newline and tab are not safe:
// String escapes them, Text keeps them.
func Safe(r rune) bool {
	switch {
	case r == utf8.RuneError:
		return true // a real U+FFFD; a stray byte is caught by its size
	case r < 0x20 || r >= 0x7f && r <= 0x9f:
		return false
	case r < 0x7f:
		return true
	case r == '\u2028' || r == '\u2029':
		return false
	}
	return !unicode.Is(unicode.Cf, r)
}

func escape(s string, keepLines bool) string {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !ok(r, n, keepLines) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s // the common case: nothing to escape, no copy
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case ok(r, n, keepLines):
			b.WriteString(s[i : i+n])
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case short[r] != "":
			b.WriteString(short[r])
		case r > 0xffff:
			fmt.Fprintf(&b, `\U%08x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += n
	}
	return b.String()
}

// short are the escapes Go writes for the common control characters.
var short = map[rune]string{'\a': `\a`, '\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`, '\v': `\v`}

func ok(r rune, n int, keepLines bool) bool {
	if r == utf8.RuneError && n == 1 {
		return false
	}
	return Safe(r) || keepLines && (r == '\n' || r == '\t')
}

// Writer passes what is written to w through Text. Each Write should
// hold whole characters (a formatted line does): a character split
// between two Writes is escaped byte by byte.
func Writer(w io.Writer) io.Writer { return writer{w} }

type writer struct{ w io.Writer }

func (p writer) Write(b []byte) (int, error) {
	if bytes.IndexFunc(b, func(r rune) bool { return !Safe(r) && r != '\n' && r != '\t' }) < 0 && utf8.Valid(b) {
		return p.w.Write(b)
	}
	if _, err := io.WriteString(p.w, Text(string(b))); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Columns is a tabwriter.Writer whose input is escaped before it is
// aligned, so an escaped name's width counts.
type Columns struct {
	io.Writer
	tw *tabwriter.Writer
}

// NewColumns writes through tw, escaping what is written to it.
func NewColumns(tw *tabwriter.Writer) Columns { return Columns{Writer(tw), tw} }

// Flush writes the aligned rows (tabwriter.Writer.Flush).
func (c Columns) Flush() error { return c.tw.Flush() }
