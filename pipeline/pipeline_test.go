package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/opplace/opplace/constraint"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/strategy"
)

const (
	models   = "../testdata/models"
	clusters = "../testdata/clusters"
)

// sharedModels are the shared real models with the dimension each binds.
var sharedModels = []struct {
	name string
	dims map[string]int64
}{
	{"resnet50", nil}, {"inception_v3", nil}, {"vgg16", nil}, {"mobilenet_v2", nil},
	{"bert_base", map[string]int64{"batch": 16}}, {"gpt2_small", map[string]int64{"batch": 8}},
	{"transformer", nil}, {"gnmt", nil}, {"gpt2_xl", map[string]int64{"batch": 4}},
}

func opts(model, cl string, dims map[string]int64) pipeline.Options {
	return pipeline.Options{
		ModelPath:   filepath.Join(models, model+".onnx"),
		ClusterPath: filepath.Join(clusters, cl+".yaml"),
		Import:      pipeline.ImportOptions{Dims: dims},
	}
}

func TestModes(t *testing.T) {
	o := opts("resnet50", "4xV100", nil)
	o.Fusion = pipeline.FusionNone // the training step itself is under test
	o.Mode = pipeline.ModeInfer
	infer, err := pipeline.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	o.Mode = pipeline.ModeTrain
	trained, err := pipeline.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(infer.Plan.Ops) != 169 || len(trained.Plan.Ops) <= 2*169 {
		t.Errorf("ops: infer %d, train %d", len(infer.Plan.Ops), len(trained.Plan.Ops))
	}
	// A training step does about three times a forward pass's work.
	if r := trained.Plan.LowerBoundMS / infer.Plan.LowerBoundMS; r < 2.5 || r > 3.5 {
		t.Errorf("train/infer lower bound ratio %.2f, want about 3", r)
	}
	if trained.Plan.Mode != "train" || infer.Plan.Mode != "infer" {
		t.Errorf("modes %q %q", trained.Plan.Mode, infer.Plan.Mode)
	}
	var stages []string
	for _, s := range trained.Timings {
		stages = append(stages, s.Stage)
	}
	if fmt.Sprint(stages[:4]) != "[import cluster pins train]" {
		t.Errorf("stages %v", stages)
	}
}

func TestErrorsAreClassified(t *testing.T) {
	tests := []struct {
		name       string
		opts       pipeline.Options
		input      bool
		infeasible bool
	}{
		{"missing model", pipeline.Options{ModelPath: "nope.onnx", ClusterPath: filepath.Join(clusters, "4xV100.yaml")}, true, false},
		{"no cluster", pipeline.Options{ModelPath: filepath.Join(models, "vgg16.onnx")}, true, false},
		{"bad mode", func() pipeline.Options { o := opts("vgg16", "4xV100", nil); o.Mode = "fly"; return o }(), true, false},
		{"bad optimizer", func() pipeline.Options { o := opts("vgg16", "4xV100", nil); o.Optimizer = "lion"; return o }(), true, false},
		{"unbound dimension", opts("bert_base", "4xV100", nil), true, false},
		// With 7 GiB of each V100-16GB reserved (9 GiB left) no plan
		// fits without recomputation; with 5 GiB reserved one group of
		// four tensor-parallel V100s accumulating gradients over 4
		// micro-batches does (since the one-stage tensor plan
		// accumulates), and with recomputation in 9 GiB tensor
		// parallelism fits (6.88 GiB per V100, 1,468.6 ms).
		{"gpt2_xl training on one host of V100s without recomputation", func() pipeline.Options {
			o := opts("gpt2_xl", "4xV100", map[string]int64{"batch": 4})
			o.Strategies.Recompute = strategy.RecomputeNone
			reserve, err := constraint.ParseFlag(constraint.Reserve, "*=7GiB")
			if err != nil {
				t.Fatal(err)
			}
			o.Constraints = &constraint.Set{Rules: []constraint.Rule{reserve}}
			return o
		}(), false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pipeline.Run(context.Background(), tc.opts)
			var in *pipeline.InputError
			var inf *placer.InfeasibleError
			if errors.As(err, &in) != tc.input || errors.As(err, &inf) != tc.infeasible {
				t.Errorf("error %v: input %v (want %v), infeasible %v (want %v)", err, errors.As(err, &in), tc.input, errors.As(err, &inf), tc.infeasible)
			}
		})
	}
}

// BenchmarkImport measures reading and shape-inferring each shared model.
func BenchmarkImport(b *testing.B) {
	for _, m := range sharedModels {
		b.Run(m.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := pipeline.LoadModel(filepath.Join(models, m.name+".onnx"), pipeline.ImportOptions{Dims: m.dims}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPlan measures a whole `opplace plan` (import, training step,
// costs, bound, auto placement, simulation) of each shared model on four
// V100s, or on two hosts of A100s for the models too big for those.
func BenchmarkPlan(b *testing.B) {
	for _, m := range sharedModels {
		for _, mode := range []string{pipeline.ModeInfer, pipeline.ModeTrain} {
			cl := "4xV100"
			if m.name == "gpt2_xl" {
				cl = "8xA100-2host"
			}
			b.Run(m.name+"/"+mode+"/"+cl, func(b *testing.B) {
				o := opts(m.name, cl, m.dims)
				o.Mode = mode
				for i := 0; i < b.N; i++ {
					res, err := pipeline.Run(context.Background(), o)
					var inf *placer.InfeasibleError
					if errors.As(err, &inf) {
						b.Skipf("does not fit: %v", err)
					}
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(res.Plan.PredictedStepMS, "step-ms")
					b.ReportMetric(res.Plan.Gap*100, "gap-%")
				}
			})
		}
	}
}

// BenchmarkCompare runs every strategy on each shared model (training
// step) and bundled cluster once per iteration and reports, per strategy,
// the predicted step, its gap to the lower bound and the solve time:
// `make bench` prints the table the placement suite is judged by.
func BenchmarkCompare(b *testing.B) {
	for _, m := range sharedModels {
		for _, cl := range []string{"4xV100", "8xA100-2host", "hetero"} {
			b.Run(m.name+"/"+cl, func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					c, err := pipeline.Compare(context.Background(), pipeline.CompareOptions{Options: opts(m.name, cl, m.dims)})
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(c.LowerBoundMS, "bound-ms")
					for _, s := range c.Strategies {
						if s.Error != "" || !s.Fits {
							continue
						}
						b.ReportMetric(s.PredictedStepMS, s.Strategy+"-ms")
						b.ReportMetric(100*s.Gap, s.Strategy+"-gap%")
						b.ReportMetric(s.SolveMS, s.Strategy+"-solve-ms")
					}
				}
			})
		}
	}
}
