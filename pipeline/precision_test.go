package pipeline_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/train"
)

// activations is a device's peak less the weights it holds.
func activations(d plan.Device) int64 {
	b := d.Breakdown
	return d.PeakMemoryBytes - b.WeightBytes - b.HalfWeightBytes - b.GradientBytes - b.OptimizerStateBytes
}

// TestAMPOnRealModels plans GPT-2 small, BERT-base and ResNet-50 on one
// A100 of 8xA100-2host (strategy single, so both precisions have one
// shape) in fp32 and amp-bf16: amp predicts a faster step and fewer
// activation bytes, holds a bfloat16 copy of the weights half their
// size, keeps fp32 gradients and state, and runs the biggest matmul or
// convolution exactly 312/19.5 = 16 times faster (compute-bound).
func TestAMPOnRealModels(t *testing.T) {
	for _, m := range []struct {
		name string
		dims map[string]int64
	}{{"gpt2_small", map[string]int64{"batch": 8}}, {"bert_base", map[string]int64{"batch": 16}}, {"resnet50", nil}} {
		t.Run(m.name, func(t *testing.T) {
			res := map[string]*pipeline.Result{}
			for _, p := range []string{"fp32", "amp-bf16"} {
				o := opts(m.name, "8xA100-2host", m.dims)
				o.Strategy, o.Precision = "single", p
				r, err := pipeline.Run(context.Background(), o)
				if err != nil {
					t.Fatal(err)
				}
				if r.Plan.Precision != p {
					t.Errorf("plan precision %q, want %q", r.Plan.Precision, p)
				}
				res[p] = r
			}
			f, a := res["fp32"].Plan, res["amp-bf16"].Plan
			if !(a.PredictedStepMS < f.PredictedStepMS) {
				t.Errorf("amp-bf16 step %.3f ms, fp32 %.3f ms", a.PredictedStepMS, f.PredictedStepMS)
			}
			fd, ad := f.Devices[0], a.Devices[0]
			if !(activations(ad) < activations(fd)) {
				t.Errorf("activations: amp-bf16 %d bytes, fp32 %d", activations(ad), activations(fd))
			}
			fb, ab := fd.Breakdown, ad.Breakdown
			// A parameter two ops read has two gradients until the
			// optimizer sums them; under amp a weight's one cast may be
			// its only reader.
			if fb.HalfWeightBytes != 0 || ab.WeightBytes != fb.WeightBytes || ab.OptimizerStateBytes != fb.OptimizerStateBytes ||
				ab.GradientBytes < ab.WeightBytes || ab.GradientBytes > fb.GradientBytes {
				t.Errorf("fp32 %+v, amp-bf16 %+v: want the same fp32 weights, gradients and state", *fb, *ab)
			}
			// Every weight a matmul or convolution reads is cast; the
			// ones only elementwise ops, norms or a Gather read are not.
			if ab.HalfWeightBytes <= 0 || ab.HalfWeightBytes > ab.WeightBytes/2 {
				t.Errorf("half copy %d bytes of %d bytes of weights", ab.HalfWeightBytes, ab.WeightBytes)
			}
			t.Logf("step %.1f -> %.1f ms, activations %d -> %d MiB, half copy %d MiB", f.PredictedStepMS, a.PredictedStepMS,
				activations(fd)>>20, activations(ad)>>20, ab.HalfWeightBytes>>20)

			// Every forward matmul and convolution runs between 2 (memory-
			// bound: half the bytes) and 16 (compute-bound: 312/19.5 TFLOP/s)
			// times faster; the biggest compute-bound one exactly 16.
			fg, ag := res["fp32"].Graph, res["amp-bf16"].Graph
			dt := res["fp32"].Cluster.Devices[0].Type
			// Flat efficiencies, so that the ratios show the peaks alone
			// (the achievable-speed model is tested in package cost).
			r := cost.Roofline{ComputeEfficiency: cost.DefaultComputeEfficiency, MemoryEfficiency: cost.DefaultMemoryEfficiency}
			var big graph.OpID = -1
			for i := range fg.Ops {
				op := &fg.Ops[i]
				if op.Phase != graph.Forward || graph.Autocast(op.Type) != graph.AutocastHalf {
					continue
				}
				a, ok := ag.OpByName(op.Name)
				if !ok {
					t.Fatalf("amp graph lacks %q", op.Name)
				}
				tf := r.OpTime(fg, graph.OpID(i), dt) - dt.LaunchOverhead
				ta := r.OpTime(ag, a, dt) - dt.LaunchOverhead
				if ratio := tf / ta; ratio < 2-1e-9 || ratio > 16+1e-9 {
					t.Errorf("%s: fp32/amp time ratio %v, want 2 to 16", op.Name, ratio)
				}
				if r.ComputeTime(ag, a, dt) > r.MemoryTime(ag, a, dt) && (big < 0 || op.Work.FLOPs > fg.Ops[big].Work.FLOPs) {
					big = graph.OpID(i)
				}
			}
			if big < 0 {
				t.Fatal("no compute-bound matmul or convolution under amp")
			}
			abig, _ := ag.OpByName(fg.Ops[big].Name)
			tf := r.OpTime(fg, big, dt) - dt.LaunchOverhead
			ta := r.OpTime(ag, abig, dt) - dt.LaunchOverhead
			if ratio := tf / ta; math.Abs(ratio-16) > 1e-9 {
				t.Errorf("%s (%s): fp32/amp time ratio %v, want 16", fg.Ops[big].Name, fg.Ops[big].Type, ratio)
			}
		})
	}
}

