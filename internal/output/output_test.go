package output_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/opplace/opplace/internal/output"
)

// listDir is the sorted names in dir, temporaries included.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A run that fails anywhere leaves every target as it was and no
// temporary behind; one that succeeds replaces them all.
func TestCommitAllOrNothing(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		files   func(dir string) []output.File
		wantErr string
	}{
		{"rendering fails", func(dir string) []output.File {
			return []output.File{output.Bytes("a", filepath.Join(dir, "a.json"), []byte("new a")),
				{What: "b", Path: filepath.Join(dir, "b.json"), Write: func(w io.Writer) error { io.WriteString(w, "partial"); return boom }}}
		}, "boom"},
		{"missing directory", func(dir string) []output.File {
			return []output.File{output.Bytes("a", filepath.Join(dir, "a.json"), []byte("new a")),
				output.Bytes("b", filepath.Join(dir, "nodir", "b.json"), []byte("new b"))}
		}, "does not exist"},
		{"same file twice", func(dir string) []output.File {
			return []output.File{output.Bytes("a", filepath.Join(dir, "a.json"), []byte("x")),
				output.Bytes("b", filepath.Join(dir, ".", "a.json"), []byte("y"))}
		}, "is the same file as a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, filepath.Join(dir, "a.json"), "old a")
			before := listDir(t, dir)
			err := output.Run{}.Commit(tc.files(dir)...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), ".tmp") {
				t.Errorf("error names a temporary: %v", err)
			}
			if data, _ := os.ReadFile(filepath.Join(dir, "a.json")); string(data) != "old a" {
				t.Errorf("a.json holds %q after a failed run", data)
			}
			if after := listDir(t, dir); !slices.Equal(after, before) {
				t.Errorf("directory holds %v after a failed run, had %v", after, before)
			}
		})
	}
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.json"), "old a")
	if err := os.Chmod(filepath.Join(dir, "a.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := output.Run{}.Commit(output.Bytes("a", filepath.Join(dir, "a.json"), []byte("new a")), output.Bytes("b", filepath.Join(dir, "b.json"), []byte("new b")))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a.json": "new a", "b.json": "new b"} {
		if data, _ := os.ReadFile(filepath.Join(dir, name)); string(data) != want {
			t.Errorf("%s holds %q, want %q", name, data, want)
		}
	}
	if st, _ := os.Stat(filepath.Join(dir, "a.json")); st.Mode().Perm() != 0o600 {
		t.Errorf("a replaced file has mode %v, want its old 0600", st.Mode().Perm())
	}
	if got := listDir(t, dir); !slices.Equal(got, []string{"a.json", "b.json"}) {
		t.Errorf("directory holds %v", got)
	}
}

// Check and Commit refuse what must not be written, naming the output as
// asked for and never a temporary.
func TestRefused(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.onnx")
	write(t, model, "model")
	if err := os.Link(model, filepath.Join(dir, "hard.onnx")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("m.onnx", filepath.Join(dir, "link.onnx")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("loop", filepath.Join(dir, "loop")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "file"), "")
	run := output.Run{Inputs: []output.Input{{What: "the model", Path: model}, {What: "the cluster file", Path: ""}}}
	for _, tc := range []struct {
		name  string
		paths []string
		want  string
	}{
		{"the input", []string{model}, "--out " + model + ": is the model (" + model + "): writing it would destroy the input; name another file"},
		{"the input through ./", []string{filepath.Join(dir, ".", "x", "..", "m.onnx")}, "is the model"},
		{"a hard link to the input", []string{filepath.Join(dir, "hard.onnx")}, "is the model"},
		{"a symbolic link to the input", []string{filepath.Join(dir, "link.onnx")}, "is the model"},
		{"two outputs, one file", []string{filepath.Join(dir, "p.json"), filepath.Join(dir, "p.json")}, "is the same file as --out"},
		{"stdout twice", []string{"/dev/fd/1", "/proc/self/fd/1"}, "is the same file"},
		{"a directory", []string{dir}, "is a directory; name a file inside it"},
		{"a missing directory", []string{filepath.Join(dir, "nodir", "p.json")}, "directory " + filepath.Join(dir, "nodir") + " does not exist"},
		{"under a file", []string{filepath.Join(dir, "file", "p.json")}, filepath.Join(dir, "file") + " is not a directory"},
		{"a link loop", []string{filepath.Join(dir, "loop")}, "too many levels of symbolic links"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var files []output.File
			for _, p := range tc.paths {
				files = append(files, output.Bytes("--out", p, []byte("x")))
			}
			for _, f := range []func(...output.File) error{run.Check, run.Commit} {
				err := f(files...)
				var oe *output.Error
				if !errors.As(err, &oe) {
					t.Fatalf("error %v (%T), want an *output.Error", err, err)
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("error %q lacks %q", err, tc.want)
				}
			}
			if data, _ := os.ReadFile(model); string(data) != "model" {
				t.Errorf("the model holds %q", data)
			}
		})
	}
	// A character device takes any number of outputs.
	if err := run.Commit(output.Bytes("--dot", os.DevNull, []byte("x")), output.Bytes("--trace", os.DevNull, []byte("y"))); err != nil {
		t.Errorf("two outputs to %s: %v", os.DevNull, err)
	}
}

