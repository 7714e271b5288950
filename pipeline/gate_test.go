package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/profile"
)

// costedFile writes a costed graph of three ops a -> b -> c (MatMul,
// Relu, Add: one vertically fusible chain) with the given times_ms
// objects and the edge a -> b's extra keys, and returns its path.
func costedFile(t *testing.T, a, b, c, edge string) string {
	t.Helper()
	doc := `{"format": "opplace-costed-graph/v1", "name": "chain", "ops": [
  {"name": "a", "type": "MatMul", "times_ms": ` + a + `, "output_bytes": 1000},
  {"name": "b", "type": "Relu", "times_ms": ` + b + `, "output_bytes": 1000},
  {"name": "c", "type": "Add", "times_ms": ` + c + `, "output_bytes": 10}],
 "edges": [{"from": "a", "to": "b"` + edge + `}, {"from": "b", "to": "c"}]}`
	path := filepath.Join(t.TempDir(), "chain.json")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFusionKeepsCostedChecks: a costed graph plans, or fails, alike with
// fusion and without: an op timed only on a device type the cluster lacks
// is an input error naming the op either way (not a "does not fit"), ops
// with no device type in common are never fused into a kernel nothing
// runs, and measured transfers still count.
func TestFusionKeepsCostedChecks(t *testing.T) {
	both := `{"V100-16GB": 1, "T4": 1}`
	tests := []struct {
		name string
		path string
		// errPart is a fragment of the input error; "" for a plan, whose
		// step must then be at least minMS.
		errPart string
		minMS   float64
	}{
		{"op timed only on a type the cluster lacks", costedFile(t, both, `{"H100": 1}`, both, ""),
			`chain.json: op "b" has no time for any device type of cluster "hetero"`, 0},
		{"neighbours with no type in common", costedFile(t, `{"V100-16GB": 1}`, `{"T4": 2}`, both, ""), "", 2},
		{"measured transfer", costedFile(t, `{"V100-16GB": 1}`, `{"T4": 2}`, both, `, "transfer_ms": 500`), "", 500},
	}
	for _, tc := range tests {
		for _, fusion := range []string{pipeline.FusionNone, pipeline.FusionHybrid, "vertical"} {
			t.Run(tc.name+"/"+fusion, func(t *testing.T) {
				o := pipeline.Options{ModelPath: tc.path, ClusterPath: filepath.Join(clusters, "hetero.yaml"), Fusion: fusion, Strategy: "m-etf"}
				res, err := pipeline.Run(context.Background(), o)
				if tc.errPart != "" {
					var in *pipeline.InputError
					if !errors.As(err, &in) || !strings.Contains(err.Error(), tc.errPart) {
						t.Errorf("error %v, want an input error with %q", err, tc.errPart)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				dev := map[string]string{}
				for _, op := range res.Plan.Ops {
					dev[op.Name] = op.Device
				}
				if dev["a"] == dev["b"] {
					t.Errorf("a and b both on %s, which runs only one of them", dev["a"])
				}
				if res.Plan.PredictedStepMS < tc.minMS {
					t.Errorf("step %g ms, want at least %g ms", res.Plan.PredictedStepMS, tc.minMS)
				}
			})
		}
	}
}

// TestAskedStrategyFailure: GPT-2 XL's training step at batch 4 fits
// four 16 GB V100s only as a pipeline (each stage holds part of the
// weights and recomputes), while m-topo, placing the whole batch at
// once, finds no placement: the error says that m-topo found none, that
// nothing proves none exists, and which strategy fits.
func TestAskedStrategyFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("plans GPT-2 XL")
	}
	o := opts("gpt2_xl", "4xV100", map[string]int64{"batch": 4})
	o.Strategy = "m-topo"
	_, err := pipeline.Run(context.Background(), o)
	var inf *placer.InfeasibleError
	if !errors.As(err, &inf) {
		t.Fatalf("got %v, want an InfeasibleError", err)
	}
	if inf.Proved || inf.Strategy != "m-topo" || inf.Alternative == "" || inf.Alternative == "m-topo" {
		t.Errorf("proved %v, strategy %q, alternative %q; want false, m-topo, another", inf.Proved, inf.Strategy, inf.Alternative)
	}
	msg := err.Error()
	for _, part := range []string{"strategy m-topo found no plan that fits", "though no bound rules one out", "strategy " + inf.Alternative + " finds a plan that fits"} {
		if !strings.Contains(msg, part) {
			t.Errorf("message lacks %q:\n%s", part, msg)
		}
	}
	if strings.Contains(msg, "does not fit the cluster") || strings.Contains(msg, "--") {
		t.Errorf("message claims a misfit or names a flag:\n%s", msg)
	}
}

// TestILPPlacesTrainingSteps: the ilp placer places the training steps
// that its old memory model (every output kept for the whole step) and
// coarsening (forward and backward runs tied together by colocation)
// rejected, and its plan fits.
func TestILPPlacesTrainingSteps(t *testing.T) {
	if testing.Short() {
		t.Skip("plans GPT-2 XL")
	}
	for _, tc := range []struct {
		model, cluster string
		batch          int64
	}{
		{"gpt2_xl", "8xA100-2host", 4},
		{"gpt2_small", "4xV100", 8},
	} {
		t.Run(tc.model+"/"+tc.cluster, func(t *testing.T) {
			o := opts(tc.model, tc.cluster, map[string]int64{"batch": tc.batch})
			o.Strategy = "ilp"
			o.Strategies.Placer.Nodes = 20
			res, err := pipeline.Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Plan.Fits {
				t.Fatal("the plan does not fit")
			}
			used := map[string]bool{}
			for _, op := range res.Plan.Ops {
				used[op.Device] = true
			}
			if len(used) < 2 {
				t.Errorf("the plan uses %d device(s); the model needs more than one", len(used))
			}
		})
	}
}

// hugeCosts prices the named ops at a huge time in seconds, the others
// at a millisecond: a cost model (a profile, a Go program's) whose times
// are finite but overflow the step's sums.
type hugeCosts map[string]float64

func (h hugeCosts) OpTime(g *graph.Graph, op graph.OpID, _ *cluster.DeviceType) float64 {
	if v, ok := h[g.Ops[op].Name]; ok {
		return v
	}
	return 1e-3
}

// TestNonFiniteFigures: op times near the float64 limit overflow the
// step's sums; plan and compare reject them as input naming the op,
// rather than failing later on writing +Inf (exit 1).
func TestNonFiniteFigures(t *testing.T) {
	one := `{"V100-16GB": 1}`
	path := costedFile(t, one, one, one, "")
	tests := []struct {
		name     string
		costs    hugeCosts
		wantPart string
	}{
		{"two huge ops", hugeCosts{"a": 1e305, "b": 1e305}, `op "a" costs 1e+305 s on V100-16GB`},
		{"one huge op", hugeCosts{"b": 1e305}, `op "b" costs 1e+305 s on V100-16GB`},
		{"an overflowing sum", hugeCosts{"a": math.MaxFloat64, "c": math.MaxFloat64}, `op "a" costs 1.7976931348623157e+308 s`},
	}
	for _, tc := range tests {
		o := pipeline.Options{ModelPath: path, ClusterPath: filepath.Join(clusters, "4xV100.yaml"), CostModel: tc.costs, Fusion: pipeline.FusionNone}
		t.Run(tc.name+"/plan", func(t *testing.T) {
			res, err := pipeline.Run(context.Background(), o)
			var in *pipeline.InputError
			if !errors.As(err, &in) || !strings.Contains(err.Error(), tc.wantPart) {
				t.Fatalf("error %v, want an input error with %q", err, tc.wantPart)
			}
			if res.Plan != nil {
				t.Error("a plan came back with the error")
			}
		})
		t.Run(tc.name+"/compare", func(t *testing.T) {
			_, err := pipeline.Compare(context.Background(), pipeline.CompareOptions{Options: o, Strategies: []string{"m-etf", "dp"}})
			var in *pipeline.InputError
			if !errors.As(err, &in) || !strings.Contains(err.Error(), tc.wantPart) {
				t.Fatalf("error %v, want an input error with %q", err, tc.wantPart)
			}
		})
	}
}

// TestProfileWarnings: a profile that cannot price the plan as measured
// says so among the plan's warnings, with fusion (the default) as
// without: BERT-base measured at batch 1 on a V100 (the sample trace),
// planned at batch 8, and on a cluster with no V100.
func TestProfileWarnings(t *testing.T) {
	m, err := pipeline.LoadModel(filepath.Join(models, "bert_base.onnx"), pipeline.ImportOptions{Dims: map[string]int64{"batch": 1}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := profile.Import("../testdata/profiles/bert_base_b1_pytorch_v100.json", m.Graph,
		profile.DeviceType{Name: "V100-16GB", PeakFLOPS: 15.7e12, MemoryBandwidth: 900e9, LaunchOverhead: 5e-6})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		cluster string
		batch   int64
		want    string
	}{
		{"4xV100", 1, ""},
		{"4xV100", 8, "the profile was measured at batch 1 and this plan is at batch 8"},
		{"8xA100-2host", 1, "which cluster \"8xA100-2host\" does not have: it changes nothing"},
	}
	for _, tc := range tests {
		for _, fusion := range []string{pipeline.FusionNone, pipeline.FusionAuto} {
			t.Run(fmt.Sprintf("%s/batch %d/%s", tc.cluster, tc.batch, fusion), func(t *testing.T) {
				o := opts("bert_base", tc.cluster, map[string]int64{"batch": tc.batch})
				o.Mode, o.Strategy, o.Fusion = pipeline.ModeInfer, "m-topo", fusion
				o.CostModel = profile.NewModel(res.Profile, nil)
				r, err := pipeline.Run(context.Background(), o)
				if err != nil {
					t.Fatal(err)
				}
				got := strings.Join(r.Plan.Warnings, "\n")
				if tc.want == "" && strings.Contains(got, "profile") || !strings.Contains(got, tc.want) {
					t.Errorf("warnings %q, want %q", r.Plan.Warnings, tc.want)
				}
			})
		}
	}
}
