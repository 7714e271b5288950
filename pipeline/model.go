package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/costed"
	"github.com/opplace/opplace/graph"
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

// Format reads one kind of model file.
type Format struct {
	Name string
	// Sniff reports whether a file starting with head is in this format.
	Sniff func(head []byte) bool
	Load  func(path string, opts ImportOptions) (*Model, error)
}

// formats are tried in order; the first whose Sniff accepts the file's
// head reads it. ONNX comes last and accepts anything, so a file that is
// nothing known gets the protobuf reader's error.
var formats = []Format{
	{Name: "costed", Sniff: costed.Sniff, Load: func(path string, _ ImportOptions) (*Model, error) {
		m, err := costed.Load(path)
		if err != nil {
			return nil, err
		}
		return &Model{Graph: m.Graph, Format: m.Format, Costs: m.Costs, Warnings: m.Warnings}, nil
	}},
	// TensorFlow: binary and text GraphDefs and TF.js graph models; it
	// also takes any other JSON, to say why it is not a graph model.
	{Name: "tensorflow", Sniff: func(h []byte) bool { return tf.Sniff(h) != tf.Unknown || IsJSON(h) }, Load: func(path string, o ImportOptions) (*Model, error) {
		m, err := tf.Load(path, tf.Options{Import: o})
		if err != nil {
			return nil, err
		}
		return &Model{Graph: m.Graph, Format: m.Kind.String(), Warnings: m.Warnings}, nil
	}},
	{Name: "onnx", Sniff: func([]byte) bool { return true }, Load: loadONNX},
}

func loadONNX(path string, opts ImportOptions) (*Model, error) {
	m, err := onnx.Load(path, opts)
	if err != nil {
		return nil, err
	}
	return &Model{Graph: m.Graph, Format: "onnx", Opset: m.Opset, Warnings: m.Warnings}, nil
}

// sniffLen is how much of a file the formats look at.
const sniffLen = 512

// LoadModel reads a model file, telling formats apart by content, not by
// extension. Every failure is an *InputError naming the file.
func LoadModel(path string, opts ImportOptions) (*Model, error) {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return nil, &InputError{fmt.Errorf("%s: cannot read the model: %w", path, unwrapPathError(err))}
	case st.IsDir():
		return nil, &InputError{fmt.Errorf("%s: is a directory, not a model file", path)}
	case st.Size() == 0:
		return nil, &InputError{fmt.Errorf("%s: the file is empty; expected an ONNX model", path)}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, &InputError{fmt.Errorf("%s: cannot read the model: %w", path, unwrapPathError(err))}
	}
	head := make([]byte, sniffLen)
	n, err := io.ReadFull(f, head)
	f.Close()
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, &InputError{fmt.Errorf("%s: cannot read the model: %w", path, err)}
	}
	head = head[:n]
	for _, format := range formats {
		if !format.Sniff(head) {
			continue
		}
		m, err := format.Load(path, opts)
		if err != nil {
			return nil, &InputError{err}
		}
		return m, nil
	}
	return nil, &InputError{fmt.Errorf("%s: not a model format opplace reads", path)}
}

// IsJSON reports whether head opens a JSON object, for formats that sniff
// JSON documents.
func IsJSON(head []byte) bool {
	head = bytes.TrimLeft(head, " \t\r\n\ufeff")
	return len(head) > 0 && head[0] == '{'
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
