// Package output commits the files one run of opplace writes, together:
// every output is rendered and written to a temporary file beside its
// target, and the temporaries are renamed into place only once every one
// of them was written, so a run that fails leaves no target changed and
// no partial file behind.
//
// The rules, checked before any work (Run.Check) and again at commit:
//   - an output may not be one of the run's inputs (same path, cleaned and
//     made absolute, or the same file through a link);
//   - two outputs may not name one file (a character device such as
//     /dev/null excepted);
//   - an output may not be a directory, and its directory must exist and
//     be writable;
//   - a symbolic link is written through: the file it points to is
//     replaced, the link stays;
//   - a device node or FIFO is written through with a plain open and
//     write, never replaced (so /dev/null discards, /dev/full fails with
//     "no space left on device", and a FIFO's reader gets the data);
//     /dev/stdout is the run's standard output. These are written after
//     every regular file was written to its temporary, and before any is
//     renamed, so a failing write still changes no regular file.
package output

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"github.com/opplace/opplace/internal/files"
)

// Error is an output opplace cannot or must not write. Callers map it to
// the invalid-input exit code: the cause is the path asked for, not a bug.
type Error struct {
	// What names the output as the user asked for it (a flag, "the
	// plan"); may be empty.
	What string
	// Path is the path as given.
	Path string
	// Err is the cause.
	Err error
	// Hint says what to do about it.
	Hint string
}

func (e *Error) Error() string {
	s := e.Path
	if e.What != "" {
		s = e.What + " " + s
	}
	s += ": " + e.Err.Error()
	if e.Hint != "" {
		s += "; " + e.Hint
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// File is one output of a run.
type File struct {
	// What names the output for messages (e.g. the flag that asked for
	// it); may be empty.
	What string
	// Path is where it goes; a File with an empty Path is skipped, so
	// optional outputs can be listed unconditionally.
	Path string
	// Write renders the content. Check does not call it.
	Write func(io.Writer) error
}

// Bytes is a File whose content is data.
func Bytes(what, path string, data []byte) File {
	return File{What: what, Path: path, Write: func(w io.Writer) error { _, err := w.Write(data); return err }}
}

// Input is a file the run reads, which no output may overwrite.
type Input struct {
	// What names it for messages ("the model", "the cluster file").
	What string
	Path string
}

// Run holds what the rules need to know about one run.
type Run struct {
	// Inputs are the files the run reads; empty paths are skipped.
	Inputs []Input
	// Stdout is where /dev/stdout goes (nil: the process's standard
	// output), so an output named /dev/stdout lands in order with what
	// the command prints.
	Stdout io.Writer
}

// kind is what an output path turned out to be.
type kind int

const (
	regular kind = iota // a regular file or a new one: temporary and rename
	stream              // a device node or FIFO: written through
	stdout              // the run's standard output
)

// target is a File resolved.
type target struct {
	File
	kind kind
	// path is where the bytes go: Path with symbolic links followed.
	path string
	// info is the existing file at path, nil when there is none.
	info os.FileInfo
}

// stdoutNames are the names of the process's standard output. Opening
// them anew would, when stdout is redirected to a file, start writing at
// offset 0 over what the shell's descriptor already wrote.
var stdoutNames = map[string]bool{"/dev/stdout": true, "/dev/fd/1": true, "/proc/self/fd/1": true}

// maxLinks bounds how many symbolic links a path may go through, as the
// kernel's ELOOP does.
const maxLinks = 40

// resolve follows f's path to what it names.
func resolve(f File) (*target, error) {
	t := &target{File: f, path: filepath.Clean(f.Path)}
	if stdoutNames[t.path] {
		t.kind = stdout
		return t, nil
	}
	fail := func(err error, hint string) error { return &Error{What: f.What, Path: f.Path, Err: err, Hint: hint} }
	for links := 0; ; links++ {
		fi, err := os.Lstat(t.path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// A new file: its directory must exist.
			dir := filepath.Dir(t.path)
			st, derr := os.Stat(dir)
			switch {
			case errors.Is(derr, fs.ErrNotExist) || errors.Is(derr, syscall.ENOTDIR):
				return nil, fail(fmt.Errorf("directory %s does not exist", dir), "create it first, or name a file in an existing directory")
			case derr != nil:
				return nil, fail(cause(derr), "name a file in a directory you can write")
			case !st.IsDir():
				return nil, fail(fmt.Errorf("%s is not a directory", dir), "name a file in an existing directory")
			}
			return t, nil
		case errors.Is(err, syscall.ENOTDIR):
			return nil, fail(fmt.Errorf("%s is not a directory", filepath.Dir(t.path)), "name a file in an existing directory")
		case err != nil:
			return nil, fail(cause(err), "name a file in a directory you can write")
		}
		switch mode := fi.Mode(); {
		case mode&fs.ModeSymlink != 0:
			if links == maxLinks {
				return nil, fail(errors.New("too many levels of symbolic links"), "name the file itself")
			}
			dest, err := os.Readlink(t.path)
			if err != nil {
				return nil, fail(cause(err), "name the file itself")
			}
			if !filepath.IsAbs(dest) {
				dest = filepath.Join(filepath.Dir(t.path), dest)
			}
			t.path = filepath.Clean(dest)
			continue
		case mode.IsDir():
			return nil, fail(errors.New("is a directory"), "name a file inside it")
		case mode.IsRegular():
			t.info = fi
		case mode&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe) != 0:
			t.kind, t.info = stream, fi
		default:
			return nil, fail(fmt.Errorf("is a %s, not a file", typeName(mode)), "name a regular file, a device or a FIFO")
		}
		return t, nil
	}
}

func typeName(m fs.FileMode) string {
	if m&fs.ModeSocket != 0 {
		return "socket"
	}
	return "special file"
}

// cause strips an *fs.PathError or *os.LinkError down to its errno, so
// messages name the path the user gave once, and never a temporary's name.
func cause(err error) error { return files.Cause(err) }

// hint says what to do about a failed write.
func hint(err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return "free space on that file system, or write elsewhere"
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return "name a file in a directory you can write"
	}
	return ""
}

