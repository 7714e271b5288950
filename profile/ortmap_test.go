package profile_test

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/onnx/onnxpb"
	"github.com/opplace/opplace/profile"
)

func readSample(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(samples, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadBertB1(t testing.TB) *graph.Graph {
	m, err := onnx.Load("../testdata/models/bert_base.onnx", onnx.Options{Dims: map[string]int64{"batch": 1}})
	if err != nil {
		t.Fatal(err)
	}
	return m.Graph
}

func shareOf(res *profile.ImportResult, op string) float64 {
	for _, s := range res.Shares {
		if s.Name == op {
			return s.MS
		}
	}
	return 0
}

// checkConserved: every kernel's time is an op's share or unmapped.
func checkConserved(t *testing.T, res *profile.ImportResult) {
	t.Helper()
	var sum float64
	for _, s := range res.Shares {
		sum += s.MS
	}
	matched := sum
	for _, k := range res.Unmapped {
		sum += k.MS
	}
	if math.Abs(sum-res.TraceMS) > 1e-5*res.TraceMS || math.Abs(matched-res.MatchedMS) > 1e-5*res.TraceMS {
		t.Errorf("op shares %.6f + unmapped = %.6f ms, trace %.6f ms (matched %.6f)", matched, sum, res.TraceMS, res.MatchedMS)
	}
}

// Real ONNX Runtime 1.30 CPU recordings (testdata/profiles/README.md):
// by name only, fused and NCHWc kernels match little; with the optimized
// model every kernel maps.
func TestImportORTOptimizedReal(t *testing.T) {
	tests := []struct {
		name      string
		g         *graph.Graph
		trace     string
		optimized string
		runs      int
		// Fused kernels and the ops each must share in.
		fused [][]string
	}{
		{"resnet50", loadResNetB1(t), "resnet50_b1_ort130_cpu.json", "resnet50_b1_ort130_cpu.opt.onnx", 4,
			[][]string{
				// "/relu/Relu_output_0_nchwc": Conv+Relu.
				{"/conv1/Conv", "/relu/Relu"},
				// "/layer1/layer1.0/conv3/Conv_output_0_nchwc": Conv+Add+Relu.
				{"/layer1/layer1.0/conv3/Conv", "/layer1/layer1.0/Add", "/layer1/layer1.0/relu_2/Relu"},
			}},
		{"bert_base", loadBertB1(t), "bert_base_b1_ort130_cpu.json", "bert_base_b1_ort130_cpu.opt.onnx", 4,
			[][]string{
				// ".../qkv/MatMul/MatMulAddFusion": MatMul+Add as a Gemm.
				{"/blocks/blocks.0/qkv/MatMul", "/blocks/blocks.0/qkv/Add"},
				// "Gelu" (one of 12 so named): erf GELU's five ops.
				{"/blocks/blocks.0/Div_2", "/blocks/blocks.0/Erf", "/blocks/blocks.0/Add_1", "/blocks/blocks.0/Mul", "/blocks/blocks.0/Mul_1"},
				{"/blocks/blocks.11/Div_2", "/blocks/blocks.11/Erf", "/blocks/blocks.11/Add_1", "/blocks/blocks.11/Mul", "/blocks/blocks.11/Mul_1"},
			}},
		{"densenet121", loadModel(t, "../testdata/models/heldout/densenet121.onnx"), "densenet121_b1_ort130_cpu.json", "densenet121_b1_ort130_cpu.opt.onnx", 2,
			[][]string{
				// "/features/denseblock1/denselayer1/norm1/BatchNormalization_output_0_bn_nchwc":
				// BatchNormalization turned into an NCHWc Conv, its ReLU fused.
				{"/features/denseblock1/denselayer1/norm1/BatchNormalization", "/features/denseblock1/denselayer1/relu1/Relu"},
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			trace := readSample(t, tc.trace)
			before, err := profile.ImportWith(tc.trace, trace, tc.g, testCPU, profile.ImportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			res, err := profile.ImportWith(tc.trace, trace, tc.g, testCPU,
				profile.ImportOptions{Optimized: readSample(t, tc.optimized), OptimizedName: tc.optimized})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d events, %d runs, %.3f ms per run (model_run %.3f); matched by name %.1f%% (%d ops), with the optimized model %.1f%% (%d ops), layout %.3f ms, %d unmeasured",
				res.Events, res.Runs, res.TraceMS, res.RunMS, 100*before.MatchedShare, len(before.Profile.Ops), 100*res.MatchedShare, len(res.Profile.Ops), res.LayoutMS, res.Unmeasured)
			if res.MatchedShare < profile.MinMatchedShare || len(res.Warnings) > 0 {
				t.Errorf("matched %.1f%%, warnings %q", 100*res.MatchedShare, res.Warnings)
			}
			if res.Unmeasured != 0 || res.Runs != tc.runs || len(res.Profile.Ops) <= len(before.Profile.Ops) {
				t.Errorf("%d unmeasured, %d runs, %d ops (by name %d)", res.Unmeasured, res.Runs, len(res.Profile.Ops), len(before.Profile.Ops))
			}
			checkConserved(t, res)
			checkConserved(t, before)
			for _, ops := range tc.fused {
				for _, op := range ops {
					if shareOf(res, op) <= 0 {
						t.Errorf("fused op %s has no share", op)
					}
				}
			}
			// The model's own profile predicts its run: the ops' median
			// times sum to within 10% of the median model_run.
			var sum float64
			for _, m := range res.Profile.Ops {
				if m.Runs != tc.runs {
					t.Fatalf("%s: %d runs", m.Name, m.Runs)
				}
				sum += m.MedianMS
			}
			if res.RunMS <= 0 || math.Abs(sum/res.RunMS-1) > 0.1 {
				t.Errorf("sum of op medians %.3f ms, model_run %.3f ms", sum, res.RunMS)
			}
		})
	}
}

// The ResNet-50 stem "/relu/Relu_output_0_nchwc" is Conv+Relu: its time
// splits by the roofline estimate, most to the convolution, and the two
// shares sum to the kernel's.
func TestImportORTFusedSplit(t *testing.T) {
	g := loadResNetB1(t)
	res, err := profile.ImportWith("t", readSample(t, "resnet50_b1_ort130_cpu.json"), g, testCPU,
		profile.ImportOptions{Optimized: readSample(t, "resnet50_b1_ort130_cpu.opt.onnx")})
	if err != nil {
		t.Fatal(err)
	}
	conv, relu := shareOf(res, "/conv1/Conv"), shareOf(res, "/relu/Relu")
	// The kernel's mean over the four recorded runs.
	const kernel = (1867 + 1561 + 1502 + 1626) / 4.0 / 1e3
	if math.Abs(conv+relu-kernel) > 1e-6 || !(conv > 5*relu) || relu <= 0 {
		t.Errorf("conv %.4f + relu %.4f ms, want the kernel's %.4f ms, most to the conv", conv, relu, kernel)
	}
}

// optimizedModel encodes an ONNX model of the given nodes.
func optimizedModel(t testing.TB, nodes ...*onnxpb.NodeProto) []byte {
	mp := &onnxpb.ModelProto{IrVersion: proto.Int64(8), Graph: &onnxpb.GraphProto{Name: proto.String("opt"), Node: nodes}}
	b, err := proto.Marshal(mp)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func node(name, opType, domain string, in, out []string) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{Name: proto.String(name), OpType: proto.String(opType), Domain: proto.String(domain), Input: in, Output: out}
}

// convRelu builds x[1x8x16x16] -> Conv(w) -> c -> Relu -> r.
func convRelu(t testing.TB) *graph.Graph {
	g := graph.New("convrelu", 3, 2)
	add := func(name string, shape []int64, kind graph.TensorKind) graph.TensorID {
		id, err := g.AddTensor(graph.Tensor{Name: name, DType: graph.Float32, Shape: shape, ShapeKnown: true, Kind: kind})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	x := add("x", []int64{1, 8, 16, 16}, graph.Input)
	w := add("w", []int64{8, 8, 3, 3}, graph.Parameter)
	c := add("c", []int64{1, 8, 16, 16}, graph.Activation)
	r := add("r", []int64{1, 8, 16, 16}, graph.Activation)
	for _, op := range []graph.Op{
		{Name: "conv", Type: "Conv", Inputs: []graph.TensorID{x, w}, Outputs: []graph.TensorID{c}, Work: graph.Work{FLOPs: 2 * 8 * 8 * 9 * 256}},
		{Name: "relu", Type: "Relu", Inputs: []graph.TensorID{c}, Outputs: []graph.TensorID{r}, Work: graph.Work{FLOPs: 2048}},
	} {
		if _, err := g.AddOp(op); err != nil {
			t.Fatal(err)
		}
	}
	g.Inputs, g.Outputs = []graph.TensorID{x}, []graph.TensorID{r}
	return g
}

// ORT's NCHWc form of convRelu: ReorderInput, a Conv with the Relu fused
// named after the tensor it computes, ReorderOutput.
func convReluOptimized(t testing.TB) []byte {
	const nchwc = "com.microsoft.nchwc"
	return optimizedModel(t,
		node("ReorderInput", "ReorderInput", nchwc, []string{"x"}, []string{"reorder_token_0"}),
		node("r_nchwc", "Conv", nchwc, []string{"reorder_token_0", "reorder_token_1"}, []string{"reorder_token_2"}),
		node("ReorderOutput", "ReorderOutput", nchwc, []string{"reorder_token_2"}, []string{"r"}),
	)
}

func ortEvent(name, opType string, index int, dur int) string {
	return `{"cat":"Node","ph":"X","name":"` + name + `_kernel_time","dur":` + strconv.Itoa(dur) + `,"args":{"op_name":"` + opType + `","node_index":"` + strconv.Itoa(index) + `"}}`
}

// Hand-checked: two runs of ReorderInput 10 us, the fused Conv+Relu 100
// us, ReorderOutput 6 us. The Conv gets the ReorderInput (it reads x),
// the Relu the ReorderOutput (it writes r), the fused kernel splits by
// the roofline estimate of each op (without launch overhead).
func TestImportORTLayoutAndSplit(t *testing.T) {
	g := convRelu(t)
	var ev []string
	for range 2 {
		ev = append(ev, ortEvent("ReorderInput", "ReorderInput", 3, 10), ortEvent("r_nchwc", "Conv", 4, 100), ortEvent("ReorderOutput", "ReorderOutput", 5, 6))
	}
	trace := "[" + strings.Join(ev, ",\n") + "]"
	res, err := profile.ImportWith("t.json", []byte(trace), g, testCPU, profile.ImportOptions{Optimized: convReluOptimized(t), OptimizedName: "t.opt.onnx"})
	if err != nil {
		t.Fatal(err)
	}
	est := func(name string) float64 {
		id, _ := g.OpByName(name)
		r, dt := cost.Roofline{}, testCPU.Cluster()
		return max(r.ComputeTime(g, id, dt), r.MemoryTime(g, id, dt))
	}
	convEst, reluEst := est("conv"), est("relu")
	if !(convEst > reluEst && reluEst > 0) {
		t.Fatalf("estimates conv %g relu %g", convEst, reluEst)
	}
	convFused := 0.1 * convEst / (convEst + reluEst)
	if res.TraceMS != 0.116 || res.MatchedMS != 0.116 || res.LayoutMS != 0.016 || res.MatchedShare != 1 || res.Runs != 2 || res.Unmeasured != 0 {
		t.Errorf("trace %v matched %v layout %v share %v runs %d unmeasured %d", res.TraceMS, res.MatchedMS, res.LayoutMS, res.MatchedShare, res.Runs, res.Unmeasured)
	}
	if c, r := shareOf(res, "conv"), shareOf(res, "relu"); math.Abs(c-(0.01+convFused)) > 1e-9 || math.Abs(r-(0.006+0.1-convFused)) > 1e-9 {
		t.Errorf("conv %.6f relu %.6f ms, want %.6f and %.6f", c, r, 0.01+convFused, 0.006+0.1-convFused)
	}
	checkConserved(t, res)

	// By name only, "r_nchwc" is the tensor r's producer, the Relu; the
	// reorders map to nothing and a warning says why.
	res, err = profile.ImportWith("t.json", []byte(trace), g, testCPU, profile.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if shareOf(res, "relu") != 0.1 || len(res.Unmapped) != 2 || res.Unmapped[0].Name != "ReorderInput" || res.LayoutMS != 0.016 {
		t.Errorf("name-only: shares %+v unmapped %+v layout %v", res.Shares, res.Unmapped, res.LayoutMS)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "optimized model") {
		t.Errorf("warnings %q", res.Warnings)
	}
	checkConserved(t, res)
}

// Below 80% matched the warning names the unmapped op types and kernels.
func TestImportLowShareWarns(t *testing.T) {
	g := convRelu(t)
	trace := "[" + ortEvent("r_nchwc", "Conv", 4, 10) + "," + ortEvent("MysteryKernel", "FusedThing", 9, 90) + "]"
	res, err := profile.ImportWith("t.json", []byte(trace), g, testCPU, profile.ImportOptions{Optimized: convReluOptimized(t)})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(res.MatchedShare-0.1) > 1e-9 || len(res.Warnings) != 1 {
		t.Fatalf("share %v warnings %q", res.MatchedShare, res.Warnings)
	}
	for _, want := range []string{"only 10.0%", "FusedThing 0.090 ms", "MysteryKernel (FusedThing)"} {
		if !strings.Contains(res.Warnings[0], want) {
			t.Errorf("warning %q lacks %q", res.Warnings[0], want)
		}
	}
	// x, w feed the conv; "relu" and "conv" are covered by r_nchwc.
	if res.Unmeasured != 0 {
		t.Errorf("%d unmeasured", res.Unmeasured)
	}
}

func TestImportOptimizedErrors(t *testing.T) {
	g := convRelu(t)
	trace := []byte("[" + ortEvent("r_nchwc", "Conv", 4, 10) + "]")
	for _, tc := range []struct {
		name string
		opt  []byte
		want string
	}{
		{"not onnx", []byte(`{"this": "is json"}`), "m.opt.onnx: not an ONNX model"},
		{"empty graph", optimizedModel(t), "m.opt.onnx: not an ONNX model"},
		{"another model", optimizedModel(t, node("n", "Relu", "", []string{"a"}, []string{"b"})), "m.opt.onnx: shares no tensor name with the model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := profile.ImportWith("t.json", trace, g, testCPU, profile.ImportOptions{Optimized: tc.opt, OptimizedName: "m.opt.onnx"})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	// A Chrome trace has no ONNX Runtime kernels to map.
	chrome := []byte(`{"traceEvents": [{"cat":"user_annotation","ph":"X","name":"relu","dur":3}]}`)
	if _, err := profile.ImportWith("c.json", chrome, g, testCPU, profile.ImportOptions{Optimized: convReluOptimized(t)}); err == nil || !strings.Contains(err.Error(), "Chrome trace") {
		t.Errorf("chrome trace with an optimized model: %v", err)
	}
}

// Any optimized model is refused or maps within the trace's time.
func FuzzImportOptimized(f *testing.F) {
	g := convRelu(f)
	f.Add(convReluOptimized(f))
	f.Add(optimizedModel(f, node("r_nchwc", "Conv", "", []string{"x", "r"}, []string{"r", "x"}), node("", "Reshape", "", nil, nil)))
	var ev []string
	for _, n := range []string{"ReorderInput", "r_nchwc", "ReorderOutput", "x", "r"} {
		ev = append(ev, ortEvent(n, "Conv", 1, 10))
	}
	trace := []byte("[" + strings.Join(ev, ",") + "]")
	f.Fuzz(func(t *testing.T, opt []byte) {
		res, err := profile.ImportWith("t.json", trace, g, testCPU, profile.ImportOptions{Optimized: opt})
		if err != nil {
			return
		}
		if res.TraceMS != 0.05 || res.MatchedMS > res.TraceMS+1e-9 {
			t.Fatalf("matched %v of %v ms", res.MatchedMS, res.TraceMS)
		}
		checkProfile(t, res.Profile)
	})
}

// The batch check holds for mapped kernels: the real batch-1 trace does
// not import into the model bound at batch 2.
func TestImportORTOptimizedChecksBatch(t *testing.T) {
	m, err := onnx.Load("../testdata/models/resnet50.onnx", onnx.Options{Shapes: map[string][]int64{"input.1": {2, 3, 224, 224}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = profile.ImportWith("t.json", readSample(t, "resnet50_b1_ort130_cpu.json"), m.Graph, testCPU,
		profile.ImportOptions{Optimized: readSample(t, "resnet50_b1_ort130_cpu.opt.onnx")})
	if err == nil || !strings.Contains(err.Error(), "the trace ran batch 1") {
		t.Errorf("err = %v", err)
	}
}

func loadModel(t testing.TB, path string) *graph.Graph {
	m, err := onnx.Load(path, onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m.Graph
}
