package profile_test

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/opplace/opplace/profile"
)

func atenEvent(name string, ts, dur int) string {
	return `{"name":"` + name + `","ph":"X","ts":` + strconv.Itoa(ts) + `,"dur":` + strconv.Itoa(dur) + `,"tid":1,"pid":"CPU functions","args":{}}`
}

// A real PyTorch 1.13 CPU profile (no Kineto: aten ops only, no module
// names) of the module resnet50.onnx was exported from: its aten ops,
// aligned by type and order, cover every kernel op; batch_norm's time
// goes to the convolution the export folded it into.
func TestImportPyTorchAtenReal(t *testing.T) {
	g := loadResNetB1(t)
	const file = "resnet50_b1_pytorch113_cpu.json"
	res, err := profile.ImportWith(file, readSample(t, file), g, testCPU, profile.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d aten events, %d runs, %.1f ms per run (model_run %.1f), matched %.2f%%, %d ops with a time, %d unmeasured",
		res.Events, res.Runs, res.TraceMS, res.RunMS, 100*res.MatchedShare, len(res.Profile.Ops), res.Unmeasured)
	if res.Profile.Source != profile.SourceChrome || res.Events != 352 || res.Runs != 2 || res.MatchedShare < 0.999 || res.Unmeasured != 0 || len(res.Profile.Ops) != 122 {
		t.Errorf("source %s, %d events, %d runs, share %v, %d unmeasured, %d ops", res.Profile.Source, res.Events, res.Runs, res.MatchedShare, res.Unmeasured, len(res.Profile.Ops))
	}
	checkConserved(t, res)
	var sum float64
	for _, m := range res.Profile.Ops {
		sum += m.MedianMS
	}
	if math.Abs(sum/res.RunMS-1) > 0.1 {
		t.Errorf("sum of op medians %.1f ms, model_run %.1f ms", sum, res.RunMS)
	}
	// Every convolution outweighs the Relu after it.
	if c, r := shareOf(res, "/layer1/layer1.0/conv1/Conv"), shareOf(res, "/layer1/layer1.0/relu/Relu"); !(c > 10*r && r > 0) {
		t.Errorf("conv %.3f relu %.3f ms", c, r)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "aligned with the model's ops by type and order") {
		t.Errorf("warnings %q", res.Warnings)
	}
}

// Hand-checked alignment on convRelu: conv2d 50 us and the folded
// batch_norm 10 us go to the Conv, relu_ 5 us to the Relu; aten::empty
// matches nothing; ops outside the model_run range are not counted.
func TestImportPyTorchAtenAlign(t *testing.T) {
	g := convRelu(t)
	var ev []string
	ev = append(ev, atenEvent("aten::zeros", 0, 3))
	for r := range 2 {
		base := 100 + 1000*r
		ev = append(ev, `{"name":"model_run","ph":"X","ts":`+strconv.Itoa(base)+`,"dur":200,"tid":1,"pid":"CPU functions","args":{}}`,
			atenEvent("aten::conv2d", base+1, 50), atenEvent("aten::convolution", base+2, 48), atenEvent("aten::empty", base+60, 1),
			atenEvent("aten::batch_norm", base+70, 10), atenEvent("aten::relu_", base+90, 5))
	}
	res, err := profile.ImportWith("pt.json", []byte("["+strings.Join(ev, ",\n")+"]"), g, testCPU, profile.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, r := shareOf(res, "conv"), shareOf(res, "relu"); c != 0.06 || r != 0.005 {
		t.Errorf("conv %v relu %v ms, want 0.06 and 0.005", c, r)
	}
	if res.Events != 8 || res.Runs != 2 || res.TraceMS != 0.066 || res.RunMS != 0.2 || len(res.Unmapped) != 1 || res.Unmapped[0].Name != "aten::empty" {
		t.Errorf("events %d runs %d trace %v run %v unmapped %+v", res.Events, res.Runs, res.TraceMS, res.RunMS, res.Unmapped)
	}
	checkConserved(t, res)
}

// A GPU trace without node annotations: each aten op is timed by the
// kernels its runtime calls launched (by correlation id), not by its
// CPU-side duration. The synthetic V100 sample less its annotations.
func TestImportPyTorchAtenGPU(t *testing.T) {
	var trace struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal(readSample(t, "bert_base_b1_pytorch_v100.json"), &trace); err != nil {
		t.Fatal(err)
	}
	var kept []map[string]any
	var kernelUS float64
	for _, e := range trace.TraceEvents {
		switch e["cat"] {
		case "user_annotation", "gpu_user_annotation":
			if !strings.HasPrefix(e["name"].(string), "ProfilerStep#") {
				continue
			}
		case "kernel":
			kernelUS += e["dur"].(float64)
		}
		kept = append(kept, e)
	}
	data, err := json.Marshal(map[string]any{"traceEvents": kept})
	if err != nil {
		t.Fatal(err)
	}
	res, err := profile.ImportWith("v100.json", data, loadBertB1(t), testCPU, profile.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d aten events, kernel time %.3f ms, matched %.1f%%, %d ops with a time, %d unmeasured", res.Events, res.TraceMS, 100*res.MatchedShare, len(res.Profile.Ops), res.Unmeasured)
	if math.Abs(res.TraceMS-kernelUS/1e3) > 1e-3 || res.MatchedShare < profile.MinMatchedShare || res.Runs != 1 {
		t.Errorf("trace %.4f ms (kernels %.4f ms), share %v, runs %d", res.TraceMS, kernelUS/1e3, res.MatchedShare, res.Runs)
	}
	checkConserved(t, res)
}
