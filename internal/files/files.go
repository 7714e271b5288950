// Package files words the errors of the files a user names on the
// command line (models, plans, profiles, traces, outputs), so every
// message names the path the user gave once, followed by what went wrong,
// and reads them with a bound: a file that declares no size (a pipe, a
// FIFO, a character device such as /dev/zero) is read up to StreamLimit.
package files

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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

// Read reads the file at path whole, as ReadFile. Its error reads
// "<path>: cannot read the <what>: <cause>" and wraps the cause.
func Read(path, what string) ([]byte, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot read the %s: %w", path, what, Cause(err))
	}
	return data, nil
}

// StreamLimit is the most ReadFile reads from a file that declares no
// size: 2 GiB, the largest protobuf message (an ONNX model or a
// TensorFlow GraphDef), more than any text file opplace reads. A
// variable for tests.
var StreamLimit int64 = 2 << 30

// ErrNUL is a stream whose first byte is NUL: no format opplace reads
// (protobuf, JSON, YAML, gzip) starts with one, and /dev/zero does.
var ErrNUL = errors.New("it starts with a NUL byte, as no file opplace reads does (is it /dev/zero?)")

// TooLargeError is a stream longer than StreamLimit.
type TooLargeError struct{ Limit int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("it is larger than %d bytes, the most opplace reads from a pipe or device: if it is what you meant, save it to a file and give the file", e.Limit)
}

// ReadFile is os.ReadFile with a bound on what it allocates: a regular
// file is read whole (its size is what it declares), anything else that
// can be opened (a pipe such as /dev/stdin or <(...), a FIFO, a
// character device) is read as a stream, refused at its first byte when
// that is NUL (ErrNUL) and once it passes StreamLimit (*TooLargeError).
// Errors are *fs.PathError, as os.ReadFile's, so Cause applies.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var data []byte
	if st.Mode().IsRegular() || st.IsDir() {
		var buf bytes.Buffer
		buf.Grow(int(min(st.Size(), StreamLimit)) + 512)
		_, err = buf.ReadFrom(f)
		data = buf.Bytes()
	} else {
		data, err = ReadStream(f, StreamLimit)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: Cause(err)}
	}
	return data, nil
}

// ReadStream reads r to its end, refusing a stream that starts with a
// NUL byte (ErrNUL) or holds more than limit bytes (*TooLargeError)
// before it has allocated more than limit.
func ReadStream(r io.Reader, limit int64) ([]byte, error) {
	var head [1]byte
	n, err := io.ReadFull(r, head[:])
	switch {
	case n == 0 && (err == io.EOF || err == io.ErrUnexpectedEOF):
		return nil, nil
	case err != nil:
		return nil, err
	case head[0] == 0:
		return nil, ErrNUL
	}
	var buf bytes.Buffer
	buf.WriteByte(head[0])
	if _, err := buf.ReadFrom(io.LimitReader(r, limit)); err != nil {
		return nil, err
	}
	if int64(buf.Len()) > limit {
		return nil, &TooLargeError{Limit: limit}
	}
	return buf.Bytes(), nil
}
