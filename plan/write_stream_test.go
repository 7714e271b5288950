package plan_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/plan"
)

// encoderJSON is what plan.Write rendered before it streamed: one
// json.Encoder with SetIndent("", "  ").
func encoderJSON(t *testing.T, p *plan.Plan) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(p); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func sameJSON(t *testing.T, p *plan.Plan) {
	t.Helper()
	var got bytes.Buffer
	if err := plan.Write(&got, p, plan.JSON); err != nil {
		t.Fatal(err)
	}
	want := encoderJSON(t, p)
	if !bytes.Equal(got.Bytes(), want) {
		n := 0
		for n < len(want) && n < got.Len() && want[n] == got.Bytes()[n] {
			n++
		}
		lo := max(0, n-80)
		t.Fatalf("streamed JSON differs from json.Encoder at byte %d (%d vs %d bytes):\ngot  ...%q\nwant ...%q",
			n, got.Len(), len(want), got.Bytes()[lo:min(got.Len(), n+80)], want[lo:min(len(want), n+80)])
	}
}

// TestWriteJSONStreamsSameBytes checks the streamed JSON against the
// encoder's on real plans: every family the planner returns (placement,
// data parallel, pipeline stages with runs and all-reduces, candidates).
func TestWriteJSONStreamsSameBytes(t *testing.T) {
	root := filepath.Join("..", "testdata")
	for _, tc := range []struct {
		model, cluster, strategy string
		dims                     map[string]int64
	}{
		{"models/resnet50.onnx", "4xV100", "", nil},
		{"models/resnet50.onnx", "4xV100", "heft", nil},
		{"models/resnet50.onnx", "hetero", "m-etf", nil},
		{"models/gpt2_small.onnx", "8xA100-2host", "", map[string]int64{"batch": 8}},
		{"models/gpt2_small.onnx", "8xA100-2host", "pipeline", map[string]int64{"batch": 8}},

		{"costed/mlp_train.json", "4xV100", "", nil},
		{"costed/bert24_layers_training.json", "8xA100-2host", "", nil},
	} {
		name := tc.model + "/" + tc.cluster + "/" + tc.strategy
		t.Run(name, func(t *testing.T) {
			o := pipeline.Options{
				ModelPath:   filepath.Join(root, tc.model),
				ClusterPath: filepath.Join(root, "clusters", tc.cluster+".yaml"),
				Import:      pipeline.ImportOptions{Dims: tc.dims},
				Strategy:    tc.strategy,
			}
			if o.Strategy == "" {
				o.Strategy = pipeline.Auto
			}
			res, err := pipeline.Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			sameJSON(t, res.Plan)
		})
	}
}

// TestWriteJSONStreamsOddPlans covers what real plans may not: empty and
// nil slices, omitted fields, HTML and control characters, and a
// random-ish plan with runs, stages and candidates.
func TestWriteJSONStreamsOddPlans(t *testing.T) {
	sameJSON(t, &plan.Plan{})
	sameJSON(t, &plan.Plan{Ops: []plan.Op{}, Transfers: []plan.Transfer{}, Devices: []plan.Device{}, Warnings: []string{}})
	sameJSON(t, sample())
	r := rand.New(rand.NewSource(1))
	str := func() string {
		const alphabet = "ab<>&'\"\\\n\t\x01é\u2028\u2029/ "
		rs := []rune(alphabet)
		b := make([]rune, r.Intn(12))
		for i := range b {
			b[i] = rs[r.Intn(len(rs))]
		}
		return string(b)
	}
	num := func() float64 {
		switch r.Intn(4) {
		case 0:
			return 0
		case 1:
			return r.Float64() * 1e-9
		case 2:
			return r.Float64() * 1e25
		}
		return float64(r.Intn(1000)) / 8
	}
	for trial := 0; trial < 20; trial++ {
		p := &plan.Plan{Model: str(), Cluster: str(), Strategy: str(), Family: str(), Mode: str(),
			PredictedStepMS: num(), LowerBoundMS: num(), LowerBoundKind: str(), Gap: num(), Batch: int64(r.Intn(3)),
			ThroughputSamplesPerS: num(), EstimatedStepMS: num(), Fits: r.Intn(2) == 0, CrossDeviceBytes: r.Int63(),
			Schedule: str(), Replicas: r.Intn(3), MicroBatches: r.Intn(3), BottleneckMS: num(), BubbleFraction: num()}
		for i := r.Intn(4); i > 0; i-- {
			d := plan.Device{Name: str(), Type: str(), Host: str(), MemoryBytes: r.Int63(), BusyMS: num(), Ops: r.Intn(9)}
			for k := r.Intn(3); k > 0; k-- {
				d.Memory = append(d.Memory, plan.MemorySample{MS: num(), Bytes: r.Int63()})
			}
			p.Devices = append(p.Devices, d)
		}
		for i := r.Intn(50); i > 0; i-- {
			op := plan.Op{Name: str() + strconv.Itoa(i), Type: str(), Phase: str(), Device: str(), StartMS: num(), EndMS: num()}
			for k := r.Intn(3); k > 0; k-- {
				op.Runs = append(op.Runs, plan.Run{MicroBatch: k, StartMS: num(), EndMS: num()})
			}
			p.Ops = append(p.Ops, op)
		}
		for i := r.Intn(20); i > 0; i-- {
			p.Transfers = append(p.Transfers, plan.Transfer{Tensor: str(), MicroBatch: r.Intn(2), From: str(), To: str(), Bytes: r.Int63(), StartMS: num(), EndMS: num()})
		}
		for i := r.Intn(3); i > 0; i-- {
			p.AllReduces = append(p.AllReduces, plan.AllReduce{Stage: i, Devices: []string{str(), str()}, Bytes: r.Int63(), StartMS: num()})
			p.Stages = append(p.Stages, plan.Stage{Index: i, Devices: []string{str()}, ReplicaDevices: [][]string{{str()}}, Ops: []string{str(), str()}, FirstOp: str(), TimeMS: num()})
			p.Candidates = append(p.Candidates, plan.Candidate{Strategy: str(), Family: str(), PredictedStepMS: num(), SolveMS: num(), Error: str(), Why: str()})
			p.Warnings = append(p.Warnings, str())
		}
		sameJSON(t, p)
	}
}

// TestWriteJSONLargeArrays covers arrays long enough to be rendered in
// chunks on several goroutines (a window of chunks at a time, the last
// window partly filled), on one core and on several.
func TestWriteJSONLargeArrays(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	p := &plan.Plan{Model: "m<&>"}
	for i := range 20_011 {
		op := plan.Op{Name: "op\u2028" + strconv.Itoa(i), Type: "MatMul", Device: "gpu" + strconv.Itoa(i%4), StartMS: float64(i) / 7, EndMS: float64(i)/7 + 1e-21}
		if i%3 == 0 {
			op.Runs = []plan.Run{{MicroBatch: 1, StartMS: float64(i), EndMS: 1e22}}
		}
		p.Ops = append(p.Ops, op)
	}
	for i := range 4097 {
		p.Transfers = append(p.Transfers, plan.Transfer{Tensor: "t" + strconv.Itoa(i), MicroBatch: i % 2, From: "a", To: "b", Bytes: int64(i) << 20, EndMS: float64(i)})
	}
	for _, procs := range []int{1, 2, 3, 8} {
		runtime.GOMAXPROCS(procs)
		sameJSON(t, p)
	}
}
