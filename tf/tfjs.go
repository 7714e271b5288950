package tf

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/files"
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
	// notes are other warnings about the weight files: longer than the
	// manifest declares, or not read at all (a model read from a stream).
	notes []string
}

// decodeJS reads a TF.js graph model: modelTopology is a GraphDef in
// protobuf JSON; weight shapes come from the manifest, and the values of
// small integer weights from the weight files in dir ("" reads none).
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
	var unread []string
	for gi := range m.WeightsManifest {
		grp := &m.WeightsManifest[gi]
		for pi, p := range grp.Paths {
			if err := checkWeightPath(p); err != nil {
				return nil, nil, fmt.Errorf("weightsManifest[%d].paths[%d] %q %v", gi, pi, p, err)
			}
		}
		for wi := range grp.Weights {
			w := &grp.Weights[wi]
			meta.weights[w.Name] = w
		}
		if dir == "" {
			unread = append(unread, grp.Paths...)
			continue
		}
		if err := meta.readGroup(dir, gi, grp); err != nil {
			return nil, nil, err
		}
	}
	if len(unread) > 0 {
		meta.notes = append(meta.notes, fmt.Sprintf("weight file %s not read: the model was not read from a file in a directory (a pipe or device has none), so the values of shape-feeding constants are unknown; give model.json's path to read them", strings.Join(unread, ", ")))
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

// checkWeightPath refuses a manifest path that names a file outside the
// model's directory: TF.js fetches weight files relative to model.json,
// so a path that is absolute or climbs out with ".." is not a TF.js
// model's, and may name anything (/dev/zero).
func checkWeightPath(p string) error {
	clean := path.Clean(filepath.ToSlash(p))
	switch {
	case p == "":
		return errors.New("is empty: each path names a weight file in the model's directory; fix the manifest")
	case path.IsAbs(clean) || filepath.IsAbs(p) || filepath.VolumeName(p) != "":
		return errors.New("is an absolute path: TF.js reads weight files from model.json's directory or below it; fix the path to name the file relative to model.json")
	case clean == ".." || strings.HasPrefix(clean, "../"):
		return errors.New("leads out of the model's directory: TF.js reads weight files from model.json's directory or below it; fix the path, or move the file beside model.json")
	}
	return nil
}

// shard is one of a group's weight files, open.
type shard struct {
	f    *os.File
	size int64
}

// readGroup checks one manifest group's shards against the manifest and
// keeps the contents of its small unquantized int32 and bool weights,
// reading only their bytes: nothing the manifest does not declare is
// read or allocated. A missing shard is a warning (m.missing); a shard
// that is not a regular file, or shards shorter than the manifest
// declares, are errors; longer ones are a warning (m.notes).
func (m *jsMeta) readGroup(dir string, gi int, grp *jsGroup) error {
	var shards []shard
	defer func() {
		for _, s := range shards {
			s.f.Close()
		}
	}()
	total := int64(0)
	for pi, p := range grp.Paths {
		f, err := os.Open(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			m.missing = append(m.missing, p)
			return nil
		}
		st, err := f.Stat()
		if err == nil && !st.Mode().IsRegular() {
			err = errors.New("is not a regular file (a directory, pipe or device)")
		}
		if err != nil {
			f.Close()
			return fmt.Errorf("weightsManifest[%d].paths[%d] %q %v: a weight file holds the bytes of the weights the manifest lists; fix the path", gi, pi, p, err)
		}
		shards = append(shards, shard{f, st.Size()})
		total += st.Size()
	}
	// The bytes the manifest declares: a string weight's size is not
	// declared, and nothing after it can be located.
	declared, known := int64(0), true
	for i := range grp.Weights {
		n, size := jsBytes(&grp.Weights[i])
		if n < 0 || size == 0 {
			known = false
			break
		}
		declared = shapes.AddSat(declared, shapes.MulSat(n, size))
	}
	names := strings.Join(grp.Paths, ", ")
	switch {
	case known && total < declared:
		return fmt.Errorf("weightsManifest[%d]: weight file %s holds %d bytes, but the manifest declares %d bytes for its weights: the file is truncated or belongs to another model; fetch it again, or remove it to plan from model.json alone", gi, names, total, declared)
	case known && total > declared:
		m.notes = append(m.notes, fmt.Sprintf("weight file %s holds %d bytes, %d more than the manifest declares for its weights: it may belong to another version of the model; the values of shape-feeding constants are read at the manifest's offsets", names, total, total-declared))
	}
	off := int64(0)
	for i := range grp.Weights {
		w := &grp.Weights[i]
		n, size := jsBytes(w)
		if n < 0 || size == 0 {
			return nil // later offsets are unknowable
		}
		end := shapes.AddSat(off, shapes.MulSat(n, size))
		if end > total {
			return fmt.Errorf("weightsManifest[%d]: weight file %s holds %d bytes, too few for weight %q at bytes %d to %d: the file is truncated or belongs to another model; fetch it again, or remove it to plan from model.json alone", gi, names, total, w.Name, off, end)
		}
		if w.Quantization == nil && n <= maxFold && (w.Dtype == "int32" || w.Dtype == "bool") {
			buf := make([]byte, end-off)
			if err := readShards(shards, off, buf); err != nil {
				return fmt.Errorf("weightsManifest[%d]: weight file %s: cannot read weight %q: %v", gi, names, w.Name, files.Cause(err))
			}
			vals := make([]int64, n)
			for k := range vals {
				if w.Dtype == "bool" {
					vals[k] = int64(buf[k])
				} else {
					vals[k] = int64(int32(binary.LittleEndian.Uint32(buf[4*k:])))
				}
			}
			m.values[w.Name] = vals
		}
		off = end
	}
	return nil
}

// jsBytes is a weight's element count and the byte size of one element
// as stored; n is -1 for a shape with a negative dimension, size 0 for a
// string weight.
func jsBytes(w *jsWeight) (n, size int64) {
	for _, d := range w.Shape {
		if d < 0 {
			return -1, 0
		}
	}
	return shapes.Prod(w.Shape), jsDtypeSize(w)
}

// readShards fills buf from the group's bytes at off, the shards read
// back to back.
func readShards(shards []shard, off int64, buf []byte) error {
	for _, s := range shards {
		if len(buf) == 0 {
			return nil
		}
		if off >= s.size {
			off -= s.size
			continue
		}
		k := min(int64(len(buf)), s.size-off)
		if _, err := s.f.ReadAt(buf[:k], off); err != nil {
			return err
		}
		buf, off = buf[k:], 0
	}
	if len(buf) > 0 {
		return io.ErrUnexpectedEOF
	}
	return nil
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
