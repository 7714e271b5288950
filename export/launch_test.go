package export

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/plan"
)

// launchPlan is a plan of stages on hosts of four GPUs each: stage s runs
// replicas[s] replicas of group[s] devices each (tensor-parallel when
// tensor is set), devices taken in order from n0gpu0.
func launchPlan(batch int64, m int, replicas, group []int, tensor bool) *plan.Plan {
	p := &plan.Plan{Model: "m.onnx", Strategy: "auto:test", Mode: "train", Batch: batch, MicroBatches: m, PredictedStepMS: 12.5}
	total := 0
	for s := range replicas {
		total += replicas[s] * group[s]
	}
	for i := range total + 2 { // two idle devices at the end
		p.Devices = append(p.Devices, plan.Device{Name: fmt.Sprintf("n%dgpu%d", i/4, i%4), Type: "A100-80GB", Host: fmt.Sprintf("node%d", i/4)})
	}
	next := 0
	for s := range replicas {
		st := plan.Stage{Index: s, Replicas: replicas[s], MicroBatchSize: batch / int64(m*replicas[s])}
		for range replicas[s] {
			var g []string
			for range group[s] {
				g = append(g, p.Devices[next].Name)
				p.Ops = append(p.Ops, plan.Op{Name: fmt.Sprintf("op%d", next), Device: p.Devices[next].Name})
				p.Devices[next].Ops = 1
				next++
			}
			st.Devices = append(st.Devices, g...)
			if group[s] > 1 {
				st.ReplicaDevices = append(st.ReplicaDevices, g)
			}
		}
		if tensor && group[s] > 1 {
			st.TensorParallel = group[s]
		}
		p.Stages = append(p.Stages, st)
	}
	return p
}

func TestRankMap(t *testing.T) {
	// Two stages, each two replicas of tensor-parallel pairs: 8 ranks on
	// two hosts, the third host's first two GPUs idle.
	p := launchPlan(16, 4, []int{2, 2}, []int{2, 2}, true)
	rm, err := BuildRankMap(p, Options{Source: "p.json"})
	if err != nil {
		t.Fatal(err)
	}
	if rm.WorldSize != 8 || len(rm.Hosts) != 2 || rm.Hosts[1].FirstRank != 4 || rm.Hosts[1].NodeRank != 1 || rm.Hosts[0].Processes != 4 || rm.Hosts[0].CUDAVisibleDevices != nil {
		t.Fatalf("hosts %+v, world %d", rm.Hosts, rm.WorldSize)
	}
	r5 := rm.Ranks[5]
	if r5.Device != "n1gpu1" || r5.Host != "node1" || r5.LocalRank != 1 || r5.GPU != 1 || r5.Stage != 1 || r5.Replica != 0 || r5.Member != 1 {
		t.Errorf("rank 5: %+v", r5)
	}
	for name, got := range map[string][][]int{"data-parallel": rm.DataParallel, "tensor-parallel": rm.TensorParallel, "pipeline": rm.Pipeline} {
		want := map[string][][]int{
			"data-parallel":   {{0, 2}, {1, 3}, {4, 6}, {5, 7}},
			"tensor-parallel": {{0, 1}, {2, 3}, {4, 5}, {6, 7}},
			"pipeline":        {{0, 4}, {1, 5}, {2, 6}, {3, 7}},
		}[name]
		if !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("%s groups %v, want %v", name, got, want)
		}
	}
	// Every rank once, numbered in order.
	for i, r := range rm.Ranks {
		if r.Rank != i {
			t.Fatalf("rank %d listed at %d", r.Rank, i)
		}
	}
	// Idle GPUs on a host: the host lists the ones it exposes.
	p = launchPlan(8, 1, []int{2}, []int{1}, false)
	p.Stages[0].Devices = []string{"n0gpu1", "n0gpu3"}
	rm, err = BuildRankMap(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rm.Hosts[0].CUDAVisibleDevices, []int{1, 3}) || rm.Ranks[1].GPU != 3 || rm.Ranks[1].LocalRank != 1 || rm.Pipeline != nil {
		t.Errorf("hosts %+v ranks %+v", rm.Hosts, rm.Ranks)
	}
	hf, err := Render("hostfile", launchPlan(16, 4, []int{2, 2}, []int{2, 2}, true), Options{Source: "p.json"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(hf), "\nnode0 slots=4\nnode1 slots=4\n") || !strings.HasPrefix(string(hf), "# hosts of p.json") {
		t.Errorf("hostfile:\n%s", hf)
	}
	// A device in two places, a host no hostfile can name: refused.
	p = launchPlan(8, 1, []int{2}, []int{1}, false)
	p.Stages[0].Devices = []string{"n0gpu0", "n0gpu0"}
	if _, err := BuildRankMap(p, Options{}); err == nil || !strings.Contains(err.Error(), "runs in two places") {
		t.Errorf("a device twice: %v", err)
	}
	p = launchPlan(8, 1, []int{2}, []int{1}, false)
	p.Devices[0].Host = "node 0; rm"
	if _, err := Render("hostfile", p, Options{}); err == nil {
		t.Error("a host name with spaces written to a hostfile")
	}
}

