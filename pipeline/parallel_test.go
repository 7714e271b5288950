package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/strategy"
)

// planParallel plans one configuration given whole.
func planParallel(t *testing.T, model, clusterPath, spec string, batch int64) (*plan.Plan, error) {
	t.Helper()
	c, err := strategy.ParseParallel(spec)
	if err != nil {
		t.Fatal(err)
	}
	opts := pipeline.Options{ModelPath: model, ClusterPath: clusterPath, Precision: "amp-bf16",
		Import: pipeline.ImportOptions{Dims: map[string]int64{"batch": batch}}}
	opts.Strategy, opts.Strategies.Parallel = strategy.ParallelStrategy, c
	res, err := pipeline.Run(context.Background(), opts)
	if err != nil {
		return nil, err
	}
	return res.Plan, nil
}

// TestParallelGiven: each configuration is planned exactly as given: its
// stages, each stage's replicas and tensor group, micro-batch size,
// recomputation and ZeRO level; one the cluster or batch cannot run is
// an input error that says why.
func TestParallelGiven(t *testing.T) {
	model, cl := filepath.Join(models, "gpt2_small.onnx"), filepath.Join(clusters, "8xA100-2host.yaml")
	for _, tc := range []struct {
		spec                     string
		stages, replicas, tensor int
		mbs                      int64
		sharding                 string
		recompute                bool
		family                   string
	}{
		{"tp=1,pp=2,dp=4", 2, 4, 0, 0, "", false, strategy.FamilyPipeline},
		{"tp=2,pp=2,mbs=1", 2, 2, 2, 1, "", false, "tensor"},
		{"tp=2,mbs=2,zero=zero1", 1, 4, 2, 2, "zero1", false, "tensor"},
		{"mbs=1,zero=zero2,recompute=full", 1, 8, 0, 1, "zero2", true, strategy.FamilyDataParallel},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			p, err := planParallel(t, model, cl, tc.spec, 16)
			if err != nil {
				t.Fatal(err)
			}
			if p.Strategy != strategy.ParallelStrategy || p.Family != tc.family || len(p.Stages) != tc.stages {
				t.Fatalf("strategy %s, family %s, %d stages; want parallel, %s, %d", p.Strategy, p.Family, len(p.Stages), tc.family, tc.stages)
			}
			for _, st := range p.Stages {
				if st.Replicas != tc.replicas || st.TensorParallel != tc.tensor || st.Sharding != tc.sharding || st.Recompute != tc.recompute {
					t.Errorf("stage %d: %d replicas, tensor %d, sharding %q, recompute %v; want %d, %d, %q, %v",
						st.Index, st.Replicas, st.TensorParallel, st.Sharding, st.Recompute, tc.replicas, tc.tensor, tc.sharding, tc.recompute)
				}
				if tc.mbs > 0 && st.MicroBatchSize != tc.mbs {
					t.Errorf("stage %d: micro-batch size %d, want %d", st.Index, st.MicroBatchSize, tc.mbs)
				}
				if got := st.MicroBatchSize * int64(p.MicroBatches) * int64(st.Replicas); got != p.Batch {
					t.Errorf("stage %d: %d x %d x %d samples, the batch is %d", st.Index, st.MicroBatchSize, p.MicroBatches, st.Replicas, p.Batch)
				}
			}
		})
	}
	for _, tc := range []struct{ spec, want string }{
		{"tp=3", "tensor 3 × pipeline 1 does not divide the cluster's 8 devices"},
		{"tp=2,pp=2,dp=4", "tensor 2 × pipeline 2 × data 4 is 16 devices; the cluster has 8"},
		{"tp=2,mbs=3", "the batch of 16 does not split into 4 replicas × micro-batches of 3 samples"},
	} {
		_, err := planParallel(t, model, cl, tc.spec, 16)
		var in *pipeline.InputError
		if !errors.As(err, &in) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an input error saying %q", tc.spec, err, tc.want)
		}
	}
}

