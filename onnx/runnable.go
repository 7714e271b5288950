package onnx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/opplace/opplace/internal/importopt"
	"math"
	"math/rand/v2"

	"github.com/opplace/opplace/internal/shapes"
	"github.com/opplace/opplace/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// MaxModelBytes is the largest serialized model Runnable makes: protobuf
// cannot encode a message of 2 GiB or more, and ONNX Runtime refuses one.
const MaxModelBytes = 1<<31 - 1

// StrippedLocation is the external-data file StripWeights names for the
// tensors whose data it dropped. It never exists: like the shared models'
// deleted weight files it keeps the tensor's name, type and dims valid
// ONNX, and Runnable fills such tensors again.
const StrippedLocation = "opplace-stripped-weights.bin"

// RunnableOptions says how Runnable binds a model's inputs and fills its
// weights.
type RunnableOptions struct {
	// Options binds the graph inputs' dynamic dimensions: Dims, Batch and
	// Shapes, with the meaning they have for Load. Its other fields are
	// not used; Knobs names the settings in errors.
	Options
	// Seed seeds the random weights; the same seed gives the same bytes.
	Seed int64
}

// Runnable returns a copy of the serialized model that a runtime can
// execute: every tensor without data (an initializer or Constant whose
// data is in an external file, missing or not, or absent) gets
// deterministic random data, with its external-data fields cleared, and
// every graph input's dimensions are bound (o.Shapes for a whole input,
// else o.Dims by dimension name, else o.Batch for a dynamic leading
// dimension). Symbolic dimensions of the outputs and value_info that an
// input bound are bound too.
//
// Floating-point tensors get normal values with standard deviation 0.02
// (no NaN, infinities or denormals through a few layers); integer tensors
// get zeros, which are valid Gather indices and shapes; bool tensors
// false. A tensor of another type (string, complex, float8, 4-bit) is an
// error naming it, as is a copy that would reach MaxModelBytes, and a
// graph input left with a dimension unbound.
func Runnable(data []byte, o RunnableOptions) ([]byte, error) {
	mp, err := decodeModel(data)
	if err != nil {
		return nil, err
	}
	if err := o.Options.Validate(); err != nil {
		return nil, err
	}
	knobs := o.Knobs
	if knobs == nil {
		knobs = Fields{}
	}
	bound, err := bindInputs(mp.Graph, o.Options, knobs)
	if err != nil {
		return nil, err
	}
	for _, vis := range [][]*onnxpb.ValueInfoProto{mp.Graph.Output, mp.Graph.ValueInfo} {
		for _, vi := range vis {
			for _, d := range vi.GetType().GetTensorType().GetShape().GetDim() {
				if v, ok := bound[d.GetDimParam()]; ok && d.GetDimParam() != "" {
					d.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: v}
				}
			}
		}
	}

	// Size first, so a model too big to encode is refused before its
	// weights are drawn.
	var fill []*onnxpb.TensorProto
	total := int64(proto.Size(mp))
	eachTensor(mp.ProtoReflect(), func(t *onnxpb.TensorProto) {
		if err != nil || hasData(t) {
			return
		}
		n := shapes.Prod(t.GetDims())
		size, ok := fillSize(t.GetDataType())
		if !ok {
			err = fmt.Errorf("tensor %q has no data and element type %s, which cannot be filled with made-up values",
				t.GetName(), onnxpb.TensorProto_DataType(t.GetDataType()))
			return
		}
		if n > 0 && size > MaxModelBytes/n {
			total = math.MaxInt64
		} else if total < math.MaxInt64 {
			total += n*size + 16
		}
		fill = append(fill, t)
	})
	if err != nil {
		return nil, err
	}
	if total >= MaxModelBytes {
		return nil, fmt.Errorf("the model with its weights would be %s, and a protobuf message (an ONNX model in one file) must stay under 2 GiB; use a smaller model (fewer layers, a smaller hidden size)", byteSize(total))
	}
	r := rand.New(rand.NewPCG(uint64(o.Seed), 0x6f70706c616365)) // "opplace"
	for _, t := range fill {
		fillTensor(t, r)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(mp)
}

