package cluster

import (
	"fmt"
	"strconv"
	"strings"
)

// FileError is a problem with a cluster file: Parse and Load return one
// for every invalid input, so callers can tell bad input (errors.As
// finds a *FileError) from I/O failures.
type FileError struct {
	// File is the name given to Parse or the path given to Load.
	File string
	// Line is the 1-based line of the offending YAML node, or 0 when the
	// problem has no single place (an empty file).
	Line int
	// Field is the path of the offending field, like "devices[1].memory";
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
		file = "cluster file"
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

// suggest returns ` (did you mean "x"?)` when one of known is a likely
// misspelling of s, or names it begins with ("V100" for V100-16GB and
// V100-32GB), else "".
func suggest(s string, known []string) string {
	best, bestD := "", 3 // more than two edits is not a typo
	ls := strings.ToLower(s)
	var prefixed []string
	for _, k := range known {
		lk := strings.ToLower(k)
		// An edit must leave most of a word intact: "c" is not a typo
		// for "a".
		if d := editDistance(ls, lk); d < bestD && 3*d <= len(s) {
			best, bestD = k, d
		}
		if s != "" && strings.HasPrefix(lk, ls) {
			prefixed = append(prefixed, strconv.Quote(k))
		}
	}
	switch {
	case best != "":
		return fmt.Sprintf(" (did you mean %q?)", best)
	case len(prefixed) > 0 && len(prefixed) <= 3:
		return " (did you mean " + strings.Join(prefixed, " or ") + "?)"
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b, in bytes.
// Inputs are short field and type names; longer ones are not typos worth
// the quadratic cost.
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

// listNames joins names for a message, eliding the middle of long lists
// so that one error stays one readable line.
func listNames(names []string) string {
	const most = 12
	if len(names) <= most {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:most], ", ") + fmt.Sprintf(", ... (%d in all)", len(names))
}