// dsDefinitions are DeepSpeed's configuration keys and their JSON types,
// kept as test data with their source.
type dsDefinitions struct {
	Keys                    map[string]string `json:"keys"`
	Zero                    map[string]string `json:"zero_optimization"`
	ZeroStages              []int             `json:"zero_stages"`
	PipelineZeroStages      []int             `json:"pipeline_zero_stages"`
	BF16                    map[string]string `json:"bf16"`
	FP16                    map[string]string `json:"fp16"`
	ActivationCheckpointing map[string]string `json:"activation_checkpointing"`
	Ignored                 []string          `json:"ignored"`
}

// checkDeepSpeed checks a ds_config against DeepSpeed's definitions: every
// key known with its type, the ZeRO stage one DeepSpeed has (and one its
// pipeline engine runs when stages > 1), and DeepSpeed's batch assertion
// for a data-parallel degree dp.
func checkDeepSpeed(t *testing.T, doc []byte, dp, stages int) map[string]any {
	t.Helper()
	raw, err := os.ReadFile("../testdata/runtimes/deepspeed-config.json")
	if err != nil {
		t.Fatal(err)
	}
	var defs dsDefinitions
	if err := json.Unmarshal(raw, &defs); err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(doc, &cfg); err != nil {
		t.Fatal(err)
	}
	typeOf := func(v any) string {
		switch x := v.(type) {
		case bool:
			return "boolean"
		case float64:
			if x == float64(int64(x)) {
				return "integer"
			}
			return "number"
		case map[string]any:
			return "object"
		}
		return fmt.Sprintf("%T", v)
	}
	check := func(section string, m map[string]any, keys map[string]string) {
		for k, v := range m {
			want, ok := keys[k]
			if !ok && !(section == "" && slices.Contains(defs.Ignored, k)) {
				t.Errorf("%s%s: no such DeepSpeed key", section, k)
			}
			if ok && typeOf(v) != want && !(want == "number" && typeOf(v) == "integer") {
				t.Errorf("%s%s: %s, DeepSpeed takes %s", section, k, typeOf(v), want)
			}
		}
	}
	check("", cfg, defs.Keys)
	for name, keys := range map[string]map[string]string{"zero_optimization": defs.Zero, "bf16": defs.BF16, "fp16": defs.FP16, "activation_checkpointing": defs.ActivationCheckpointing} {
		if sub, ok := cfg[name].(map[string]any); ok {
			check(name+".", sub, keys)
		}
	}
	stage := int(cfg["zero_optimization"].(map[string]any)["stage"].(float64))
	if !slices.Contains(defs.ZeroStages, stage) || stages > 1 && !slices.Contains(defs.PipelineZeroStages, stage) {
		t.Errorf("ZeRO stage %d with %d pipeline stages", stage, stages)
	}
	tb, mb, gas := cfg["train_batch_size"].(float64), cfg["train_micro_batch_size_per_gpu"].(float64), cfg["gradient_accumulation_steps"].(float64)
	if tb != mb*gas*float64(dp) {
		t.Errorf("train_batch_size %v != %v x %v x %d (DeepSpeed's batch assertion)", tb, mb, gas, dp)
	}
	return cfg
}