// nodesCluster writes a cluster of nodes of eight A100-80GB on NVSwitch
// joined by 1,600 Gb/s, as Selene's (testdata/clusters/selene-1536xA100.yaml).
func nodesCluster(t *testing.T, nodes int) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "name: %dx8A100\nnetwork: {kind: network, bandwidth: 1600Gb/s, latency: 5us}\nhosts:\n", nodes)
	for i := range nodes {
		fmt.Fprintf(&b, "  - {name: node%d, intra: {preset: nvswitch-a100}}\n", i)
	}
	b.WriteString("devices:\n")
	for i := range nodes {
		fmt.Fprintf(&b, "  - {name: \"n%dgpu{i}\", count: 8, type: A100-80GB, host: node%d}\n", i, i)
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestParallelMegatronTable1: Megatron-LM's own configurations of Table 1
// (Narayanan et al., SC'21; ../shared/models/llm/README.md), given whole
// with full recomputation as the paper ran them, predict the measured
// TFLOP/s per GPU within 15%: the paper's FLOP count (its eq. 3, which
// counts the recomputed forward) over the predicted step and the GPUs.
// auto's own plan is never slower than the configuration given. The
// 18.4B and 145.6B rows (256 and 1,536 GPUs) are in docs/llm.md.
func TestParallelMegatronTable1(t *testing.T) {
	if testing.Short() {
		t.Skip("imports 1.7-7.5B GPTs")
	}
	for _, tc := range []struct {
		model         string
		spec          string
		nodes         int
		batch         int64
		l, h          float64
		measuredTFLOP float64
	}{
		{"megatron_1.7b", "tp=1,pp=1,recompute=full", 4, 512, 24, 2304, 137},
		{"megatron_3.6b", "tp=2,pp=1,recompute=full", 8, 512, 30, 3072, 138},
		{"megatron_7.5b", "tp=4,pp=1,recompute=full", 16, 512, 36, 4096, 142},
	} {
		t.Run(tc.model, func(t *testing.T) {
			path := filepath.Join(llmModels, tc.model+".onnx")
			if _, err := os.Stat(path); err != nil {
				t.Skipf("shared model absent: %v", err)
			}
			cluster := nodesCluster(t, tc.nodes)
			p, err := planParallel(t, path, cluster, tc.spec, tc.batch)
			if err != nil {
				t.Fatal(err)
			}
			const s, V = 2048.0, 51200.0
			B := float64(tc.batch)
			flops := 96 * B * s * tc.l * tc.h * tc.h * (1 + s/(6*tc.h) + V/(16*tc.l*tc.h))
			got := flops / (p.PredictedStepMS / 1e3) / float64(8*tc.nodes) / 1e12
			if r := got/tc.measuredTFLOP - 1; r < -0.15 || r > 0.15 {
				t.Errorf("%s: %.1f TFLOP/s per GPU predicted (step %.3f s), %.0f measured: %+.1f%%", tc.spec, got, p.PredictedStepMS/1e3, tc.measuredTFLOP, 100*r)
			}
			t.Logf("%s: %.1f TFLOP/s per GPU predicted, %.0f measured, step %.3f s", tc.spec, got, tc.measuredTFLOP, p.PredictedStepMS/1e3)
			// auto searches a space that holds the configuration: its plan
			// is never slower in the same simulator.
			res, err := pipeline.Run(context.Background(), pipeline.Options{ModelPath: path, ClusterPath: cluster, Precision: "amp-bf16",
				Import: pipeline.ImportOptions{Dims: map[string]int64{"batch": tc.batch}}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Plan.PredictedStepMS > p.PredictedStepMS*(1+1e-9) {
				t.Errorf("auto (%s) takes %.3f s, the configuration given %.3f s", res.Plan.Strategy, res.Plan.PredictedStepMS/1e3, p.PredictedStepMS/1e3)
			}
		})
	}
}

// TestRefineFinerMicroBatches: a pipeline kept at the most micro-batches
// the partitioners try also runs at the finest count its stages allow
// and keeps it when faster, saying so; a count the user fixed is left
// as given.
func TestRefineFinerMicroBatches(t *testing.T) {
	model, cl := filepath.Join(models, "gpt2_small.onnx"), filepath.Join(clusters, "8xA100-2host.yaml")
	run := func(micro int) *plan.Plan {
		opts := pipeline.Options{ModelPath: model, ClusterPath: cl, Precision: "amp-bf16", Strategy: "pipeline:pipedream",
			MicroBatches: micro, Import: pipeline.ImportOptions{Dims: map[string]int64{"batch": 64}}}
		opts.Strategies.Pipeline.MaxMicroBatches = 2
		res, err := pipeline.Run(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		return res.Plan
	}
	fixed := run(2)
	refined := run(0)
	if fixed.MicroBatches != 2 {
		t.Fatalf("the fixed count ran %d micro-batches, want 2", fixed.MicroBatches)
	}
	if refined.MicroBatches <= 2 || refined.PredictedStepMS >= fixed.PredictedStepMS {
		t.Fatalf("refined: %d micro-batches, %.3f ms; at the ceiling: 2, %.3f ms", refined.MicroBatches, refined.PredictedStepMS, fixed.PredictedStepMS)
	}
	noted := false
	for _, n := range refined.Notes {
		noted = noted || strings.Contains(n, fmt.Sprintf("the stages run at %d micro-batches", refined.MicroBatches))
	}
	if !noted {
		t.Errorf("no note says the count was refined: %q", refined.Notes)
	}
	for _, st := range refined.Stages {
		if got := st.MicroBatchSize * int64(refined.MicroBatches) * int64(st.Replicas); got != refined.Batch {
			t.Errorf("stage %d: %d x %d x %d samples, the batch is %d", st.Index, st.MicroBatchSize, refined.MicroBatches, st.Replicas, refined.Batch)
		}
	}
}