// A symbolic link is written through: its target changes, the link stays
// a link, and a dangling link creates its target.
func TestSymlinkWrittenThrough(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "real.json"), "old")
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	if err := os.Symlink("../real.json", filepath.Join(dir, "sub", "link.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("new.json", filepath.Join(dir, "dangling.json")); err != nil {
		t.Fatal(err)
	}
	err := output.Run{}.Commit(output.Bytes("", filepath.Join(dir, "sub", "link.json"), []byte("new")), output.Bytes("", filepath.Join(dir, "dangling.json"), []byte("created")))
	if err != nil {
		t.Fatal(err)
	}
	for link, want := range map[string]string{"sub/link.json": "new", "dangling.json": "created"} {
		st, err := os.Lstat(filepath.Join(dir, link))
		if err != nil || st.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s is no longer a symbolic link (%v)", link, err)
		}
		if data, _ := os.ReadFile(filepath.Join(dir, link)); string(data) != want {
			t.Errorf("through %s: %q, want %q", link, data, want)
		}
	}
}

// Device nodes and FIFOs are written to, never replaced; /dev/full fails
// with no space left, and then no regular output has changed.
func TestStreams(t *testing.T) {
	// A private /dev/full (character device 1,7): code that replaced
	// device nodes would replace this one, not the machine's.
	if dir := t.TempDir(); syscall.Mknod(filepath.Join(dir, "full"), syscall.S_IFCHR|0o666, 1<<8|7) == nil {
		full := filepath.Join(dir, "full")
		write(t, filepath.Join(dir, "plan.json"), "old")
		err := output.Run{}.Commit(output.Bytes("--out", filepath.Join(dir, "plan.json"), []byte("new")), output.Bytes("--trace", full, []byte("x")))
		var oe *output.Error
		if !errors.As(err, &oe) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "--trace "+full+": no space left on device") {
			t.Errorf("writing a full device: %v", err)
		}
		if st, err := os.Stat(full); err != nil || st.Mode()&os.ModeCharDevice == 0 {
			t.Errorf("the device is no longer a character device: %v", err)
		}
		if data, _ := os.ReadFile(filepath.Join(dir, "plan.json")); string(data) != "old" {
			t.Errorf("plan.json holds %q after the device failed", data)
		}
		if got := listDir(t, dir); !slices.Equal(got, []string{"full", "plan.json"}) {
			t.Errorf("directory holds %v", got)
		}
	} else {
		t.Log("no device node (not root): the full-device case is not run")
	}
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	got := make(chan string)
	go func() {
		data, _ := os.ReadFile(fifo)
		got <- string(data)
	}()
	if err := (output.Run{}).Commit(output.Bytes("--out", fifo, []byte("through the fifo"))); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "through the fifo" {
		t.Errorf("the reader got %q", s)
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced (%v)", err)
	}
	// /dev/fd/1 and /proc/self/fd/1, not /dev/stdout: code that replaced
	// the file it was given fails to create a temporary in /proc, where it
	// would replace the machine's /dev/stdout.
	for _, name := range []string{"/dev/fd/1", "/proc/self/fd/1"} {
		var stdout bytes.Buffer
		if err := (output.Run{Stdout: &stdout}).Commit(output.Bytes("--out", name, []byte("to stdout"))); err != nil || stdout.String() != "to stdout" {
			t.Errorf("%s got %q (%v)", name, stdout.String(), err)
		}
	}
}

// A directory that cannot be written is found by Check, before any work.
func TestCheckUnwritable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes into read-only directories")
	}
	dir := t.TempDir()
	ro := filepath.Join(dir, "ro")
	if err := os.Mkdir(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	err := output.Run{}.Check(output.File{What: "--out", Path: filepath.Join(ro, "p.json")})
	if err == nil || !strings.Contains(err.Error(), "permission denied") || strings.Contains(err.Error(), ".tmp") {
		t.Errorf("error %v", err)
	}
}
