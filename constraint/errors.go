package constraint

import (
	"fmt"
	"github.com/opplace/opplace/internal/yamlfile"
	"strconv"
	"strings"
)

// FileError is a problem with a constraints file: Parse and Load return
// one for every invalid input, so callers can tell bad input (errors.As
// finds a *FileError) from I/O failures. Its Error() reads "file:line:
// field: msg".
type FileError = yamlfile.Error

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
		if d := yamlfile.EditDistance(ls, strings.ToLower(k)); d < bestD && 3*d <= len(s) {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}
