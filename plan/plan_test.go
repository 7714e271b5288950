package plan_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/opplace/opplace/plan"
)

func sample() *plan.Plan {
	return &plan.Plan{
		Model: "m.onnx", Cluster: "c", Strategy: "auto:m-etf", Mode: "train",
		PredictedStepMS: 12.5, LowerBoundMS: 10, Gap: 0.25, Fits: true, CrossDeviceBytes: 1 << 20,
		Devices: []plan.Device{
			{Name: "gpu0", Type: "V100-16GB", Host: "h", MemoryBytes: 16 << 30, PeakMemoryBytes: 1 << 30, BusyMS: 10, Ops: 2},
			{Name: "gpu1", Type: "V100-16GB", Host: "h", MemoryBytes: 16 << 30, PeakMemoryBytes: 0, BusyMS: 2, Ops: 1},
		},
		Ops: []plan.Op{
			{Name: `a "quoted"\op`, Type: "Conv", Phase: "forward", Device: "gpu0", StartMS: 0, EndMS: 5},
			{Name: "b\nnewline", Type: "Relu", Phase: "forward", Device: "gpu1", StartMS: 6, EndMS: 8},
			{Name: "c", Type: "Add", Phase: "forward", Device: "gpu0", StartMS: 8, EndMS: 12.5},
		},
		Transfers: []plan.Transfer{{Tensor: "a", From: "gpu0", To: "gpu1", Bytes: 1 << 20, StartMS: 5, EndMS: 6}},
	}
}

func TestWriteFormats(t *testing.T) {
	p := sample()
	var j bytes.Buffer
	if err := plan.Write(&j, p, plan.JSON); err != nil {
		t.Fatal(err)
	}
	var back plan.Plan
	if err := json.Unmarshal(j.Bytes(), &back); err != nil || back.Ops[0].Name != p.Ops[0].Name || back.Transfers[0].Bytes != 1<<20 {
		t.Fatalf("JSON round trip: %v %+v", err, back)
	}
	for _, field := range []string{`"predicted_step_ms"`, `"lower_bound_ms"`, `"peak_memory_bytes"`, `"busy_ms"`, `"start_ms"`, `"transfers"`} {
		if !bytes.Contains(j.Bytes(), []byte(field)) {
			t.Errorf("JSON lacks %s", field)
		}
	}
	var y bytes.Buffer
	if err := plan.Write(&y, p, plan.YAML); err != nil {
		t.Fatal(err)
	}
	var backY plan.Plan
	if err := yaml.Unmarshal(y.Bytes(), &backY); err != nil || backY.PredictedStepMS != 12.5 || len(backY.Ops) != 3 {
		t.Fatalf("YAML round trip: %v %+v", err, backY)
	}
	var tb bytes.Buffer
	if err := plan.Write(&tb, p, plan.Table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"12.500 ms predicted", "10.000 ms lower bound", "gap 25.0%", "gpu0", "1.00 GiB", "16.00 GiB", "transfers:  1, 1.00 MiB"} {
		if !strings.Contains(tb.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tb.String())
		}
	}
	if _, err := plan.ParseFormat("xml"); err == nil {
		t.Error("xml accepted")
	}
}

func TestMemoryEnvelope(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples []plan.MemorySample
		end     float64
		n       int
		want    []plan.MemorySample
	}{
		{"short curves pass through", []plan.MemorySample{{0, 5}, {1, 7}}, 2, 4, []plan.MemorySample{{0, 5}, {1, 7}}},
		{"a spike inside a window survives", []plan.MemorySample{{0, 1}, {0.5, 9}, {0.6, 1}, {1.5, 2}, {2.5, 3}, {3.5, 0}}, 4, 4,
			[]plan.MemorySample{{0, 9}, {1, 2}, {2, 3}}},
		{"equal windows merge", []plan.MemorySample{{0, 4}, {0.1, 4}, {1.2, 4}, {2.2, 4}, {3.9, 1}}, 4, 2, []plan.MemorySample{{0, 4}}},
	} {
		got := plan.MemoryEnvelope(tc.samples, tc.end, tc.n)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
		if len(got) > max(tc.n, len(tc.samples)) {
			t.Errorf("%s: %d samples, at most %d", tc.name, len(got), tc.n)
		}
	}
}

// TestWriteMicroBatchSizes checks the table's stages line says how many
// samples each replica runs per micro-batch: one count when the stages
// agree, each stage's when they do not, nothing when the batch is
// unknown.
func TestWriteMicroBatchSizes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		batch  int64
		m      int
		stages []plan.Stage
		want   string
	}{
		{"data parallel", 32, 1, []plan.Stage{{Replicas: 4, MicroBatchSize: 8}}, "stages: 1, 1 micro-batch of 8 samples per replica, bottleneck"},
		{"accumulation", 448, 4, []plan.Stage{{Replicas: 8, MicroBatchSize: 14}}, "stages: 1, 1f1b schedule, 4 micro-batches of 14 samples per replica, bottleneck"},
		{"uneven stages", 32, 8, []plan.Stage{{Replicas: 2, MicroBatchSize: 2}, {Index: 1, Replicas: 1, MicroBatchSize: 4}}, "8 micro-batches of 2 (stage 0), 4 (stage 1) samples per replica"},
		{"batch unknown", 0, 2, []plan.Stage{{Replicas: 1}, {Index: 1, Replicas: 1}}, "stages: 2, 1f1b schedule, 2 micro-batches, bottleneck"},
	} {
		p := sample()
		p.Batch, p.MicroBatches, p.Stages = tc.batch, tc.m, tc.stages
		if tc.m > 1 {
			p.Schedule = "1f1b"
		}
		var b bytes.Buffer
		if err := plan.Write(&b, p, plan.Table); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("%s: the table lacks %q:\n%s", tc.name, tc.want, b.String())
		}
	}
}
