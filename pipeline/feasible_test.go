package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/strategy"
)

// llmModels are the shared decoder LLMs (../shared/models/llm).
const llmModels = "../../shared/models/llm"

// prepareLLM imports, costs and bounds a shared LLM under amp-bf16 at a
// batch on a cluster file, or skips the test when the model is absent.
func prepareLLM(t *testing.T, model string, batch int64, clusterPath string) *strategy.Problem {
	t.Helper()
	path := filepath.Join(llmModels, model+".onnx")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("shared model %s absent: %v", model, err)
	}
	p, _, err := pipeline.Prepare(context.Background(), pipeline.Options{
		ModelPath: path, ClusterPath: clusterPath, Precision: "amp-bf16",
		Import: pipeline.ImportOptions{Dims: map[string]int64{"batch": batch}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// writeCluster writes a one-host cluster of n devices of a preset type
// joined by NVSwitch and returns its path.
func writeCluster(t *testing.T, n int, typ string) string {
	t.Helper()
	doc := fmt.Sprintf("name: %dx%s\nhosts:\n  - {name: node0}\ndevices:\n  - {name: \"gpu{i}\", count: %d, type: %s, host: node0}\n", n, typ, n, typ)
	if n > 1 {
		doc += "links:\n  - {between: ["
		for i := 0; i < n; i++ {
			doc += fmt.Sprintf("gpu%d, ", i)
		}
		doc = strings.TrimSuffix(doc, ", ") + "], preset: nvswitch-a100}\n"
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Load(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLLMMemoryProof: a 7.5B GPT at the global batch of 128 on 8 ×
// A100-40GB is no proven misfit (its softmax gradient takes 192 GiB at
// the whole batch, the placements' bound, but a plan runs it at a
// micro-batch), while on two its parameters and optimizer state alone
// (86 GiB) overflow the cluster's 80 GiB, a proof for every plan.
func TestLLMMemoryProof(t *testing.T) {
	if testing.Short() {
		t.Skip("imports a 7.5B GPT")
	}
	for _, tc := range []struct {
		name    string
		cluster string
		proved  bool
	}{
		{"8 x A100-40GB", filepath.Join(clusters, "8xA100-40GB.yaml"), false},
		{"2 x A100-40GB", writeCluster(t, 2, "A100-40GB"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := prepareLLM(t, "megatron_7.5b", 128, tc.cluster)
			e := placer.InfeasibleAt(p.Problem, "", p.Finest())
			whole := placer.Infeasible(p.Problem, "")
			if !whole.Proved || whole.LargestOpBytes <= 40<<30 {
				t.Errorf("the placements' bound: %v; want the whole batch's op over a device", whole)
			}
			if e.Proved != tc.proved || e.LargestOpBytes*16 > whole.LargestOpBytes {
				t.Errorf("the space's bound: proved %v, largest op %s; want proved %v, an op a sixteenth of the whole batch's %s or less: %v",
					e.Proved, cluster.FormatBytes(e.LargestOpBytes), tc.proved, cluster.FormatBytes(whole.LargestOpBytes), e)
			}
		})
	}
}

// TestLLMPlansKeepMemoryBound: on a shared LLM, every plan the
// data-parallel, tensor and pipeline strategies propose holds
// at least the space's memory bound (its fullest device the largest op's
// working set at the finest split, its devices together the parameters
// once plus the most any op adds), so no plan beats a proof.
func TestLLMPlansKeepMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("plans a 1.7B GPT")
	}
	p := prepareLLM(t, "megatron_1.7b", 8, filepath.Join(clusters, "8xA100-40GB.yaml"))
	e := placer.InfeasibleAt(p.Problem, "", p.Finest())
	plans, fits := 0, 0
	for _, name := range []string{"dp", "tensor", "pipeline:pipedream"} {
		s, err := strategy.New(name, strategy.Config{})
		if err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		props, err := s.Propose(context.Background(), p)
		t.Logf("%s: %d proposals in %v", name, len(props), time.Since(begin))
		if err != nil {
			t.Logf("%s: %v", name, err)
			continue
		}
		for i, pr := range props {
			res := pr.Sim
			if res == nil {
				if res, err = p.Simulate(pr.Plan); err != nil {
					continue
				}
			}
			plans++
			var most, sum int64
			for _, b := range res.PeakMemory {
				most, sum = max(most, b), sum+b
			}
			if most < e.LargestOpBytes || sum < e.Need {
				t.Errorf("%s proposal %d: peaks at %s (all devices %s), below the bound: op %q %s, in all %s", name, i,
					cluster.FormatBytes(most), cluster.FormatBytes(sum), e.LargestOp, cluster.FormatBytes(e.LargestOpBytes), cluster.FormatBytes(e.Need))
			}
			if p.Fits(res) {
				fits++
			}
		}
	}
	t.Logf("%d plans checked, %d fit; bound %s, op %q %s (%s)", plans, fits, cluster.FormatBytes(e.Need), e.LargestOp, cluster.FormatBytes(e.LargestOpBytes), e.At)
	if fits == 0 || e.Proved {
		t.Errorf("%d plans fit, proved %v: want plans that fit and no proof", fits, e.Proved)
	}
}
