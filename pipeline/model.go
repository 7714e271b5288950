package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/costed"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/files"
	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/tf"
)

// ImportOptions binds a model's dynamic dimensions; every format that has
// them honours the same flags.
type ImportOptions = onnx.Options

// Model is an imported graph with what its format told about it.
type Model struct {
	Graph *graph.Graph
	// Format names the importer that read it.
	Format string
	// Opset is the ONNX default-domain opset, 0 for other formats.
	Opset int64
	// Costs, when set, replaces the analytic cost model: the format carried
	// measured times.
	Costs cost.Model
	// Warnings are problems that did not stop the import.
	Warnings []string
}

// Format reads one kind of model file, and writes a plan back into it.
type Format struct {
	Name string
	// Sniff reports whether a file starting with head is in this format.
	Sniff func(head []byte) bool
	Load  func(path string, opts ImportOptions) (*Model, error)
	// Decode imports a model from its bytes, for a model read from a
	// stream; path names it in messages.
	Decode func(data []byte, path string, opts ImportOptions) (*Model, error)
	// Annotate returns the model file's data with each op's device as a
	// says; nil when the format has no place for devices.
	Annotate func(data []byte, a Annotation) ([]byte, error)
}

// Annotation is a plan's placement written back into its model file.
type Annotation struct {
	// Placement maps op names to cluster device names; empty, Annotate
	// only checks that the file can be annotated for To, and needs no
	// Cluster.
	Placement map[string]string
	Cluster   *cluster.Cluster
	// Template renders TensorFlow device strings (tfdevice.DefaultTemplate
	// when empty).
	Template string
	// From and To are the model file's path and the annotated file's:
	// paths inside a model (ONNX external data) are relative to its
	// directory.
	From, To string
}

// formats are tried in order; the first whose Sniff accepts the file's
// head reads it. ONNX comes last and accepts anything, so a file that is
// nothing known gets the protobuf reader's error.
var formats = []Format{
	{Name: "costed", Sniff: costed.Sniff, Load: func(path string, o ImportOptions) (*Model, error) {
		m, err := costed.Load(path)
		if err != nil {
			return nil, err
		}
		return costedModel(m, o), nil
	}, Decode: func(data []byte, path string, o ImportOptions) (*Model, error) {
		m, err := costed.Decode(data, path)
		if err != nil {
			return nil, err
		}
		return costedModel(m, o), nil
	}},
	// TensorFlow: binary and text GraphDefs and TF.js graph models; it
	// also takes any other JSON, to say why it is not a graph model.
	{Name: "tensorflow", Sniff: func(h []byte) bool { return tf.Sniff(h) != tf.Unknown || IsJSON(h) }, Load: func(path string, o ImportOptions) (*Model, error) {
		m, err := tf.Load(path, tf.Options{Import: o})
		if err != nil {
			return nil, err
		}
		return tfModel(m), nil
	}, Decode: func(data []byte, path string, o ImportOptions) (*Model, error) {
		m, err := tf.Decode(data, path, tf.Options{Import: o})
		if err != nil {
			return nil, err
		}
		return tfModel(m), nil
	}, Annotate: func(data []byte, a Annotation) ([]byte, error) {
		return tf.AnnotateDevices(data, a.Placement, a.Cluster, a.Template)
	}},
	{Name: "onnx", Sniff: func([]byte) bool { return true }, Load: func(path string, opts ImportOptions) (*Model, error) {
		m, err := onnx.Load(path, opts)
		if err != nil {
			return nil, err
		}
		return onnxModel(m), nil
	}, Decode: func(data []byte, path string, opts ImportOptions) (*Model, error) {
		m, err := onnx.Decode(data, path, opts)
		if err != nil {
			return nil, err
		}
		return onnxModel(m), nil
	}, Annotate: func(data []byte, a Annotation) ([]byte, error) {
		name := ""
		if a.Cluster != nil {
			name = a.Cluster.Name
		}
		return onnx.Annotate(data, a.Placement, onnx.AnnotateOptions{Cluster: name, From: filepath.Dir(a.From), To: filepath.Dir(a.To)})
	}},
}

// unusedShapes warns of the shape options a costed graph ignores: its
// op times and sizes are fixed in the file.
func unusedShapes(o ImportOptions) []string {
	k := o.Knobs
	if k == nil {
		k = onnx.Fields{}
	}
	var set []string
	if o.Batch > 0 {
		set = append(set, k.Batch(strconv.FormatInt(o.Batch, 10)))
	}
	for _, name := range slices.Sorted(maps.Keys(o.Dims)) {
		set = append(set, k.Dim(name, strconv.FormatInt(o.Dims[name], 10)))
	}
	for _, name := range slices.Sorted(maps.Keys(o.Shapes)) {
		set = append(set, k.Shape(name, ""))
	}
	if len(set) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%s changes nothing: a costed graph's op times and sizes are fixed in the file", strings.Join(set, ", "))}
}

func costedModel(m *costed.Model, o ImportOptions) *Model {
	return &Model{Graph: m.Graph, Format: m.Format, Costs: m.Costs, Warnings: append(m.Warnings, unusedShapes(o)...)}
}

func tfModel(m *tf.Model) *Model {
	return &Model{Graph: m.Graph, Format: m.Kind.String(), Warnings: m.Warnings}
}

func onnxModel(m *onnx.Model) *Model {
	return &Model{Graph: m.Graph, Format: "onnx", Opset: m.Opset, Warnings: m.Warnings}
}

// modelKinds says what an empty model file should have held.
const modelKinds = "a model file holds an ONNX model, a TensorFlow GraphDef, a TensorFlow.js model or a costed graph"

