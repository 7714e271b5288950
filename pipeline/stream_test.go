package pipeline_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/opplace/opplace/pipeline"
)

// pipePath is a path to the read end of a pipe that a goroutine fills
// with data, as a shell's /dev/stdin or <(...) is.
func pipePath(t *testing.T, data []byte) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	go func() {
		w.Write(data)
		w.Close()
	}()
	return "/dev/fd/" + strconv.Itoa(int(r.Fd()))
}

// TestLoadModelStream reads each format through a pipe and a FIFO: the
// same graph as from the file, its format told from the stream's bytes.
func TestLoadModelStream(t *testing.T) {
	for _, tc := range []struct{ file, format string }{
		{filepath.Join(models, "resnet50.onnx"), "onnx"},
		{"../testdata/tf/blazeface.pb", "tf-graphdef"},
		{"../testdata/tf/emotion.pbtxt", "tf-graphdef-text"},
		{"../testdata/costed/tiny.json", "costed"},
	} {
		t.Run(filepath.Base(tc.file), func(t *testing.T) {
			data, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			want, err := pipeline.LoadModel(tc.file, pipeline.ImportOptions{Batch: 2})
			if err != nil {
				t.Fatal(err)
			}
			fifo := filepath.Join(t.TempDir(), "model")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			go func() {
				if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
					w.Write(data)
					w.Close()
				}
			}()
			for _, path := range []string{pipePath(t, data), fifo} {
				got, err := pipeline.LoadModel(path, pipeline.ImportOptions{Batch: 2})
				if err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				if got.Format != tc.format || got.Graph.NumOps() != want.Graph.NumOps() || len(got.Graph.Tensors) != len(want.Graph.Tensors) {
					t.Errorf("%s: %s with %d ops, %d tensors; from the file %s with %d, %d", path, got.Format,
						got.Graph.NumOps(), len(got.Graph.Tensors), want.Format, want.Graph.NumOps(), len(want.Graph.Tensors))
				}
			}
		})
	}
}

// TestLoadModelStreamRefused: an empty stream and /dev/zero are one clear
// error each, not "the file is empty", a hang or running out of memory.
func TestLoadModelStreamRefused(t *testing.T) {
	paths := map[string]string{pipePath(t, nil): "the stream is empty; a model file holds"}
	if _, err := os.Stat("/dev/zero"); err == nil {
		paths["/dev/zero"] = "/dev/zero: cannot read the model: it starts with a NUL byte"
	}
	for path, want := range paths {
		_, err := pipeline.LoadModel(path, pipeline.ImportOptions{})
		var ie *pipeline.InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an *InputError with %q", path, err, want)
		}
	}
	// A stream cannot be read again to be written back with a placement.
	err := pipeline.CheckAnnotate(pipePath(t, []byte("x")), filepath.Join(t.TempDir(), "out.onnx"))
	if err == nil || !strings.Contains(err.Error(), "a model read from a pipe or device cannot be written back") {
		t.Errorf("annotating a stream: got %v", err)
	}
	if !pipeline.IsStream("/dev/null") || pipeline.IsStream(models) || pipeline.IsStream(filepath.Join(models, "resnet50.onnx")) {
		t.Error("IsStream tells devices, directories and files apart wrongly")
	}
}
