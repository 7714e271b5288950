package files

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "m.json")
	_, err := Read(missing, "plan")
	if want := missing + ": cannot read the plan: no such file or directory"; err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%v does not wrap fs.ErrNotExist", err)
	}
	ok := filepath.Join(dir, "p.json")
	if err := os.WriteFile(ok, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := Read(ok, "plan"); err != nil || string(data) != "{}" {
		t.Errorf("got %q, %v", data, err)
	}
}

func TestCause(t *testing.T) {
	errno := errors.New("errno")
	for _, err := range []error{
		&fs.PathError{Op: "open", Path: "x", Err: errno},
		&os.LinkError{Op: "rename", Old: "a", New: "b", Err: errno},
	} {
		if got := Cause(err); got != errno {
			t.Errorf("Cause(%v) = %v", err, got)
		}
	}
	if other := errors.New("other"); Cause(other) != other {
		t.Error("Cause changed an error that is neither")
	}
}

// TestReadFileStreams reads files that declare no size: a FIFO written by
// another goroutine, /dev/zero (refused at its first byte), and a stream
// longer than StreamLimit (refused once past it).
func TestReadFileStreams(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "model.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	want := bytes.Repeat([]byte("opplace "), 100_000) // more than a pipe's buffer
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer w.Close()
		w.Write(want)
	}()
	got, err := ReadFile(fifo)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("FIFO: read %d bytes, %v; want %d", len(got), err, len(want))
	}

	if _, err := os.Stat("/dev/zero"); err == nil {
		_, err := Read("/dev/zero", "model")
		if !errors.Is(err, ErrNUL) || !strings.HasPrefix(err.Error(), "/dev/zero: cannot read the model: it starts with a NUL byte") {
			t.Errorf("/dev/zero: got %v, want ErrNUL", err)
		}
	}

	defer func(l int64) { StreamLimit = l }(StreamLimit)
	StreamLimit = 1000
	for _, tc := range []struct {
		size    int
		tooLong bool
	}{{1000, false}, {1001, true}, {0, false}} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			w.Write(bytes.Repeat([]byte("x"), tc.size))
			w.Close()
		}()
		got, err := ReadFile("/dev/fd/" + strconv.Itoa(int(r.Fd())))
		r.Close()
		var tl *TooLargeError
		switch {
		case tc.tooLong && (!errors.As(err, &tl) || tl.Limit != 1000 || !strings.Contains(err.Error(), "larger than 1000 bytes")):
			t.Errorf("%d bytes through a pipe: got %v, want a *TooLargeError", tc.size, err)
		case !tc.tooLong && (err != nil || len(got) != tc.size):
			t.Errorf("%d bytes through a pipe: read %d, %v", tc.size, len(got), err)
		}
	}
}