// sniffLen is how much of a file the formats look at.
const sniffLen = 512

// LoadModel reads a model file, telling formats apart by content, not by
// extension. A path that is not a regular file (a pipe such as
// /dev/stdin or <(...), a FIFO, a device) is read once as a stream (see
// loadStream). Every failure is an *InputError naming the file.
func LoadModel(path string, opts ImportOptions) (*Model, error) {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return nil, &InputError{fmt.Errorf("%s: cannot read the model: %w", path, files.Cause(err))}
	case st.IsDir():
		return nil, &InputError{fmt.Errorf("%s: is a directory, not a model file", path)}
	case !st.Mode().IsRegular():
		return loadStream(path, opts)
	case st.Size() == 0:
		return nil, &InputError{fmt.Errorf("%s: the file is empty; %s", path, modelKinds)}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, &InputError{fmt.Errorf("%s: cannot read the model: %w", path, files.Cause(err))}
	}
	head := make([]byte, sniffLen)
	n, err := io.ReadFull(f, head)
	f.Close()
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, &InputError{fmt.Errorf("%s: cannot read the model: %w", path, err)}
	}
	if n < sniffLen && len(bytes.TrimSpace(head[:n])) == 0 {
		return nil, &InputError{fmt.Errorf("%s: the file is empty (white space only); %s", path, modelKinds)}
	}
	format := formatOf(head[:n])
	if format == nil {
		return nil, &InputError{fmt.Errorf("%s: not a model format opplace reads", path)}
	}
	m, err := format.Load(path, opts)
	if err != nil {
		return nil, &InputError{err}
	}
	return m, nil
}

// loadStream reads a model that declares no size, whole and once (a
// stream cannot be read again after its head is sniffed), bounded by
// files.StreamLimit, and decodes it from memory. A stream has no
// directory of its own: a TF.js model's weight files are not read from
// one.
func loadStream(path string, opts ImportOptions) (*Model, error) {
	data, err := files.ReadFile(path)
	switch {
	case err != nil:
		return nil, &InputError{fmt.Errorf("%s: cannot read the model: %w", path, files.Cause(err))}
	case len(data) == 0:
		return nil, &InputError{fmt.Errorf("%s: the stream is empty; %s", path, modelKinds)}
	}
	m, err := formatOf(data[:min(len(data), sniffLen)]).Decode(data, path, opts)
	if err != nil {
		return nil, &InputError{err}
	}
	return m, nil
}

// IsStream reports whether path names something other than a regular
// file or directory (a pipe, a FIFO, a device), which can be read only
// once; false when it cannot be examined.
func IsStream(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.Mode().IsRegular() && !st.IsDir()
}

// formatOf is the first format whose Sniff accepts head.
func formatOf(head []byte) *Format {
	for i := range formats {
		if formats[i].Sniff(head) {
			return &formats[i]
		}
	}
	return nil
}

// AnnotateModel returns the model file a.From with each op placed as
// a.Placement says, written by the format that reads the file, for
// writing to a.To. Every failure is an *InputError.
func AnnotateModel(a Annotation) ([]byte, error) {
	if IsStream(a.From) {
		return nil, &InputError{&streamAnnotateError{path: a.From}}
	}
	data, err := files.ReadFile(a.From)
	if err != nil {
		return nil, &InputError{fmt.Errorf("%s: cannot read the model: %w", a.From, files.Cause(err))}
	}
	format := formatOf(data[:min(len(data), sniffLen)])
	if format == nil || format.Annotate == nil {
		name := "this"
		if format != nil {
			name = "a " + format.Name
		}
		return nil, &InputError{&noDevicesError{path: a.From, format: name}}
	}
	out, err := format.Annotate(data, a)
	var ext *onnx.ExternalDataError
	switch {
	case errors.As(err, &ext):
		// The message names the directory the model cannot go to.
		return nil, &InputError{err}
	case err != nil:
		return nil, &InputError{fmt.Errorf("%s: %w", a.From, err)}
	}
	return out, nil
}

// CheckAnnotate says, before any planning, whether the model file from
// can be written back to to with a placement: whether its format has a
// place for devices, and whether what the model names relative to its
// directory (ONNX external data) can be named from to's. A file its
// importer cannot read passes: the import, next, says what is wrong with
// it in its own words.
func CheckAnnotate(from, to string) error {
	_, err := AnnotateModel(Annotation{From: from, To: to})
	var ext *onnx.ExternalDataError
	var none *noDevicesError
	var stream *streamAnnotateError
	if errors.As(err, &ext) || errors.As(err, &none) || errors.As(err, &stream) {
		return err
	}
	return nil
}

// noDevicesError is a model whose format cannot carry a placement.
type noDevicesError struct{ path, format string }

func (e *noDevicesError) Error() string {
	return fmt.Sprintf("%s: %s model has no place for devices, so it cannot be written back with the plan's placement; each op's device is in the plan file", e.path, e.format)
}

// streamAnnotateError is a model read from a stream, which cannot be
// read a second time to be written back.
type streamAnnotateError struct{ path string }

func (e *streamAnnotateError) Error() string {
	return fmt.Sprintf("%s: a model read from a pipe or device cannot be written back with the plan's placement (it can be read only once); give the model as a file", e.path)
}

// IsJSON reports whether head opens a JSON object, for formats that sniff
// JSON documents.
func IsJSON(head []byte) bool {
	head = bytes.TrimLeft(head, " \t\r\n\ufeff")
	return len(head) > 0 && head[0] == '{'
}