// TestPrecisionEveryStrategy plans under amp-bf16 with auto, a pipeline
// and data parallelism: each plan carries the precision and the casts.
func TestPrecisionEveryStrategy(t *testing.T) {
	for _, s := range []string{pipeline.Auto, "pipeline", "dp", "m-etf"} {
		o := opts("bert_base", "8xA100-2host", map[string]int64{"batch": 16})
		o.Strategy, o.Precision = s, "amp-bf16"
		r, err := pipeline.Run(context.Background(), o)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		casts := 0
		for _, op := range r.Plan.Ops {
			if strings.HasSuffix(op.Name, "_autocast_bfloat16") {
				casts++
			}
		}
		if r.Plan.Precision != "amp-bf16" || casts == 0 || r.Plan.Devices[0].Breakdown == nil {
			t.Errorf("%s: precision %q, %d casts in the plan", s, r.Plan.Precision, casts)
		}
	}
}

// TestPrecisionDefaultUnchanged: without a precision the plan has no
// precision, no breakdown, and the table's hint names amp-bf16.
func TestPrecisionDefaultUnchanged(t *testing.T) {
	r, err := pipeline.Run(context.Background(), opts("resnet50", "8xA100-2host", nil))
	if err != nil {
		t.Fatal(err)
	}
	if r.Plan.Precision != "" || r.Plan.Devices[0].Breakdown != nil {
		t.Errorf("default plan: precision %q, breakdown %v", r.Plan.Precision, r.Plan.Devices[0].Breakdown)
	}
	if !strings.Contains(r.Plan.PrecisionHint, "precision amp-bf16") {
		t.Errorf("hint %q", r.Plan.PrecisionHint)
	}
	// V100s have no bfloat16 tensor cores: no hint there.
	v, err := pipeline.Run(context.Background(), opts("resnet50", "4xV100", nil))
	if err != nil {
		t.Fatal(err)
	}
	if v.Plan.PrecisionHint != "" {
		t.Errorf("V100 hint %q", v.Plan.PrecisionHint)
	}
}

