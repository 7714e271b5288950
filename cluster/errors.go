package cluster

import (
	"fmt"
	"github.com/opplace/opplace/internal/yamlfile"
	"strconv"
	"strings"
)

// FileError is a problem with a cluster file: Parse and Load return one
// for every invalid input, so callers can tell bad input (errors.As
// finds a *FileError) from I/O failures. Its Error() reads "file:line:
// field: msg".
type FileError = yamlfile.Error

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
		if d := yamlfile.EditDistance(ls, lk); d < bestD && 3*d <= len(s) {
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

// listNames joins names for a message, eliding the middle of long lists
// so that one error stays one readable line.
func listNames(names []string) string {
	const most = 12
	if len(names) <= most {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:most], ", ") + fmt.Sprintf(", ... (%d in all)", len(names))
}