// StripWeights returns the serialized model with the data of its large
// tensors (initializers, Constants, subgraphs' tensors of more than 4096
// elements) dropped, keeping each one's name, element type and dims: the
// tensor is marked external in StrippedLocation, as the shared models
// mark their deleted weights. Small tensors keep their data: they are
// reshape targets, axes and scalars that shape inference reads, and cost
// little. Runnable fills the stripped tensors again.
func StripWeights(data []byte) ([]byte, error) {
	mp, err := decodeModel(data)
	if err != nil {
		return nil, err
	}
	eachTensor(mp.ProtoReflect(), func(t *onnxpb.TensorProto) {
		if shapes.Prod(t.GetDims()) <= maxFold && t.GetDataLocation() != onnxpb.TensorProto_EXTERNAL {
			return
		}
		t.RawData, t.FloatData, t.Int32Data, t.StringData = nil, nil, nil, nil
		t.Int64Data, t.DoubleData, t.Uint64Data = nil, nil, nil
		t.ExternalData = []*onnxpb.StringStringEntryProto{{Key: proto.String("location"), Value: proto.String(StrippedLocation)}}
		t.DataLocation = onnxpb.TensorProto_EXTERNAL.Enum()
	})
	return proto.MarshalOptions{Deterministic: true}.Marshal(mp)
}

func decodeModel(data []byte) (*onnxpb.ModelProto, error) {
	mp := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(data, mp); err != nil {
		return nil, fmt.Errorf("not an ONNX model (protobuf decoding failed: %v)", err)
	}
	if mp.GetIrVersion() <= 0 || mp.Graph == nil {
		return nil, errors.New("not an ONNX model (no ir_version or graph)")
	}
	return mp, nil
}

// bindInputs sets every graph input's dims and returns the symbolic
// dimensions bound, name → value.
func bindInputs(g *onnxpb.GraphProto, o Options, knobs Knobs) (map[string]int64, error) {
	inits := map[string]bool{}
	for _, t := range g.GetInitializer() {
		inits[t.GetName()] = true
	}
	bound := map[string]int64{}
	known := map[string]bool{}
	for _, vi := range g.GetInput() {
		name := vi.GetName()
		known[name] = true
		if inits[name] {
			continue // an initializer with a default value (IR < 4 style)
		}
		tt := vi.GetType().GetTensorType()
		if tt == nil {
			return nil, fmt.Errorf("input %q is not a tensor (sequence, map and optional inputs are not supported)", name)
		}
		if s, ok := o.Shapes[name]; ok {
			old := tt.GetShape().GetDim()
			if tt.GetShape() != nil && len(old) != len(s) {
				return nil, importopt.ShapeRankError(knobs, name, s, declaredDims(tt.GetShape()))
			}
			for i, d := range old {
				if p := d.GetDimParam(); p != "" {
					if _, ok := bound[p]; !ok {
						bound[p] = s[i]
					}
				}
			}
			shape := &onnxpb.TensorShapeProto{}
			for _, d := range s {
				shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
			}
			tt.Shape = shape
			continue
		}
		if tt.GetShape() == nil {
			return nil, fmt.Errorf("input %q has no declared shape; set it with %s", name, knobs.Shape(name, "D0,D1,..."))
		}
		for axis, d := range tt.GetShape().GetDim() {
			if _, fixed := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue); fixed {
				continue
			}
			v, err := unfixedDim(o, knobs, name, axis, d)
			if err != nil {
				return nil, err
			}
			if p := d.GetDimParam(); p != "" {
				if _, ok := bound[p]; !ok {
					bound[p] = v
				}
			}
			d.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: v}
		}
	}
	for _, k := range sortedKeys(o.Shapes) {
		if !known[k] {
			return nil, fmt.Errorf("%s: the model has no input named %q", knobs.Shape(k, ""), k)
		}
	}
	return bound, nil
}

