package partition

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/train"
)

// modelProblem loads a test model (as a training graph when train is
// set) on a test cluster, as the pipeline does.
func modelProblem(tb testing.TB, model string, dims map[string]int64, clusterFile string, training bool) *Problem {
	tb.Helper()
	c, err := cluster.Load(filepath.Join("../testdata/clusters", clusterFile))
	if err != nil {
		tb.Fatal(err)
	}
	m, err := onnx.Load(filepath.Join("../testdata/models", model+".onnx"), onnx.Options{Dims: dims})
	if err != nil {
		tb.Fatal(err)
	}
	g := m.Graph
	if training {
		if g, _, err = train.Build(g, train.Options{Optimizer: train.Adam}); err != nil {
			tb.Fatal(err)
		}
	}
	p, err := NewProblem(cost.NewTable(g, c, cost.Roofline{}), Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// BenchmarkGNMT times pipedream and exact on GNMT (4,441 units in
// training) on each test cluster: the largest unit graph of the test
// models, and the one whose downsets exact cannot enumerate.
func BenchmarkGNMT(b *testing.B) {
	for _, cl := range []string{"4xV100", "8xA100-2host", "hetero"} {
		for _, mode := range []string{"train", "infer"} {
			var p *Problem
			for _, part := range []string{"pipedream", "exact"} {
				b.Run(cl+"/"+mode+"/"+part, func(b *testing.B) {
					if p == nil {
						p = modelProblem(b, "gnmt", nil, cl+".yaml", mode == "train")
					}
					pl := benchPartition(b, part, p)
					for _, w := range pl.Warnings {
						b.Log(w)
					}
				})
			}
		}
	}
}

// TestDumpPlans writes the JSON plans of the fast models to the folder
// named by OPPLACE_DUMP_PLANS (skipped without it), to check that a
// change to the search leaves them byte-identical.
func TestDumpPlans(t *testing.T) {
	dir := os.Getenv("OPPLACE_DUMP_PLANS")
	if dir == "" {
		t.Skip("set OPPLACE_DUMP_PLANS to a folder")
	}
	for _, mdl := range benchModels[:3] {
		for _, mode := range []string{"infer", "train"} {
			p := modelProblem(t, mdl.name, mdl.dims, "8xA100-2host.yaml", mode == "train")
			for _, part := range []string{"gpipe", "pipedream", "exact"} {
				pl := run(t, part, p)
				js, err := json.MarshalIndent(pl, "", " ")
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, mdl.name+"_"+mode+"_"+part+".json"), js, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}
