// Package files words the errors of the files a user names on the
// command line (models, plans, profiles, traces, outputs), so every
// message names the path the user gave once, followed by what went wrong.
package files

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Cause strips an *fs.PathError or *os.LinkError down to the error
// beneath (an errno), so a message that names the path itself does not
// name it twice, or name a temporary the user never saw.
func Cause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// Read reads the file at path whole. Its error reads
// "<path>: cannot read the <what>: <cause>" and wraps the cause.
func Read(path, what string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot read the %s: %w", path, what, Cause(err))
	}
	return data, nil
}