// hasData reports whether a tensor carries its values (or has none to
// carry).
func hasData(t *onnxpb.TensorProto) bool {
	if t.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
		return false
	}
	if shapes.Prod(t.GetDims()) == 0 {
		return true
	}
	return len(t.RawData) > 0 || len(t.FloatData) > 0 || len(t.Int32Data) > 0 || len(t.StringData) > 0 ||
		len(t.Int64Data) > 0 || len(t.DoubleData) > 0 || len(t.Uint64Data) > 0
}

// fillSize is the bytes per element of the types Runnable fills.
func fillSize(dt int32) (int64, bool) {
	switch onnxpb.TensorProto_DataType(dt) {
	case onnxpb.TensorProto_FLOAT, onnxpb.TensorProto_INT32, onnxpb.TensorProto_UINT32:
		return 4, true
	case onnxpb.TensorProto_DOUBLE, onnxpb.TensorProto_INT64, onnxpb.TensorProto_UINT64:
		return 8, true
	case onnxpb.TensorProto_FLOAT16, onnxpb.TensorProto_BFLOAT16, onnxpb.TensorProto_INT16, onnxpb.TensorProto_UINT16:
		return 2, true
	case onnxpb.TensorProto_INT8, onnxpb.TensorProto_UINT8, onnxpb.TensorProto_BOOL:
		return 1, true
	}
	return 0, false
}

// fillTensor stores random data in t's raw_data and clears its external
// data.
func fillTensor(t *onnxpb.TensorProto, r *rand.Rand) {
	n := shapes.Prod(t.GetDims())
	size, _ := fillSize(t.GetDataType())
	b := make([]byte, n*size)
	normal := func() float64 {
		v := r.NormFloat64() * 0.02
		if math.Abs(v) < 1e-6 { // no denormals in any float type
			return 0
		}
		return v
	}
	switch onnxpb.TensorProto_DataType(t.GetDataType()) {
	case onnxpb.TensorProto_FLOAT:
		for i := int64(0); i < n; i++ {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(normal())))
		}
	case onnxpb.TensorProto_DOUBLE:
		for i := int64(0); i < n; i++ {
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(normal()))
		}
	case onnxpb.TensorProto_FLOAT16:
		for i := int64(0); i < n; i++ {
			binary.LittleEndian.PutUint16(b[2*i:], float16bits(float32(normal())))
		}
	case onnxpb.TensorProto_BFLOAT16:
		for i := int64(0); i < n; i++ {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(float32(normal()))>>16))
		}
	}
	// Integers and bools stay zero.
	t.RawData = b
	t.FloatData, t.Int32Data, t.StringData, t.Int64Data, t.DoubleData, t.Uint64Data = nil, nil, nil, nil, nil, nil
	t.ExternalData = nil
	t.DataLocation = nil
}

// float16bits converts a float32 of magnitude in [1e-4, 65504] (or 0) to
// IEEE half precision, rounding to nearest; smaller magnitudes flush to
// zero (they would be denormal).
func float16bits(f float32) uint16 {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	exp := int32(bits>>23&0xff) - 127 + 15
	mant := bits & 0x7fffff
	switch {
	case f == 0 || exp <= 0:
		return sign
	case exp >= 31:
		return sign | 0x7bff // largest finite
	}
	h := uint32(exp)<<10 | mant>>13
	if mant&0x1fff > 0x1000 || mant&0x1fff == 0x1000 && h&1 == 1 {
		h++ // may carry into the exponent, which is still right
	}
	return sign | uint16(h)
}

func byteSize(n int64) string {
	if n == math.MaxInt64 {
		return "over 8 EiB"
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}