func TestDeepSpeedConfig(t *testing.T) {
	// Data parallelism on 8 GPUs, 4 steps of accumulation, ZeRO-2, bf16,
	// buckets of 25 MiB.
	p := launchPlan(64, 4, []int{8}, []int{1}, false)
	p.Precision, p.Stages[0].Sharding = "amp-bf16", "zero2"
	for i := range 5 {
		p.AllReduces = append(p.AllReduces, plan.AllReduce{Kind: "reduce-scatter", Bytes: 25 << 20})
		if i == 4 {
			p.AllReduces[i].Bytes = 3 << 20 // the last bucket, part full
		}
	}
	doc, err := Render("deepspeed-config", p, Options{Source: "p.json"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := checkDeepSpeed(t, doc, 8, 1)
	zero := cfg["zero_optimization"].(map[string]any)
	if cfg["train_micro_batch_size_per_gpu"].(float64) != 2 || cfg["gradient_accumulation_steps"].(float64) != 4 || zero["stage"].(float64) != 2 ||
		zero["reduce_bucket_size"].(float64) != 25<<20/4 || cfg["bf16"] == nil || cfg["fp16"] != nil || cfg["opplace"].(map[string]any)["plan"] != "p.json" {
		t.Errorf("data parallel:\n%s", doc)
	}
	// ZeRO-3: stage 3, reduce-scattering.
	p.Stages[0].Sharding = "zero3"
	doc, err = Render("deepspeed-config", p, Options{Source: "p.json"})
	if err != nil {
		t.Fatal(err)
	}
	zero = checkDeepSpeed(t, doc, 8, 1)["zero_optimization"].(map[string]any)
	if zero["stage"].(float64) != 3 || zero["reduce_scatter"] != true {
		t.Errorf("ZeRO-3:\n%s", doc)
	}
	// A pipeline of 2 stages x 2 replicas, recomputing, fp16.
	p = launchPlan(32, 8, []int{2, 2}, []int{1, 1}, false)
	p.Precision, p.Stages[0].Recompute, p.Stages[1].Recompute = "amp-fp16", true, true
	doc, err = Render("deepspeed-config", p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg = checkDeepSpeed(t, doc, 2, 2)
	if cfg["fp16"] == nil || cfg["activation_checkpointing"] == nil || cfg["gradient_accumulation_steps"].(float64) != 8 {
		t.Errorf("pipeline:\n%s", doc)
	}
	// What DeepSpeed cannot run is refused, naming the field.
	for _, tc := range []struct {
		name string
		edit func(p *plan.Plan)
		want string
	}{
		{"tensor parallel", func(p *plan.Plan) { *p = *launchPlan(16, 1, []int{2}, []int{2}, true) }, "stages[0].tensor_parallel"},
		{"placement in a replica", func(p *plan.Plan) { *p = *launchPlan(16, 1, []int{2}, []int{2}, false) }, "stages[0].replica_devices"},
		{"uneven replicas", func(p *plan.Plan) { *p = *launchPlan(16, 2, []int{2, 1}, []int{1, 1}, false) }, "stages[1].replicas"},
		{"zero2 pipeline", func(p *plan.Plan) { p.Stages[0].Sharding, p.Stages[1].Sharding = "zero2", "zero2" }, "ZeRO stage 0 or 1"},
		{"zero3 pipeline", func(p *plan.Plan) { p.Stages[0].Sharding, p.Stages[1].Sharding = "zero3", "zero3" }, "stages[0].sharding: zero3 with 2 pipeline stages"},
		{"two device types", func(p *plan.Plan) { p.Devices[1].Type = "V100-16GB" }, "devices: the plan runs on A100-80GB and V100-16GB"},
		{"batch unknown", func(p *plan.Plan) { p.Batch = 0 }, "batch: the plan's batch is unknown"},
		{"inference", func(p *plan.Plan) { p.Mode = "infer" }, `mode "infer"`},
		{"some stages recompute", func(p *plan.Plan) { p.Stages[1].Recompute = true }, "stages[1].recompute"},
	} {
		p := launchPlan(32, 8, []int{2, 2}, []int{1, 1}, false)
		tc.edit(p)
		_, err := Render("deepspeed-config", p, Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}
