package tf

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
	graphpb "github.com/wamuir/graft/tensorflow/core/framework/graph_go_proto"
	"google.golang.org/protobuf/encoding/protojson"
)

// jsModel is the part of a TF.js model.json opplace reads.
type jsModel struct {
	Format          string          `json:"format"`
	ModelTopology   json.RawMessage `json:"modelTopology"`
	WeightsManifest []jsGroup       `json:"weightsManifest"`
	Signature       *jsSignature    `json:"signature"`
	UserDefined     struct {
		Signature *jsSignature `json:"signature"`
	} `json:"userDefinedMetadata"`
}

type jsGroup struct {
	Paths   []string   `json:"paths"`
	Weights []jsWeight `json:"weights"`
}

type jsWeight struct {
	Name         string  `json:"name"`
	Shape        []int64 `json:"shape"`
	Dtype        string  `json:"dtype"`
	Quantization *struct {
		Dtype string `json:"dtype"`
	} `json:"quantization"`
}

type jsSignature struct {
	Inputs  map[string]jsTensorInfo `json:"inputs"`
	Outputs map[string]jsTensorInfo `json:"outputs"`
}

type jsTensorInfo struct {
	Name        string `json:"name"`
	TensorShape struct {
		Dim []struct {
			Size jsInt `json:"size"`
		} `json:"dim"`
		UnknownRank bool `json:"unknownRank"`
	} `json:"tensorShape"`
}

// jsInt reads an int64 written as a JSON string (protobuf JSON) or number.
type jsInt int64

func (j *jsInt) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := strconv.ParseInt(s, 10, 64)
	*j = jsInt(v)
	return err
}

// jsMeta is what a TF.js model says beyond its GraphDef.
type jsMeta struct {
	// weights maps a Const node to its manifest entry.
	weights map[string]*jsWeight
	// values holds the contents of small integer weights, read from the
	// weight files when they are present.
	values map[string][]int64
	// inputs and outputs are the signature's tensor shapes by tensor name
	// ("node:0"), nil when the model has no signature.
	inputs, outputs map[string][]int64
	// missing names the weight files that were not found.
	missing []string
}

// decodeJS reads a TF.js graph model: modelTopology is a GraphDef in
// protobuf JSON; weight shapes come from the manifest.
func decodeJS(data []byte, dir string) (*graphpb.GraphDef, *jsMeta, error) {
	var m jsModel
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, nil, fmt.Errorf("not a TensorFlow.js model: %v", err)
	}
	switch {
	case m.Format == "layers-model":
		return nil, nil, errors.New("is a TensorFlow.js layers model, not a graph model; convert it with tensorflowjs_converter --output_format=tfjs_graph_model")
	case len(m.ModelTopology) == 0 || string(m.ModelTopology) == "null":
		return nil, nil, errors.New("is JSON but not a TensorFlow.js graph model: it has no modelTopology")
	}
	gd := &graphpb.GraphDef{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(m.ModelTopology, gd); err != nil {
		return nil, nil, fmt.Errorf("modelTopology is not a GraphDef in protobuf JSON: %v", err)
	}
	meta := &jsMeta{weights: map[string]*jsWeight{}, values: map[string][]int64{}}
	for gi := range m.WeightsManifest {
		grp := &m.WeightsManifest[gi]
		for wi := range grp.Weights {
			w := &grp.Weights[wi]
			meta.weights[w.Name] = w
		}
		if dir != "" {
			meta.readGroup(dir, grp)
		}
	}
	sig := m.Signature
	if sig == nil {
		sig = m.UserDefined.Signature
	}
	if sig != nil {
		meta.inputs = sigShapes(sig.Inputs)
		meta.outputs = sigShapes(sig.Outputs)
	}
	return gd, meta, nil
}

func sigShapes(infos map[string]jsTensorInfo) map[string][]int64 {
	out := map[string][]int64{}
	for key, ti := range infos {
		name := ti.Name
		if name == "" {
			name = key
		}
		if ti.TensorShape.UnknownRank {
			continue
		}
		s := []int64{}
		for _, d := range ti.TensorShape.Dim {
			s = append(s, int64(d.Size))
		}
		out[canonical(name)] = s
	}
	return out
}

// canonical names a tensor as the graph does: "node" for output 0,
// "node:i" for the others.
func canonical(ref string) string {
	return strings.TrimSuffix(ref, ":0")
}

// jsDtypeSize is the byte size of a weight as stored (after
// quantization); 0 for strings, whose size the manifest does not give.
func jsDtypeSize(w *jsWeight) int64 {
	dt := w.Dtype
	if w.Quantization != nil && w.Quantization.Dtype != "" {
		dt = w.Quantization.Dtype
	}
	switch dt {
	case "float32", "int32", "uint32":
		return 4
	case "float16", "uint16", "int16":
		return 2
	case "uint8", "int8", "bool":
		return 1
	case "int64", "float64":
		return 8
	}
	return 0
}

// readGroup reads one manifest group's shards, if all are present, and
// keeps the contents of its small unquantized int32 weights.
func (m *jsMeta) readGroup(dir string, grp *jsGroup) {
	var buf []byte
	for _, p := range grp.Paths {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			m.missing = append(m.missing, p)
			return
		}
		buf = append(buf, b...)
	}
	off := int64(0)
	for i := range grp.Weights {
		w := &grp.Weights[i]
		size := jsDtypeSize(w)
		if size == 0 {
			return // a string weight: later offsets are unknowable
		}
		n := shapes.Prod(w.Shape)
		end := off + n*size
		if end > int64(len(buf)) {
			m.missing = append(m.missing, fmt.Sprintf("%s (too short for weight %q)", strings.Join(grp.Paths, ","), w.Name))
			return
		}
		if w.Quantization == nil && n <= maxFold && (w.Dtype == "int32" || w.Dtype == "bool") {
			vals := make([]int64, n)
			for k := range vals {
				if w.Dtype == "bool" {
					vals[k] = int64(buf[off+int64(k)])
				} else {
					vals[k] = int64(int32(binary.LittleEndian.Uint32(buf[off+4*int64(k):])))
				}
			}
			m.values[w.Name] = vals
		}
		off = end
	}
}

// jsDType maps a manifest dtype name.
func jsDType(s string) graph.DType {
	switch s {
	case "float32":
		return graph.Float32
	case "int32":
		return graph.Int32
	case "bool":
		return graph.Bool
	case "string":
		return graph.String
	case "complex64":
		return graph.Complex64
	}
	d, _ := graph.ParseDType(s)
	return d
}