func TestPrecisionRefused(t *testing.T) {
	for _, c := range []struct {
		precision, cluster, want string
	}{
		{"amp-bf16", "4xV100", "use amp-fp16"},
		{"bf16", "4xV100", "use fp32, tf32, amp-bf16, amp-fp16"},
	} {
		o := opts("resnet50", c.cluster, nil)
		o.Precision = c.precision
		_, err := pipeline.Run(context.Background(), o)
		var in *pipeline.InputError
		if !errors.As(err, &in) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s on %s: %v", c.precision, c.cluster, err)
		}
	}
	// amp-fp16 on V100 runs at the 125 TFLOP/s tensor figure; tf32 warns.
	o := opts("resnet50", "4xV100", nil)
	o.Precision = string(train.TF32)
	r, err := pipeline.Run(context.Background(), o)
	if err != nil || len(r.Plan.Warnings) == 0 || !strings.Contains(strings.Join(r.Plan.Warnings, "\n"), "no TF32") {
		t.Errorf("tf32 on V100: %v %v", err, r.Plan.Warnings)
	}
	o.Precision = string(train.AMPFP16)
	if _, err := pipeline.Run(context.Background(), o); err != nil {
		t.Errorf("amp-fp16 on V100: %v", err)
	}
}

// TestAMPInference plans GPT-2 small's forward pass under amp-bf16 with
// the default fusion. Inference has no training step to give each op a
// soft colocation key, so a cast keyed with its matmul fused with the
// unkeyed bias Add after it; the fuser wrote the group's key back only
// when two soft keys had been joined, and coarsening refused the group
// ("joins ops with different colocation or device constraints").
func TestAMPInference(t *testing.T) {
	o := opts("gpt2_small", "8xA100-2host", map[string]int64{"batch": 8})
	o.Strategy, o.Precision, o.Mode = "single", "amp-bf16", pipeline.ModeInfer
	r, err := pipeline.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Plan.Mode != "infer" || r.Plan.Precision != "amp-bf16" || !(r.Plan.PredictedStepMS > 0) {
		t.Errorf("plan mode %q precision %q step %.3f ms", r.Plan.Mode, r.Plan.Precision, r.Plan.PredictedStepMS)
	}
}

// TestTensorBreakdown: in a tensor-parallel plan every member of a group
// lists what it holds (1/t of the divided weights, their gradients and
// state), the same as its leader, and no device's weights exceed its
// simulated peak; with the graph fused as users run it too (the split is
// then carried back to the graph before fusion).
func TestTensorBreakdown(t *testing.T) {
	for _, fusion := range []string{pipeline.FusionNone, pipeline.FusionAuto} {
		t.Run(fusion, func(t *testing.T) { tensorBreakdown(t, fusion) })
	}
}

func tensorBreakdown(t *testing.T, fusion string) {
	o := opts("gpt2_small", "8xA100-2host", map[string]int64{"batch": 8})
	o.Strategy, o.Precision, o.Fusion = "tensor", "amp-bf16", fusion
	o.Strategies.Tensor = "2"
	r, err := pipeline.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	o.Strategy, o.Strategies.Tensor = "single", ""
	one, err := pipeline.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	whole := one.Plan.Devices[0].Breakdown.WeightBytes
	groups := 0
	var held int64 // one member of each stage's first group
	for _, st := range r.Plan.Stages {
		if st.TensorParallel < 2 {
			continue
		}
		groups++
		for _, d := range r.Plan.Devices {
			if d.Name == st.Devices[0] {
				held += d.Breakdown.WeightBytes
			}
		}
	}
	t.Logf("%d tensor-parallel stages; one member of each holds %d bytes of weights of %d", groups, held, whole)
	if all := slices.ContainsFunc(r.Plan.Stages, func(st plan.Stage) bool { return st.TensorParallel < 2 }); !all && held > whole*3/4 {
		t.Errorf("one member of each group holds %d bytes of weights of the model's %d: the split's divided weights are not divided", held, whole)
	}
	if groups == 0 {
		t.Fatalf("strategy tensor made no tensor-parallel stage")
	}
	for _, d := range r.Plan.Devices {
		b := d.Breakdown
		if b == nil || b.WeightBytes == 0 {
			t.Errorf("%s holds no weights: %+v", d.Name, b)
			continue
		}
		if a := activations(d); a < 0 {
			t.Errorf("%s: weights, copies, gradients and state %+v exceed its peak %d", d.Name, *b, d.PeakMemoryBytes)
		}
		if b.WeightBytes >= whole {
			t.Errorf("%s holds %d bytes of weights, the whole model has %d: the split divides none", d.Name, b.WeightBytes, whole)
		}
	}
}
