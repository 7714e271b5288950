package constraint

import (
	"fmt"
	"strconv"
	"strings"
)

// FileError is a problem with a constraints file: Parse and Load return
// one for every invalid input, so callers can tell bad input (errors.As
// finds a *FileError) from I/O failures.
type FileError struct {
	// File is the name given to Parse or the path given to Load.
	File string
	// Line is the 1-based line of the offending YAML node, or 0 when the
	// problem has no single place (an empty file).
	Line int
	// Field is the path of the offending field, like "pin[1].ops";
	// empty for problems with the file as a whole.
	Field string
	// Msg says what is wrong and what to do about it.
	Msg string
}

// Error formats e as "file:line: field: msg", leaving out the parts that
// are unset.
func (e *FileError) Error() string {
	var b strings.Builder
	file := e.File
	if file == "" {
		file = "constraints file"
	}
	b.WriteString(file)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// FlagError is a rule flag ParseFlag cannot read; errors.As finds it, so
// callers can report it as a usage error.
type FlagError struct {
	// Flag is the flag as the user types it, "--pin".
	Flag string
	// Value is the flag's value as given.
	Value string
	// Msg says what is wrong and how the flag is spelled.
	Msg string
}

// Error formats e as `--flag "value": msg`.
func (e *FlagError) Error() string {
	return fmt.Sprintf("%s %s: %s", e.Flag, strconv.Quote(e.Value), e.Msg)
}

// suggest returns ` (did you mean "x"?)` when one of known is a likely
// misspelling of s, else "".
func suggest(s string, known []string) string {
	best, bestD := "", 3 // more than two edits is not a typo
	ls := strings.ToLower(s)
	for _, k := range known {
		// An edit must leave most of a word intact.
		if d := editDistance(ls, strings.ToLower(k)); d < bestD && 3*d <= len(s) {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between a and b, in bytes;
// long inputs are not typos worth the quadratic cost.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b))
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