// resolveAll resolves every file with a path and applies the rules that
// need no writing.
func (r Run) resolveAll(files []File) ([]*target, error) {
	var ts []*target
	for _, f := range files {
		if f.Path == "" {
			continue
		}
		t, err := resolve(f)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	for _, in := range r.Inputs {
		if in.Path == "" {
			continue
		}
		fi, err := os.Stat(in.Path)
		if err != nil || !fi.Mode().IsRegular() {
			// Unreadable inputs fail where they are read; a stream read
			// (/dev/stdin) can be no output's file.
			continue
		}
		inAbs := absolute(in.Path)
		for _, t := range ts {
			if t.kind == regular && (absolute(t.path) == inAbs || t.info != nil && os.SameFile(fi, t.info)) {
				return nil, &Error{What: t.What, Path: t.Path,
					Err:  fmt.Errorf("is %s (%s): writing it would destroy the input", in.What, in.Path),
					Hint: "name another file"}
			}
		}
	}
	for i, a := range ts {
		for _, b := range ts[:i] {
			if same(a, b) {
				return nil, &Error{What: a.What, Path: a.Path,
					Err:  fmt.Errorf("is the same file as %s", name(b)),
					Hint: "give each output its own file"}
			}
		}
	}
	return ts, nil
}

// same reports whether two outputs would write one file. Character
// devices (/dev/null) take any number of writes.
func same(a, b *target) bool {
	switch {
	case a.kind != b.kind:
		return false
	case a.kind == stdout:
		return true
	case a.kind == stream && a.info.Mode()&fs.ModeCharDevice != 0:
		return false
	case absolute(a.path) == absolute(b.path):
		return true
	}
	return a.info != nil && b.info != nil && os.SameFile(a.info, b.info)
}

func name(t *target) string {
	if t.What != "" {
		return t.What + " " + t.Path
	}
	return t.Path
}

func absolute(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return filepath.Clean(p)
}

// Check applies the rules to the files' paths before any work, so a run
// that could not write its outputs fails before it plans: every output is
// resolved and checked against the inputs and the other outputs, and a
// temporary file is created and removed in the directory of each regular
// one, which proves the directory writable. Write functions are not
// called.
func (r Run) Check(files ...File) error {
	ts, err := r.resolveAll(files)
	if err != nil {
		return err
	}
	for _, t := range ts {
		if t.kind != regular {
			continue
		}
		tmp, err := createTemp(t.path)
		if err != nil {
			return &Error{What: t.What, Path: t.Path, Err: cause(err), Hint: hint(err)}
		}
		tmp.Close()
		os.Remove(tmp.Name())
	}
	return nil
}

// createTemp creates a hidden temporary file beside path, readable like a
// file written by any tool (0644), where os.CreateTemp would make it 0600.
func createTemp(path string) (*os.File, error) {
	dir, base := filepath.Split(path)
	for range 100 {
		name := filepath.Join(dir, "."+base+".tmp"+strconv.FormatUint(rand.Uint64()%1e10, 10))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, fmt.Errorf("cannot create a temporary file in %s", dir)
}

// Commit writes every file: regular ones to temporaries beside their
// targets, then the device nodes, FIFOs and standard output, then renames
// the temporaries into place. When anything fails before the renames,
// every temporary is removed and no regular target has changed. The rules
// of Check are applied again first.
func (r Run) Commit(files ...File) (err error) {
	ts, err := r.resolveAll(files)
	if err != nil {
		return err
	}
	temps := make([]string, len(ts))
	defer func() {
		if err != nil {
			for _, tmp := range temps {
				if tmp != "" {
					os.Remove(tmp)
				}
			}
		}
	}()
	for i, t := range ts {
		if t.kind != regular {
			continue
		}
		if temps[i], err = writeTemp(t); err != nil {
			return err
		}
	}
	// Streams cannot be taken back: each is rendered in full before any
	// is written, so a failing rendering writes none.
	rendered := make([][]byte, len(ts))
	for i, t := range ts {
		if t.kind == regular {
			continue
		}
		var b bytes.Buffer
		if err := t.Write(&b); err != nil {
			return fmt.Errorf("writing %s: %w", name(t), err)
		}
		rendered[i] = b.Bytes()
	}
	for i, t := range ts {
		switch t.kind {
		case stdout:
			w := r.Stdout
			if w == nil {
				w = os.Stdout
			}
			if _, err := w.Write(rendered[i]); err != nil {
				return &Error{What: t.What, Path: t.Path, Err: cause(err), Hint: hint(err)}
			}
		case stream:
			if err := writeStream(t.path, rendered[i]); err != nil {
				return &Error{What: t.What, Path: t.Path, Err: cause(err), Hint: hint(err)}
			}
		}
	}
	var dirs []string
	for i, t := range ts {
		if t.kind != regular {
			continue
		}
		if err := os.Rename(temps[i], t.path); err != nil {
			return &Error{What: t.What, Path: t.Path, Err: cause(err), Hint: hint(err)}
		}
		temps[i] = ""
		if dir := filepath.Dir(t.path); !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
	}
	// The renames reach the disk with their directories; best effort, as
	// some file systems cannot sync a directory.
	for _, dir := range dirs {
		if d, err := os.Open(dir); err == nil {
			d.Sync()
			d.Close()
		}
	}
	return nil
}

// writeTemp writes t's content to a temporary beside its target, synced,
// with the target's permissions when it exists, and returns its name.
func writeTemp(t *target) (tmpName string, err error) {
	tmp, err := createTemp(t.path)
	if err != nil {
		return "", &Error{What: t.What, Path: t.Path, Err: cause(err), Hint: hint(err)}
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	// A failed write of the file is the file system's (no space, quota);
	// a failed rendering is a bug of the writer.
	fw := &fileWriter{f: tmp}
	bw := bufio.NewWriter(fw)
	err = t.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		if fw.err != nil {
			return "", &Error{What: t.What, Path: t.Path, Err: cause(fw.err), Hint: hint(fw.err)}
		}
		return "", fmt.Errorf("writing %s: %w", name(t), err)
	}
	if t.info != nil {
		if err := tmp.Chmod(t.info.Mode().Perm()); err != nil {
			return "", &Error{What: t.What, Path: t.Path, Err: cause(err), Hint: hint(err)}
		}
	}
	if err := tmp.Sync(); err != nil {
		return "", &Error{What: t.What, Path: t.Path, Err: cause(err), Hint: hint(err)}
	}
	if err := tmp.Close(); err != nil {
		return "", &Error{What: t.What, Path: t.Path, Err: cause(err), Hint: hint(err)}
	}
	return tmp.Name(), nil
}

// fileWriter remembers the file system's write error, to tell it from the
// renderer's own.
type fileWriter struct {
	f   *os.File
	err error
}

func (w *fileWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil && w.err == nil {
		w.err = err
	}
	return n, err
}

// writeStream writes data through a device node or FIFO. Opening a FIFO
// waits for its reader, as any tool writing to one does.
func writeStream(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
