package onnx

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/opplace/opplace/internal/shapes"
	"github.com/opplace/opplace/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// tinyRunnable is x[batch,4] · w[4,3] + b[3], with an int64 shape
// initializer and a bool and a float16 weight, all but the shape without
// data.
func tinyRunnable() *modelBuilder {
	b := newModel(17).symInput("x", f32, "batch", 4).weight("w", 4, 3).weight("b", 3).
		ints("shape", []int64{2}, -1, 3).
		node("MatMul", strs("x", "w"), strs("xw")).node("Add", strs("xw", "b"), strs("y")).
		node("Reshape", strs("y", "shape"), strs("z")).output("z")
	b.m.Graph.Output[0].Type = valueInfo("z", f32).Type
	b.m.Graph.Output[0].Type.GetTensorType().Shape.Dim = []*onnxpb.TensorShapeProto_Dimension{
		{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "batch"}}, {Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: 3}}}
	b.m.Graph.Initializer = append(b.m.Graph.Initializer,
		&onnxpb.TensorProto{Name: proto.String("mask"), DataType: proto.Int32(int32(onnxpb.TensorProto_BOOL)), Dims: []int64{5}},
		&onnxpb.TensorProto{Name: proto.String("half"), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT16)), Dims: []int64{1000}},
		&onnxpb.TensorProto{Name: proto.String("idx"), DataType: proto.Int32(i64), Dims: []int64{2, 2},
			DataLocation: onnxpb.TensorProto_EXTERNAL.Enum()})
	return b
}

func decode(t *testing.T, data []byte) *onnxpb.ModelProto {
	t.Helper()
	mp := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(data, mp); err != nil {
		t.Fatal(err)
	}
	return mp
}

func inputDims(mp *onnxpb.ModelProto, i int) []int64 {
	var out []int64
	for _, d := range mp.Graph.Input[i].GetType().GetTensorType().GetShape().GetDim() {
		if d.GetDimParam() != "" {
			out = append(out, -1)
			continue
		}
		out = append(out, d.GetDimValue())
	}
	return out
}

