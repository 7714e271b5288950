package costed

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strings"
)

// FormatV1 is the value of the "format" key that marks a costed graph.
const FormatV1 = "opplace-costed-graph/v1"

// formatPrefix is what Sniff looks for: any version, so a file of a later
// version gets a clear "unsupported version" error rather than ONNX's.
const formatPrefix = "opplace-costed-graph/"

// File is a costed graph as written in JSON.
type File struct {
	// Format must be FormatV1.
	Format string `json:"format"`
	// Name defaults to the file name without its extension.
	Name  string `json:"name,omitempty"`
	Ops   []Op   `json:"ops"`
	Edges []Edge `json:"edges,omitempty"`

	// index and ends are what the parser learnt while reading, for check:
	// each name's first op, and each edge's ops where known (-1 where
	// not). Only the file's own decoding sets them; Parse drops them, as
	// its caller may change the File.
	index *nameIndex
	ends  []ends
	dup   [2]int32
}

// Op is one measured operator.
type Op struct {
	// Name is unique within the file; edges refer to it.
	Name string `json:"name"`
	// Type is descriptive ("MatMul"); optional.
	Type string `json:"type,omitempty"`
	// Phase is "forward" (default), "backward" or "update".
	Phase string `json:"phase,omitempty"`
	// Colocate names a group whose ops must share one device.
	Colocate string `json:"colocate,omitempty"`
	// Device names the cluster device the op ran on or should run on;
	// empty for none. It becomes the graph op's Device: a pin that
	// placers honour (the pipeline keeps it only when asked to respect
	// the model's devices, as TensorFlow's device fields).
	Device string `json:"device,omitempty"`
	// TimesMS is the op's time in milliseconds per device type name, as
	// the cluster file spells the type (case-insensitive). A type not
	// listed cannot run the op.
	TimesMS Times `json:"times_ms"`
	// ParamBytes stay resident on the op's device for the whole step.
	ParamBytes int64 `json:"param_bytes,omitempty"`
	// OutputBytes are allocated when the op starts and live until its
	// consumers on that device have run (until the end for a sink).
	OutputBytes int64 `json:"output_bytes,omitempty"`
	// TempBytes are scratch, held only while the op runs.
	TempBytes int64 `json:"temp_bytes,omitempty"`
}

// DeviceTime is an op's measured time on one device type.
type DeviceTime struct {
	// Type is the device type's name as the cluster file spells it
	// (names ignore case).
	Type string
	MS   float64
}

// Times are an op's measured times, at most one per device type, in the
// order the file gives them. A slice rather than a map: a graph of a
// million ops would otherwise carry a million small maps.
type Times []DeviceTime

// Get is the time for device type name (ignoring case).
func (t Times) Get(name string) (float64, bool) {
	for _, d := range t {
		if strings.EqualFold(d.Type, name) {
			return d.MS, true
		}
	}
	return 0, false
}

// MarshalJSON writes the times as a JSON object, keys sorted, so a file
// is encoded the same whatever order its times were given in.
func (t Times) MarshalJSON() ([]byte, error) {
	sorted := slices.Clone(t)
	slices.SortStableFunc(sorted, func(a, b DeviceTime) int { return strings.Compare(a.Type, b.Type) })
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as Encode: keep "a<b" readable
	b.WriteByte('{')
	for i, d := range sorted {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := enc.Encode(d.Type); err != nil {
			return nil, err
		}
		b.Truncate(b.Len() - 1) // Encode's newline
		b.WriteByte(':')
		if err := enc.Encode(d.MS); err != nil {
			return nil, err
		}
		b.Truncate(b.Len() - 1)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Edge is data flowing from one op to another.
type Edge struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Tensor, when set, names the value the edge carries: an output of
	// From of its own, "<from>:<tensor>" in the graph, which every edge
	// from From with this name reads. Two edges between the same ops
	// must name different tensors.
	Tensor string `json:"tensor,omitempty"`
	// Bytes moved when From and To run on different devices; nil means
	// From's OutputBytes.
	Bytes *int64 `json:"bytes,omitempty"`
	// TransferMS, when set, is the time of that move in milliseconds on
	// any pair of devices, replacing the cluster's link model.
	TransferMS *float64 `json:"transfer_ms,omitempty"`
}

// Sniff reports whether a file starting with head is a costed graph of
// either format opplace reads.
func Sniff(head []byte) bool { return sniffV1(head) || sniffDNN(head) }

func sniffV1(head []byte) bool {
	return isJSONObject(head) && (bytes.Contains(head, []byte(`"`+formatPrefix)) ||
		// A graph that forgot its format line still reaches our decoder,
		// which says what is missing, instead of the ONNX reader's error.
		bytes.Contains(head, []byte(`"ops"`)) && bytes.Contains(head, []byte(`"times_ms"`)))
}

func isJSONObject(head []byte) bool {
	head = bytes.TrimLeft(head, " \t\r\n")
	head = bytes.TrimPrefix(head, []byte("\ufeff"))
	head = bytes.TrimLeft(head, " \t\r\n")
	return len(head) > 0 && head[0] == '{'
}

// Encode writes f as JSON with one op and one edge per line, so examples
// diff well. Map keys are sorted, so the output is deterministic.
func (f *File) Encode(w io.Writer) error {
	bw := bufio.NewWriter(w)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep "a->b" readable
	put := func(v any) {
		buf.Reset()
		enc.Encode(v) // the types here always marshal
		bw.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	}
	bw.WriteString("{\n  \"format\": ")
	put(f.Format)
	if f.Name != "" {
		bw.WriteString(",\n  \"name\": ")
		put(f.Name)
	}
	bw.WriteString(",\n  \"ops\": [")
	for i := range f.Ops {
		if i > 0 {
			bw.WriteString(",")
		}
		bw.WriteString("\n    ")
		put(&f.Ops[i])
	}
	bw.WriteString("\n  ]")
	if len(f.Edges) > 0 {
		bw.WriteString(",\n  \"edges\": [")
		for i := range f.Edges {
			if i > 0 {
				bw.WriteString(",")
			}
			bw.WriteString("\n    ")
			put(&f.Edges[i])
		}
		bw.WriteString("\n  ]")
	}
	bw.WriteString("\n}\n")
	return bw.Flush()
}
