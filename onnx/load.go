package onnx

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/files"
	"github.com/opplace/opplace/internal/importopt"
	"github.com/opplace/opplace/internal/progress"
	"github.com/opplace/opplace/internal/shapes"
	"github.com/opplace/opplace/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// Options bind what the model leaves to run time (importopt.Options: the
// dynamic dimensions, data-dependent loops' trip count, the branch of an
// If with a run-time condition); the TensorFlow importer takes the same.
type Options = importopt.Options

// Knobs names the settings an import message tells the user to change
// (importopt.Knobs); Fields is the default, naming the Options fields.
type (
	Knobs  = importopt.Knobs
	Fields = importopt.Fields
)

// Values of Options.IfBranch.
const (
	IfMax  = importopt.IfMax
	IfThen = importopt.IfThen
	IfElse = importopt.IfElse
)

// Model is an imported ONNX model.
type Model struct {
	Graph *graph.Graph
	// Opset is the version of the default (ai.onnx) operator set.
	Opset int64
	// Warnings lists each distinct problem once, sorted: unknown op types,
	// outputs whose shape could not be inferred, unused options.
	Warnings []string
}

// InputError reports a model file that cannot be imported: unreadable,
// not ONNX, structurally invalid, or with impossible shapes. Callers tell
// it apart from internal failures with errors.As.
type InputError struct {
	File string
	Err  error
}

func (e *InputError) Error() string { return e.File + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *InputError) Unwrap() error { return e.Err }

// Load reads and imports the ONNX model at path. External weight data is
// never read (only initializer types and dimensions are needed), so it may
// be absent.
func Load(path string, opts Options) (*Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &InputError{path, errors.New("no such file")}
		}
		return nil, &InputError{path, files.Cause(err)}
	}
	if st.IsDir() {
		return nil, &InputError{path, errors.New("is a directory, not an ONNX model file")}
	}
	r := progress.Default()
	if st.Size() < bigModel || !progress.Enabled(r) {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, &InputError{path, files.Cause(err)}
		}
		return Decode(data, path, opts)
	}
	data, err := readReporting(r, path, st.Size())
	if err != nil {
		return nil, &InputError{path, files.Cause(err)}
	}
	decoding := r.Start("onnx: decoding "+filepath.Base(path), 0)
	defer decoding.Done()
	return Decode(data, path, opts)
}

// bigModel is the size from which Load reports its reading and decoding
// (to the process's progress reporter, progress.Default); a variable for
// tests.
var bigModel int64 = 64 << 20

// readReporting reads the file at path, of about size bytes, reporting
// the bytes read every readChunk.
func readReporting(r progress.Reporter, path string, size int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	task := progress.StartUnit(r, "onnx: reading "+filepath.Base(path), size, progress.Bytes)
	defer task.Done()
	data := make([]byte, size)
	off := 0
	for off < len(data) {
		n, err := f.Read(data[off:min(off+readChunk, len(data))])
		off += n
		task.Add(int64(n))
		if err == io.EOF {
			return data[:off], nil // the file shrank
		}
		if err != nil {
			return nil, err
		}
	}
	rest, err := io.ReadAll(f) // the file grew
	if err != nil {
		return nil, err
	}
	return append(data, rest...), nil
}

// readChunk is how much readReporting reads between reports.
const readChunk = 4 << 20

// Decode imports an ONNX model from its serialized bytes; name labels
// errors (usually the file name).
func Decode(data []byte, name string, opts Options) (*Model, error) {
	if name == "" {
		name = "model"
	}
	fail := func(format string, args ...any) error {
		return &InputError{name, fmt.Errorf(format, args...)}
	}
	if len(data) == 0 {
		return nil, fail("empty file, not an ONNX model")
	}
	if err := opts.Validate(); err != nil {
		return nil, &InputError{name, err}
	}
	mp := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(data, mp); err != nil {
		return nil, fail("not an ONNX model (protobuf decoding failed: %v)", err)
	}
	switch {
	case mp.GetIrVersion() <= 0:
		return nil, fail("not an ONNX model (no ir_version)")
	case mp.Graph == nil:
		return nil, fail("not an ONNX model (no graph)")
	case len(mp.Graph.GetNode()) == 0:
		return nil, fail("the model's graph has no nodes")
	}
	if err := checkOpsets(mp); err != nil {
		return nil, &InputError{name, err}
	}
	c := newConverter(name, opts, mp)
	g, err := c.convert(mp.Graph)
	if err != nil {
		var ie *InputError
		if errors.As(err, &ie) {
			return nil, err
		}
		return nil, &InputError{name, err}
	}
	if err := shapes.CheckTotals(g); err != nil {
		return nil, &InputError{name, err}
	}
	g, promoted, err := graph.MarkTrainable(g)
	if err != nil {
		return nil, &InputError{name, err}
	}
	if promoted > 0 {
		c.warn("promoted", fmt.Sprintf("%d Constant node(s) hold weights (read as a layer's weights; exports made for inference store weights so): taken as trainable parameters, like initializers", promoted))
	}
	g.Name = graphName(mp.Graph.GetName(), name)
	return &Model{Graph: g, Opset: c.opsets[""], Warnings: c.finishWarnings()}, nil
}

func graphName(gname, file string) string {
	if gname != "" {
		return gname
	}
	base := filepath.Base(file)
	return base[:len(base)-len(filepath.Ext(base))]
}
