package profile_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/profile"
)

const samples = "../testdata/profiles"

// tiny builds x[4x8] -> MatMul(w[8x16]) -> Relu -> Erf -> Softmax.
func tiny(t testing.TB) *graph.Graph {
	g := graph.New("tiny", 4, 6)
	add := func(name string, shape []int64, kind graph.TensorKind) graph.TensorID {
		id, err := g.AddTensor(graph.Tensor{Name: name, DType: graph.Float32, Shape: shape, ShapeKnown: true, Kind: kind})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	x := add("x", []int64{4, 8}, graph.Input)
	w := add("w", []int64{8, 16}, graph.Parameter)
	mm := add("mm", []int64{4, 16}, graph.Activation)
	r := add("r", []int64{4, 16}, graph.Activation)
	e := add("e", []int64{4, 16}, graph.Activation)
	s := add("s", []int64{4, 16}, graph.Activation)
	for _, op := range []graph.Op{
		{Name: "matmul", Type: "MatMul", Inputs: []graph.TensorID{x, w}, Outputs: []graph.TensorID{mm}, Work: graph.Work{FLOPs: 2 * 4 * 8 * 16}},
		{Name: "relu", Type: "Relu", Inputs: []graph.TensorID{mm}, Outputs: []graph.TensorID{r}, Work: graph.Work{FLOPs: 64}},
		{Name: "erf", Type: "Erf", Inputs: []graph.TensorID{r}, Outputs: []graph.TensorID{e}, Work: graph.Work{FLOPs: 64}},
		{Name: "softmax", Type: "Softmax", Attrs: graph.Attrs{"axis": {Kind: graph.AttrInt, Int: -1}}, Inputs: []graph.TensorID{e}, Outputs: []graph.TensorID{s}, Work: graph.Work{FLOPs: 5 * 64}},
	} {
		if _, err := g.AddOp(op); err != nil {
			t.Fatal(err)
		}
	}
	g.Inputs, g.Outputs = []graph.TensorID{x}, []graph.TensorID{s}
	return g
}

var testCPU = profile.DeviceType{Name: "test-cpu", PeakFLOPS: 1e10, MemoryBandwidth: 1e10, LaunchOverhead: 1e-6}

func TestMeasureTiny(t *testing.T) {
	g := tiny(t)
	var calls int
	res, err := profile.Measure(context.Background(), g, profile.MeasureOptions{
		DeviceType: "test-cpu", CPU: &testCPU, Warmup: 1, Runs: 4,
		Progress: func(done, total int, _ string) { calls++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	p := res.Profile
	if res.Distinct != 4 || res.Measured != 3 || calls != 5 {
		t.Errorf("distinct %d measured %d progress calls %d; want 4, 3, 5", res.Distinct, res.Measured, calls)
	}
	if len(p.Unsupported) != 1 || p.Unsupported[0].Type != "Erf" || p.Unsupported[0].Count != 1 {
		t.Errorf("unsupported %+v, want one Erf", p.Unsupported)
	}
	names := []string{}
	for _, m := range p.Ops {
		names = append(names, m.Name)
		// A loaded machine can stall one run past the op budget, which
		// stops the op after MinRuns (3) runs.
		if m.DeviceType != "test-cpu" || m.Runs < 3 || m.Runs > 4 || !(m.MedianMS > 0) || m.P10MS > m.MedianMS || m.P90MS < m.MedianMS {
			t.Errorf("measurement %+v", m)
		}
		id, _ := g.OpByName(m.Name)
		if m.Key != profile.OpKey(g, id) {
			t.Errorf("%s: key %s, want %s", m.Name, m.Key, profile.OpKey(g, id))
		}
	}
	if strings.Join(names, ",") != "matmul,relu,softmax" {
		t.Errorf("measured %v", names)
	}
	if p.DeviceType("test-cpu") == nil || p.Format != profile.FormatVersion || p.Source != profile.SourceGorgonia {
		t.Errorf("profile header %+v", p)
	}
}

func TestOpKey(t *testing.T) {
	g := tiny(t)
	if profile.OpKey(g, 0) == profile.OpKey(g, 1) {
		t.Error("MatMul and Relu share a key")
	}
	k := profile.OpKey(g, 3)
	g.Ops[3].Attrs = graph.Attrs{"axis": {Kind: graph.AttrInt, Int: 0}}
	if profile.OpKey(g, 3) == k {
		t.Error("changing an attribute kept the key")
	}
	if got, want := profile.Shapes(g, 0), "float32[4x8],float32[8x16]->float32[4x16]"; got != want {
		t.Errorf("Shapes = %q, want %q", got, want)
	}
}

// The model prefers a measurement of the op by name (if it computes the
// same thing), then by key, then the calibrated roofline, then Base.
func TestModelLookup(t *testing.T) {
	g := tiny(t)
	dt := testCPU
	dt.Calibration = &profile.Calibration{Families: []profile.FamilyFit{
		{Family: profile.FamilyAll, ComputeEfficiency: 0.5, MemoryEfficiency: 0.5, OverheadS: 1e-5},
	}}
	p := &profile.Profile{Format: profile.FormatVersion, DeviceTypes: []profile.DeviceType{dt}, Ops: []profile.Measurement{
		{Name: "matmul", Key: profile.OpKey(g, 0), DeviceType: "test-cpu", MedianMS: 2},
		{Name: "relu", Key: "0123456789abcdef", DeviceType: "test-cpu", MedianMS: 3}, // other shapes
		{Name: "elsewhere", Key: profile.OpKey(g, 3), DeviceType: "test-cpu", MedianMS: 4},
	}}
	m := profile.NewModel(p, nil)
	cdt := dt.Cluster()
	other := &cluster.DeviceType{Name: "gpu", PeakFLOPS: map[graph.DType]float64{graph.Float32: 1e12}, MemoryBandwidth: 1e11}
	bytesRelu := float64(cost.BytesMoved(g, 1))
	tests := []struct {
		op   graph.OpID
		dt   *cluster.DeviceType
		want float64
		src  profile.Source
	}{
		{0, cdt, 2e-3, profile.FromName},
		{1, cdt, bytesRelu/(1e10*0.5) + 1e-5, profile.FromCalibration},
		{3, cdt, 4e-3, profile.FromKey},
		{0, other, cost.Roofline{}.OpTime(g, 0, other), profile.FromBase},
	}
	for _, tc := range tests {
		got, src := m.Lookup(g, tc.op, tc.dt)
		if math.Abs(got-tc.want) > 1e-12 || src != tc.src {
			t.Errorf("op %s on %s: %g (%v), want %g (%v)", g.Ops[tc.op].Name, tc.dt.Name, got, src, tc.want, tc.src)
		}
	}
}

// Calibration recovers efficiencies that generated the measurements (an
// elementwise family: flat efficiencies and a fitted overhead).
func TestCalibrateRecoversFactors(t *testing.T) {
	g := graph.New("fit", 0, 0)
	dt := profile.DeviceType{Name: "d", PeakFLOPS: 1e9, MemoryBandwidth: 1e9, LaunchOverhead: 1e-6}
	const ce, me, oh = 0.4, 0.25, 2e-5
	p := &profile.Profile{Format: profile.FormatVersion, DeviceTypes: []profile.DeviceType{dt}}
	for i := range 12 {
		// Even ops are compute-bound, odd ones memory-bound; every op
		// has its own size.
		n := int64(1000 * (i + 1))
		flops := int64(100) * n
		if i%2 == 1 {
			flops = n / 10
		}
		x, _ := g.AddTensor(graph.Tensor{Name: "x" + string(rune('a'+i)), DType: graph.Float32, Shape: []int64{n}, ShapeKnown: true, Kind: graph.Input})
		y, _ := g.AddTensor(graph.Tensor{Name: "y" + string(rune('a'+i)), DType: graph.Float32, Shape: []int64{n}, ShapeKnown: true})
		id, err := g.AddOp(graph.Op{Name: "op" + string(rune('a'+i)), Type: "Relu", Inputs: []graph.TensorID{x}, Outputs: []graph.TensorID{y}, Work: graph.Work{FLOPs: flops}})
		if err != nil {
			t.Fatal(err)
		}
		c := float64(flops) / dt.PeakFLOPS
		m := float64(cost.BytesMoved(g, id)) / dt.MemoryBandwidth
		p.Ops = append(p.Ops, profile.Measurement{Name: g.Ops[id].Name, DeviceType: "d", MedianMS: 1e3 * (max(c/ce, m/me) + oh)})
	}
	cal, err := profile.Calibrate(p, g, "d")
	if err != nil {
		t.Fatal(err)
	}
	f := cal.Fit(profile.FamilyElementwise)
	if f == nil || f.Family != profile.FamilyElementwise || math.Abs(f.ComputeEfficiency-ce) > 1e-3 || math.Abs(f.MemoryEfficiency-me) > 1e-3 || math.Abs(f.OverheadS-oh) > 1e-8 {
		t.Fatalf("fit %+v, want %g %g %g", f, ce, me, oh)
	}
	if cal.After.MedianRelErr > 1e-4 || cal.Before.MedianRelErr < 0.3 {
		t.Errorf("errors before %+v after %+v", cal.Before, cal.After)
	}
	if p.DeviceType("d").Calibration != cal {
		t.Error("calibration not stored on the device type")
	}
}

func loadResNetB1(t testing.TB) *graph.Graph {
	m, err := onnx.Load("../testdata/models/resnet50.onnx", onnx.Options{Shapes: map[string][]int64{"input.1": {1, 3, 224, 224}}})
	if err != nil {
		t.Fatal(err)
	}
	return m.Graph
}

func TestImportSamples(t *testing.T) {
	resnet := loadResNetB1(t)
	bm, err := onnx.Load("../testdata/models/bert_base.onnx", onnx.Options{Dims: map[string]int64{"batch": 1}})
	if err != nil {
		t.Fatal(err)
	}
	bert := bm.Graph
	kernels := 0
	for i := range bert.Ops {
		if !cost.IsMetadataOp(bert.Ops[i].Type) {
			kernels++
		}
	}
	tests := []struct {
		file                  string
		g                     *graph.Graph
		source                string
		ops, runs, unmeasured int
		unmatched             string
	}{
		// 169 nodes less 47 Identity nodes ORT optimised away, 3 runs;
		// the Identities are view ops, so nothing is left unmeasured.
		{"resnet50_b1_onnxruntime_cpu.json", resnet, profile.SourceORT, 122, 3, 0, "ReorderOutput_token_0"},
		// One GPU-side annotation per kernel-launching node; the CPU-side
		// ones time launches and are skipped. The profiler step range names
		// no node.
		{"bert_base_b1_pytorch_v100.json", bert, profile.SourceChrome, kernels, 1, 0, "ProfilerStep#2"},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			res, err := profile.Import(filepath.Join(samples, tc.file), tc.g, testCPU)
			if err != nil {
				t.Fatal(err)
			}
			p := res.Profile
			if p.Source != tc.source || len(p.Ops) != tc.ops || res.Unmeasured != tc.unmeasured {
				t.Errorf("source %s, %d ops, %d unmeasured; want %s, %d, %d", p.Source, len(p.Ops), res.Unmeasured, tc.source, tc.ops, tc.unmeasured)
			}
			if strings.Join(p.Unmatched, ",") != tc.unmatched {
				t.Errorf("unmatched %v, want %s", p.Unmatched, tc.unmatched)
			}
			for _, m := range p.Ops {
				if m.Runs != tc.runs || !(m.MedianMS > 0) || m.P10MS > m.MedianMS || m.P90MS < m.MedianMS {
					t.Fatalf("measurement %+v (want %d runs)", m, tc.runs)
				}
			}
		})
	}
}

// Hand-checked: one node timed 10, 30 and 20 us in three runs.
func TestImportORTStatistics(t *testing.T) {
	g := tiny(t)
	trace := `[
{"cat":"Session","pid":1,"tid":1,"dur":5,"ts":0,"ph":"X","name":"model_run","args":{}},
{"cat":"Node","pid":1,"tid":1,"dur":0,"ts":1,"ph":"X","name":"relu_fence_before","args":{"op_name":"Relu"}},
{"cat":"Node","pid":1,"tid":1,"dur":10,"ts":2,"ph":"X","name":"relu_kernel_time","args":{"op_name":"Relu"}},
{"cat":"Node","pid":1,"tid":1,"dur":30,"ts":20,"ph":"X","name":"relu_kernel_time","args":{"op_name":"Relu"}},
{"cat":"Node","pid":1,"tid":1,"dur":20,"ts":60,"ph":"X","name":"relu_kernel_time","args":{"op_name":"Relu"}},
{"cat":"Node","pid":1,"tid":1,"dur":7,"ts":90,"ph":"X","name":"fused_gelu_kernel_time","args":{"op_name":"Gelu"}}
]`
	res, err := profile.ImportBytes("t.json", []byte(trace), g, testCPU)
	if err != nil {
		t.Fatal(err)
	}
	p := res.Profile
	if len(p.Ops) != 1 || res.Events != 4 || res.Matched != 3 || res.Unmeasured != 3 {
		t.Fatalf("ops %+v events %d matched %d unmeasured %d", p.Ops, res.Events, res.Matched, res.Unmeasured)
	}
	m := p.Ops[0]
	if m.Name != "relu" || m.MedianMS != 0.02 || m.P10MS != 0.012 || m.P90MS != 0.028 || m.Runs != 3 || m.Type != "Relu" {
		t.Errorf("measurement %+v, want relu median 0.02 p10 0.012 p90 0.028 ms over 3 runs", m)
	}
	if strings.Join(p.Unmatched, ",") != "fused_gelu" {
		t.Errorf("unmatched %v", p.Unmatched)
	}
}

func TestImportErrors(t *testing.T) {
	g := tiny(t)
	for _, tc := range []struct{ name, data, want string }{
		{"empty", "", "empty"},
		{"not json", "hello", "not an ONNX Runtime profile"},
		{"no events", `{"traceEvents": []}`, "no complete events"},
		{"object without events", `{"x": 1}`, "traceEvents"},
		{"negative", `[{"cat":"Node","name":"relu_kernel_time","ph":"X","dur":-3}]`, "negative dur"},
		{"no kernel events", `[{"cat":"Session","name":"model_run","ph":"X","dur":3}]`, "no complete events"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := profile.ImportBytes("bad.json", []byte(tc.data), g, testCPU)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "bad.json: ") {
				t.Errorf("err = %v, want one naming bad.json and %q", err, tc.want)
			}
		})
	}
}

