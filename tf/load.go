package tf

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/files"
	"github.com/opplace/opplace/internal/importopt"
	"github.com/opplace/opplace/internal/shapes"
	"github.com/opplace/opplace/internal/tfdevice"
	graphpb "github.com/wamuir/graft/tensorflow/core/framework/graph_go_proto"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Kind is one of the TensorFlow file forms opplace reads.
type Kind int

// The file forms, told apart by content.
const (
	// Unknown is not a TensorFlow file.
	Unknown Kind = iota
	// GraphDef is a binary (frozen) GraphDef, usually .pb.
	GraphDef
	// TextGraphDef is a GraphDef in protobuf text form, usually .pbtxt.
	TextGraphDef
	// JSGraphModel is a TensorFlow.js graph model (model.json).
	JSGraphModel
)

var kindNames = [...]string{"unknown", "tf-graphdef", "tf-graphdef-text", "tfjs-graph-model"}

func (k Kind) String() string { return kindNames[k] }

// Options say how to import a graph.
type Options struct {
	// Import binds dynamic dimensions exactly as for ONNX models: Batch
	// binds a dynamic (-1) leading dimension of every Placeholder, Shapes
	// sets one Placeholder's whole shape. TensorFlow has no named
	// dimensions, so Dims only binds nothing and draws a warning. Nil
	// Import.Knobs names these fields in messages (Options.Import.Batch).
	Import importopt.Options
	// Pins, when set, turns each node's device field into a pin
	// (graph.Op.Device) on the cluster device it names; nil keeps the
	// field only as the op's "_device" attribute.
	Pins tfdevice.PinResolver
}

// Model is an imported TensorFlow graph.
type Model struct {
	Graph *graph.Graph
	Kind  Kind
	// Warnings lists each distinct problem once, sorted.
	Warnings []string
	// Params is the element count of every floating-point Const tensor,
	// weights and buffers alike (the trained ones are the graph's
	// Parameter tensors: graph.Trainable).
	Params int64
}

// InputError reports a file that cannot be imported; callers tell it
// apart from internal failures with errors.As.
type InputError struct {
	File string
	Err  error
}

func (e *InputError) Error() string { return e.File + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *InputError) Unwrap() error { return e.Err }

// Sniff tells a TensorFlow file's form from its first bytes (512 are
// plenty); Unknown for anything else, ONNX models included.
func Sniff(head []byte) Kind {
	t := bytes.TrimLeft(head, " \t\r\n\ufeff")
	if len(t) > 0 && t[0] == '{' {
		for _, mark := range []string{`"modelTopology"`, `"weightsManifest"`, `"graph-model"`, `"layers-model"`, `"convertedBy"`} {
			if bytes.Contains(t, []byte(mark)) {
				return JSGraphModel
			}
		}
		return Unknown
	}
	if isTextGraph(head) {
		return TextGraphDef
	}
	if isBinaryGraph(head) {
		return GraphDef
	}
	return Unknown
}

// isTextGraph accepts text that, after blank and '#' comment lines,
// opens with a GraphDef field: node, versions or library.
func isTextGraph(head []byte) bool {
	for len(head) > 0 {
		head = bytes.TrimLeft(head, " \t\r\n")
		if len(head) > 0 && head[0] == '#' {
			if i := bytes.IndexByte(head, '\n'); i >= 0 {
				head = head[i+1:]
				continue
			}
			return false
		}
		break
	}
	for _, f := range []string{"node", "versions", "library"} {
		if rest, ok := bytes.CutPrefix(head, []byte(f)); ok {
			rest = bytes.TrimLeft(rest, " \t\r\n")
			return len(rest) > 0 && (rest[0] == '{' || rest[0] == ':' || rest[0] == '<')
		}
	}
	return false
}

// isBinaryGraph accepts a protobuf message whose first field is field 1
// length-delimited (GraphDef.node) holding a message whose first field is
// field 1 length-delimited (NodeDef.name). An ONNX ModelProto's field 1 is
// the varint ir_version, so the two never collide.
func isBinaryGraph(head []byte) bool {
	num, typ, n := protowire.ConsumeTag(head)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		return false
	}
	head = head[n:]
	l, m := protowire.ConsumeVarint(head)
	if m < 0 || l == 0 {
		return false
	}
	head = head[m:]
	num, typ, n = protowire.ConsumeTag(head)
	return n > 0 && num == 1 && typ == protowire.BytesType
}

// Load reads and imports the TensorFlow model at path, telling its form
// from its content. A TF.js model's weight files, when present next to
// it (next to the file a symbolic link names, for a link), supply the
// values of shape-feeding constants.
func Load(path string, opts Options) (*Model, error) {
	data, err := files.ReadFile(path)
	if err != nil {
		return nil, &InputError{path, files.Cause(err)}
	}
	dir := filepath.Dir(path)
	if real, err := filepath.EvalSymlinks(path); err == nil {
		dir = filepath.Dir(real)
	}
	return decode(data, path, dir, opts)
}

// Decode imports a model from its bytes; name labels errors. TF.js weight
// files are not read (a warning names them).
func Decode(data []byte, name string, opts Options) (*Model, error) {
	return decode(data, name, "", opts)
}

func decode(data []byte, name, dir string, opts Options) (*Model, error) {
	if name == "" {
		name = "model"
	}
	fail := func(format string, args ...any) error { return &InputError{name, fmt.Errorf(format, args...)} }
	if len(data) == 0 {
		return nil, fail("empty file, not a TensorFlow model")
	}
	if err := opts.Import.Validate(); err != nil {
		return nil, &InputError{name, err}
	}
	kind := Sniff(data[:min(len(data), 512)])
	if t := bytes.TrimLeft(data, " \t\r\n\ufeff"); kind == Unknown && len(t) > 0 && t[0] == '{' {
		kind = JSGraphModel // JSON of another kind: say why it is not a graph model
	}
	var gd *graphpb.GraphDef
	var meta *jsMeta
	switch kind {
	case JSGraphModel:
		var err error
		if gd, meta, err = decodeJS(data, dir); err != nil {
			return nil, &InputError{name, err}
		}
	case TextGraphDef:
		gd = &graphpb.GraphDef{}
		if err := (prototext.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, gd); err != nil {
			return nil, fail("not a text GraphDef (%v)", err)
		}
	default:
		gd = &graphpb.GraphDef{}
		if err := proto.Unmarshal(data, gd); err != nil {
			return nil, fail("not a TensorFlow GraphDef (protobuf decoding failed: %v); the file may be truncated", err)
		}
		kind = GraphDef
	}
	if len(gd.GetNode()) == 0 {
		return nil, fail("the graph has no nodes")
	}
	c := newConverter(name, opts, meta)
	g, err := c.convert(gd)
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
	if g, _, err = graph.MarkTrainable(g); err != nil {
		return nil, &InputError{name, err}
	}
	base := filepath.Base(name)
	g.Name = base[:len(base)-len(filepath.Ext(base))]
	return &Model{Graph: g, Kind: kind, Warnings: c.finishWarnings(), Params: c.params}, nil
}
