package onnx

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/internal/shapes"
	"github.com/opplace/opplace/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// conformanceDir is where Debian's libonnx-testdata installs ONNX's
// backend node tests.
const conformanceDir = "/usr/share/libonnx-testdata/data/node"

// knownConformanceFailures lists backend tests of supported ops whose
// inferred shapes are known to differ from the reference, with why.
var knownConformanceFailures = map[string]string{
	"test_nonmaxsuppression_center_point_box_format":    dataDependent,
	"test_nonmaxsuppression_flipped_coordinates":        dataDependent,
	"test_nonmaxsuppression_identical_boxes":            dataDependent,
	"test_nonmaxsuppression_limit_output_size":          dataDependent,
	"test_nonmaxsuppression_single_box":                 dataDependent,
	"test_nonmaxsuppression_suppress_by_IOU":            dataDependent,
	"test_nonmaxsuppression_suppress_by_IOU_and_scores": dataDependent,
	"test_nonmaxsuppression_two_batches":                dataDependent,
	"test_nonmaxsuppression_two_classes":                dataDependent,
	"test_unique_not_sorted_without_axis":               dataDependent,
	"test_unique_sorted_with_axis":                      dataDependent,
	"test_unique_sorted_with_axis_3d":                   dataDependent,
	"test_unique_sorted_with_negative_axis":             dataDependent,
	"test_unique_sorted_without_axis":                   dataDependent,
}

const dataDependent = "output size depends on float data that is not folded"

