package files

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
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