func TestLoadRoundTripAndErrors(t *testing.T) {
	g := tiny(t)
	dir := t.TempDir()
	p := &profile.Profile{Format: profile.FormatVersion, Source: "test", DeviceTypes: []profile.DeviceType{testCPU},
		Ops: []profile.Measurement{{Name: "relu", Key: profile.OpKey(g, 1), DeviceType: "test-cpu", MedianMS: 0.5, P10MS: 0.4, P90MS: 0.7, Runs: 9}}}
	path := filepath.Join(dir, "p.json")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	q, err := profile.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Ops) != 1 || q.Ops[0] != p.Ops[0] || q.DeviceTypes[0].PeakFLOPS != 1e10 {
		t.Errorf("round trip: %+v", q)
	}
	for _, tc := range []struct{ name, data, want string }{
		{"wrong format", `{"format": "other/2", "source": "x", "device_types": [], "ops": []}`, "format"},
		{"unknown field", `{"format": "opplace-profile/1", "colour": 1}`, "unknown field"},
		{"bad device", `{"format": "opplace-profile/1", "device_types": [{"name": "d", "peak_flops": 0, "memory_bandwidth": 1}], "ops": []}`, "peak_flops"},
		{"no device type", `{"format": "opplace-profile/1", "device_types": [], "ops": [{"name": "a", "median_ms": 1}]}`, "device_type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := profile.Parse("p.json", []byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := profile.Load(filepath.Join(dir, "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("err = %v", err)
	}
}