func TestRunnableTiny(t *testing.T) {
	data := tinyRunnable().bytes(t)
	for _, tc := range []struct {
		name    string
		o       RunnableOptions
		want    []int64
		wantErr string
	}{
		{name: "dim", o: RunnableOptions{Options: Options{Dims: map[string]int64{"batch": 2}}}, want: []int64{2, 4}},
		{name: "batch", o: RunnableOptions{Options: Options{Batch: 5}}, want: []int64{5, 4}},
		{name: "shape", o: RunnableOptions{Options: Options{Shapes: map[string][]int64{"x": {7, 4}}}}, want: []int64{7, 4}},
		{name: "dim beats batch", o: RunnableOptions{Options: Options{Batch: 5, Dims: map[string]int64{"batch": 3}}}, want: []int64{3, 4}},
		{name: "unbound", o: RunnableOptions{}, wantErr: `input "x" axis 0 is the symbolic dimension "batch"; bind it with Options.Dims["batch"] = N or Options.Batch = N`},
		{name: "no such input", o: RunnableOptions{Options: Options{Batch: 1, Shapes: map[string][]int64{"q": {1}}}}, wantErr: `Options.Shapes["q"]: the model has no input named "q"`},
		{name: "rank", o: RunnableOptions{Options: Options{Shapes: map[string][]int64{"x": {1, 2, 3}}}}, wantErr: `Options.Shapes["x"] = []int64{1,2,3}: the model declares x with 2 axes (batch×4), the shape given has 3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Runnable(data, tc.o)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mp := decode(t, out)
			if got := inputDims(mp, 0); !equalInts(got, tc.want) {
				t.Errorf("input dims %v, want %v", got, tc.want)
			}
			if got := mp.Graph.Output[0].GetType().GetTensorType().GetShape().GetDim()[0].GetDimValue(); got != tc.want[0] {
				t.Errorf("output dim 0 = %d, want %d (bound from the input)", got, tc.want[0])
			}
			for _, it := range mp.Graph.Initializer {
				n := shapes.Prod(it.GetDims())
				size, _ := fillSize(it.GetDataType())
				if it.GetDataLocation() == onnxpb.TensorProto_EXTERNAL || len(it.ExternalData) > 0 {
					t.Errorf("%s: still external", it.GetName())
				}
				if it.GetName() == "shape" {
					if !equalInts(it.Int64Data, []int64{-1, 3}) {
						t.Errorf("shape initializer changed: %v", it.Int64Data)
					}
					continue
				}
				if int64(len(it.RawData)) != n*size {
					t.Errorf("%s: %d bytes of data, want %d", it.GetName(), len(it.RawData), n*size)
				}
			}
			// Same seed, same bytes; another seed, other weights.
			again, _ := Runnable(data, tc.o)
			if !bytes.Equal(out, again) {
				t.Error("not deterministic")
			}
			o2 := tc.o
			o2.Seed = 99
			other, _ := Runnable(data, o2)
			if bytes.Equal(out, other) {
				t.Error("the seed changes nothing")
			}
		})
	}
}

func TestRunnableValues(t *testing.T) {
	out, err := Runnable(tinyRunnable().bytes(t), RunnableOptions{Options: Options{Batch: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range decode(t, out).Graph.Initializer {
		raw := it.RawData
		switch it.GetName() {
		case "w", "b":
			for i := 0; i < len(raw); i += 4 {
				v := float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[i:])))
				if math.IsNaN(v) || math.Abs(v) > 0.2 {
					t.Errorf("%s: value %g", it.GetName(), v)
				}
			}
		case "half":
			var sum2 float64
			for i := 0; i < len(raw); i += 2 {
				h := binary.LittleEndian.Uint16(raw[i:])
				if e := h >> 10 & 0x1f; e == 0x1f || e == 0 && h&0x3ff != 0 {
					t.Fatalf("half %d: 0x%04x is not a normal number", i/2, h)
				}
				v := math.Ldexp(1+float64(h&0x3ff)/1024, int(h>>10&0x1f)-15)
				if h>>10&0x1f == 0 {
					v = 0
				}
				sum2 += v * v
			}
			if std := math.Sqrt(sum2 / 1000); std < 0.017 || std > 0.023 {
				t.Errorf("float16 std %g, want about 0.02", std)
			}
		case "idx", "mask":
			for _, c := range raw {
				if c != 0 {
					t.Fatalf("%s: integer/bool data not zero", it.GetName())
				}
			}
		}
	}
}

func TestFloat16Bits(t *testing.T) {
	for _, tc := range []struct {
		f    float32
		want uint16
	}{{0, 0}, {1, 0x3c00}, {-2, 0xc000}, {0.5, 0x3800}, {65504, 0x7bff}, {1e6, 0x7bff}, {1e-8, 0}, {0.02, 0x251f}} {
		if got := float16bits(tc.f); got != tc.want {
			t.Errorf("float16bits(%g) = 0x%04x, want 0x%04x", tc.f, got, tc.want)
		}
	}
}

func TestRunnableErrors(t *testing.T) {
	str := tinyRunnable()
	str.m.Graph.Initializer = append(str.m.Graph.Initializer, &onnxpb.TensorProto{Name: proto.String("names"),
		DataType: proto.Int32(int32(onnxpb.TensorProto_STRING)), Dims: []int64{2}})
	big := tinyRunnable().weight("huge", 1<<15, 1<<14) // 2 GiB of float32
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"string", str.bytes(t), `tensor "names" has no data and element type STRING`},
		{"too big", big.bytes(t), `under 2 GiB; use a smaller model`},
		{"garbage", []byte("not a model"), "not an ONNX model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Runnable(tc.data, RunnableOptions{Options: Options{Batch: 1}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestStripWeights(t *testing.T) {
	b := tinyRunnable().weight("big", 100, 100)
	run, err := Runnable(b.bytes(t), RunnableOptions{Options: Options{Batch: 1}})
	if err != nil {
		t.Fatal(err)
	}
	stripped, err := StripWeights(run)
	if err != nil {
		t.Fatal(err)
	}
	if len(stripped) >= len(run)/4 {
		t.Errorf("stripped %d bytes from %d", len(stripped), len(run))
	}
	mp := decode(t, stripped)
	for _, it := range mp.Graph.Initializer {
		external := it.GetDataLocation() == onnxpb.TensorProto_EXTERNAL
		if want := it.GetName() == "big"; external != want {
			t.Errorf("%s: external %v, want %v", it.GetName(), external, want)
		}
		if external && (len(it.RawData) > 0 || it.ExternalData[0].GetValue() != StrippedLocation || it.GetDataType() != f32 || !equalInts(it.Dims, []int64{100, 100})) {
			t.Errorf("%s: not stripped to name, type and dims: %v", it.GetName(), it)
		}
	}
	// The stripped model still imports, and is runnable again.
	if _, err := Decode(stripped, "stripped", Options{Batch: 1}); err != nil {
		t.Error(err)
	}
	again, err := Runnable(stripped, RunnableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != len(run) {
		t.Errorf("runnable again: %d bytes, want %d", len(again), len(run))
	}
}

// TestRunnableTooBig refuses gpt2_xl (1.6G float32 parameters, 6.5 GB)
// before drawing any weight.
func TestRunnableTooBig(t *testing.T) {
	data, err := os.ReadFile(modelPath("gpt2_xl"))
	if err != nil {
		t.Skip(err)
	}
	_, err = Runnable(data, RunnableOptions{Options: Options{Dims: map[string]int64{"batch": 1}}})
	if err == nil || !strings.Contains(err.Error(), "would be 6.") || !strings.Contains(err.Error(), "use a smaller model") {
		t.Fatalf("err = %v", err)
	}
}

// TestRunnableResNet50 fills a shared model's 25.5M stripped parameters.
func TestRunnableResNet50(t *testing.T) {
	data, err := os.ReadFile(modelPath("resnet50"))
	if err != nil {
		t.Skip(err)
	}
	for _, tc := range []struct {
		name string
		o    RunnableOptions
		want []int64
	}{
		{"as exported", RunnableOptions{}, []int64{32, 3, 224, 224}},
		{"batch 1", RunnableOptions{Options: Options{Shapes: map[string][]int64{"input.1": {1, 3, 224, 224}}}}, []int64{1, 3, 224, 224}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Runnable(data, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if want := int64(25507944 * 4); int64(len(out)) < want {
				t.Errorf("%d bytes, want at least %d of weights", len(out), want)
			}
			mp := decode(t, out)
			if got := inputDims(mp, 0); !equalInts(got, tc.want) {
				t.Errorf("input dims %v, want %v", got, tc.want)
			}
			m, err := Decode(out, "resnet50", Options{})
			if err != nil {
				t.Fatal(err)
			}
			params, _, _ := totals(m.Graph)
			if params != 25507944 {
				t.Errorf("params %d after filling", params)
			}
			stripped, err := StripWeights(out)
			if err != nil {
				t.Fatal(err)
			}
			if len(stripped) > 1<<20 { // biases of up to 4096 elements stay
				t.Errorf("stripped model %d bytes (the stripped export %d)", len(stripped), len(data))
			}
		})
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