// conformanceCase loads one backend test: the model with its small
// integer inputs turned into initializers (so shape-feeding inputs such
// as Reshape's target fold as they would from a Constant), and the
// expected output dims.
func conformanceCase(dir string) (data []byte, want [][]int64, err error) {
	raw, err := os.ReadFile(filepath.Join(dir, "model.onnx"))
	if err != nil {
		return nil, nil, err
	}
	mp := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(raw, mp); err != nil {
		return nil, nil, err
	}
	g := mp.GetGraph()
	inits := map[string]bool{}
	for _, in := range g.GetInitializer() {
		inits[in.GetName()] = true
	}
	var inputs []*onnxpb.ValueInfoProto
	for _, in := range g.GetInput() {
		if !inits[in.GetName()] {
			inputs = append(inputs, in)
		}
	}
	set := filepath.Join(dir, "test_data_set_0")
	for i, in := range inputs {
		b, err := os.ReadFile(filepath.Join(set, fmt.Sprintf("input_%d.pb", i)))
		if err != nil {
			return nil, nil, err
		}
		tp := &onnxpb.TensorProto{}
		if err := proto.Unmarshal(b, tp); err != nil {
			return nil, nil, err
		}
		if in.GetType().GetTensorType() == nil {
			return nil, nil, fmt.Errorf("input %q is not a tensor", in.GetName())
		}
		// The data set's dims are authoritative for the input's shape.
		shape := &onnxpb.TensorShapeProto{}
		for _, d := range tp.GetDims() {
			shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{
				Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
		}
		in.GetType().GetTensorType().Shape = shape
		dt := onnxpb.TensorProto_DataType(tp.GetDataType())
		small := dt == onnxpb.TensorProto_INT64 || dt == onnxpb.TensorProto_INT32 || dt == onnxpb.TensorProto_FLOAT || dt == onnxpb.TensorProto_BOOL
		if small && shapes.Prod(tp.GetDims()) <= 64 {
			tp.Name = proto.String(in.GetName())
			g.Initializer = append(g.Initializer, tp)
		}
	}
	for i, out := range g.GetOutput() {
		// Drop the declared output shape: inference must compute it.
		tt := out.GetType().GetTensorType()
		if tt == nil {
			return nil, nil, fmt.Errorf("output %q is not a tensor", out.GetName())
		}
		tt.Shape = nil
		b, err := os.ReadFile(filepath.Join(set, fmt.Sprintf("output_%d.pb", i)))
		if err != nil {
			return nil, nil, err
		}
		tp := &onnxpb.TensorProto{}
		if err := proto.Unmarshal(b, tp); err != nil {
			return nil, nil, err
		}
		want = append(want, tp.GetDims())
	}
	data, err = proto.Marshal(mp)
	return data, want, err
}

// conformanceFamily names the op family a backend test exercises: that of
// its nodes (Constant nodes feeding them aside), "mixed" when they span
// families, "unsupported" when one has no shape inference.
func conformanceFamily(g *onnxpb.GraphProto) string {
	fam := ""
	for _, nd := range g.GetNode() {
		f := family(nd.GetDomain(), nd.GetOpType())
		switch {
		case f == "":
			return "unsupported"
		case nd.GetOpType() == "Constant" && len(g.GetNode()) > 1:
		case fam == "":
			fam = f
		case fam != f:
			fam = "mixed"
		}
	}
	if fam == "" {
		fam = "shapeops"
	}
	return fam
}

// TestConformance checks inferred output shapes against ONNX's backend
// node tests. It fails only on regressions: a test of supported ops whose
// shapes differ and that is not in knownConformanceFailures. Tests of
// unsupported ops and of non-tensor data (sequences, optionals) are
// skipped; a known failure that starts passing is logged for removal.
func TestConformance(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(conformanceDir, "*"))
	if err != nil || len(dirs) == 0 {
		t.Skipf("ONNX backend tests not installed (apt-get install libonnx-testdata): %s absent", conformanceDir)
	}
	type tally struct{ total, pass, known, skip int }
	perFamily := map[string]*tally{}
	var all tally
	var unsupported []string
	for _, dir := range dirs {
		name := filepath.Base(dir)
		raw, err := os.ReadFile(filepath.Join(dir, "model.onnx"))
		if err != nil {
			continue // not a test directory
		}
		mp := &onnxpb.ModelProto{}
		if err := proto.Unmarshal(raw, mp); err != nil {
			t.Errorf("%s: model.onnx does not decode: %v", name, err)
			continue
		}
		fam := conformanceFamily(mp.GetGraph())
		tl := perFamily[fam]
		if tl == nil {
			tl = &tally{}
			perFamily[fam] = tl
		}
		tl.total++
		all.total++
		if fam == "unsupported" {
			for _, nd := range mp.GetGraph().GetNode() {
				if !IsSupported(nd.GetDomain(), nd.GetOpType()) {
					unsupported = append(unsupported, nd.GetOpType())
				}
			}
			tl.skip++
			all.skip++
			continue
		}
		data, want, err := conformanceCase(dir)
		if err != nil {
			tl.skip++ // sequence/optional data sets and the like
			all.skip++
			continue
		}
		m, err := Decode(data, name, Options{})
		var problem string
		if err != nil {
			problem = err.Error()
		} else {
			g := m.Graph
			for i, id := range g.Outputs {
				tt := g.Tensor(id)
				if !tt.ShapeKnown {
					problem = fmt.Sprintf("output %d unshaped (want %v)", i, want[i])
					break
				}
				if !slices.Equal(tt.Shape, want[i]) {
					problem = fmt.Sprintf("output %d: got %v, want %v", i, tt.Shape, want[i])
					break
				}
			}
		}
		why, isKnown := knownConformanceFailures[name]
		switch {
		case problem == "":
			tl.pass++
			all.pass++
			if isKnown {
				t.Logf("%s: listed as a known failure but passes; remove it from knownConformanceFailures", name)
			}
		case isKnown:
			tl.known++
			all.known++
			t.Logf("%s: known failure (%s): %s", name, why, problem)
		default:
			t.Errorf("%s: %s", name, problem)
		}
	}
	lines := []string{"family: tests passed known-failures skipped"}
	for _, f := range sortedKeys(perFamily) {
		tl := perFamily[f]
		lines = append(lines, fmt.Sprintf("%s: %d %d %d %d", f, tl.total, tl.pass, tl.known, tl.skip))
	}
	slices.Sort(unsupported)
	t.Logf("per family:\n%s", strings.Join(lines, "\n"))
	t.Logf("unsupported ops: %v", slices.Compact(unsupported))
	t.Logf("conformance: %d tests, %d passed, %d known failures, %d skipped (unsupported ops or non-tensor data)",
		all.total, all.pass, all.known, all.skip)
}