// TestCalibrationAtPathPeak: a calibrated op the profile did not time is
// priced at the fitted fraction of the peak of the path it runs on, so a
// float32 fit prices a bfloat16 matmul at the tensor cores' peak and a
// float32 one at TF32's when the base model runs float32 matmuls so.
func TestCalibrationAtPathPeak(t *testing.T) {
	g := graph.New("path", 0, 0)
	add := func(dt graph.DType) graph.OpID {
		n := fmt.Sprint(len(g.Ops))
		a, _ := g.AddTensor(graph.Tensor{Name: "a" + n, DType: dt, Shape: []int64{512, 512}, ShapeKnown: true, Kind: graph.Input})
		b, _ := g.AddTensor(graph.Tensor{Name: "b" + n, DType: dt, Shape: []int64{512, 512}, ShapeKnown: true, Kind: graph.Parameter})
		y, _ := g.AddTensor(graph.Tensor{Name: "y" + n, DType: dt, Shape: []int64{512, 512}, ShapeKnown: true})
		id, err := g.AddOp(graph.Op{Name: "mm" + n, Type: "MatMul", Inputs: []graph.TensorID{a, b}, Outputs: []graph.TensorID{y},
			Work: graph.Work{FLOPs: 2 * 512 * 512 * 512}})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	f32, bf16 := add(graph.Float32), add(graph.BFloat16)
	pdt := profile.DeviceType{Name: "gpu", PeakFLOPS: 10e12, MemoryBandwidth: 1e15}
	pdt.Calibration = &profile.Calibration{Families: []profile.FamilyFit{
		{Family: profile.FamilyAll, ComputeEfficiency: 0.5, MemoryEfficiency: 1, OverheadS: 0},
	}}
	p := &profile.Profile{Format: profile.FormatVersion, DeviceTypes: []profile.DeviceType{pdt}}
	cdt := &cluster.DeviceType{Name: "gpu", PeakFLOPS: map[graph.DType]float64{graph.Float32: 10e12, graph.BFloat16: 160e12},
		TF32FLOPS: 80e12, MemoryBandwidth: 1e15}
	flops := float64(g.Ops[f32].Work.FLOPs)
	for _, tc := range []struct {
		name string
		base cost.Model
		op   graph.OpID
		peak float64
	}{
		{"float32", nil, f32, 10e12},
		{"bfloat16 on tensor cores", nil, bf16, 160e12},
		{"float32 under TF32", cost.Roofline{TF32: true}, f32, 80e12},
	} {
		got, src := profile.NewModel(p, tc.base).Lookup(g, tc.op, cdt)
		if want := flops / (tc.peak * 0.5); src != profile.FromCalibration || math.Abs(got-want) > 1e-15 {
			t.Errorf("%s: %g s (%v), want %g (calibrated)", tc.name, got, src, want)
		}
	}
}

// TestCalibrationFitsPathPeak: measurements of ops that ran on a path 16
// times the float32 peak (bfloat16 matmuls on tensor cores, recorded as
// PathSpeedup) are fitted as a fraction of that path's peak, so the
// efficiency that made them comes back, not 16 times it.
func TestCalibrationFitsPathPeak(t *testing.T) {
	dt := profile.DeviceType{Name: "d", PeakFLOPS: 1e12, MemoryBandwidth: 1e15, LaunchOverhead: 1e-6}
	const speedup, eff = 16.0, 0.5
	p := &profile.Profile{Format: profile.FormatVersion, Model: "m", DeviceTypes: []profile.DeviceType{dt}}
	for i := range 12 {
		flops := int64(1e9) << i
		p.Ops = append(p.Ops, profile.Measurement{Name: fmt.Sprint("mm", i), Key: fmt.Sprint("k", i), Type: "MatMul", DeviceType: "d",
			FLOPs: flops, Bytes: 1 << 20, WorkingSet: 1 << 20, PathSpeedup: speedup,
			MedianMS: 1e3 * (float64(flops)/(dt.PeakFLOPS*speedup*eff) + dt.LaunchOverhead)})
	}
	cal, err := profile.CalibratePooled([]*profile.Profile{p}, "d", 0)
	if err != nil {
		t.Fatal(err)
	}
	f := cal.Fit(profile.FamilyMatMul)
	if f == nil || math.Abs(f.ComputeEfficiency-eff) > 0.02*eff {
		t.Fatalf("fit %+v, want compute efficiency %g of the path's peak", f, eff)
	}
	if cal.After.MedianRelErr > 0.01 {
		t.Errorf("after calibration median error %g", cal.After.MedianRelErr)
	}
}
