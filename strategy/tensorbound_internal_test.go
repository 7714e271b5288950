package strategy

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
	"github.com/opplace/opplace/train"
)

// TestTensorBoundHolds: on GPT-2 small training (batch 8) on two hosts
// of four A100s, every plan the tensor strategy proposes at degree t,
// simulated, takes at least tensorBound for t; and the bound is not
// empty.
func TestTensorBoundHolds(t *testing.T) {
	c, p := gpt2SmallOn8xA100(t)
	s := tensorParallel{levels: []sim.Sharding{sim.NoSharding, sim.ZeRO2}}
	cl := p.Costs.Classes()[0]
	for _, tp := range []int{2, 4, 8} {
		groups := tensorGroups(c, cl, tp)
		sol, split, err := s.solve(p, groups[0], tp, false)
		if err != nil {
			t.Fatal(err)
		}
		lb := tensorBound(p, groups, tp, split)
		if !(lb > 0) {
			t.Fatalf("t=%d: bound %v", tp, lb)
		}
		props, err := s.proposeGroups(context.Background(), p, groups, tp, sol, split, math.Inf(1))
		if err != nil {
			t.Fatal(err)
		}
		if len(props) == 0 {
			t.Fatalf("t=%d: %d proposals", tp, len(props))
		}
		least := 0.0
		for i, pr := range props {
			res := pr.Sim
			if res == nil {
				if res, err = p.Simulate(pr.Plan); err != nil {
					continue
				}
			}
			if res.Step < lb*(1-1e-9) {
				t.Errorf("t=%d proposal %d (%d stages): step %.6f ms under the bound %.6f ms", tp, i, len(pr.Plan.Stages), res.Step*1e3, lb*1e3)
			}
			if least == 0 || res.Step < least {
				least = res.Step
			}
		}
		t.Logf("t=%d: bound %.3f ms, fastest proposal %.3f ms", tp, lb*1e3, least*1e3)
	}
}

// TestCollectiveSubadditive: a collective over a group takes no less for
// the sum of two sizes than for both apart (tensorBound relies on it),
// within a host and across hosts.
func TestCollectiveSubadditive(t *testing.T) {
	c, err := cluster.Load(filepath.Join("..", "testdata", "clusters", "8xA100-2host.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int64{1, 1000, 1 << 20, 3 << 24, 1 << 30}
	for _, group := range [][]int{{0, 1}, {0, 1, 2, 3}, {2, 3, 4, 5}, {0, 1, 2, 3, 4, 5, 6, 7}} {
		for _, k := range []sim.CollectiveKind{sim.AllReduce, sim.AllGather, sim.ReduceScatter} {
			for _, a := range sizes {
				for _, b := range sizes {
					apart := sim.CollectiveTime(c, k, group, a) + sim.CollectiveTime(c, k, group, b)
					if whole := sim.CollectiveTime(c, k, group, a+b); whole > apart*(1+1e-12) {
						t.Errorf("%s over %v: %d+%d bytes take %g s, apart %g s", k, group, a, b, whole, apart)
					}
				}
			}
		}
	}
}

// gpt2SmallOn8xA100 is GPT-2 small's training step (Adam, batch 8) on
// 8xA100-2host, priced by the roofline.
func gpt2SmallOn8xA100(t *testing.T) (*cluster.Cluster, *Problem) {
	t.Helper()
	return gpt2SmallTrainingOn8xA100(t, 8)
}

// gpt2SmallTrainingOn8xA100 is GPT-2 small's training step (Adam) at a
// batch of batch on 8xA100-2host.
func gpt2SmallTrainingOn8xA100(t *testing.T, batch int64) (*cluster.Cluster, *Problem) {
	t.Helper()
	c, err := cluster.Load(filepath.Join("..", "testdata", "clusters", "8xA100-2host.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := onnx.Load(filepath.Join("..", "testdata", "models", "gpt2_small.onnx"), onnx.Options{Dims: map[string]int64{"batch": batch}})
	if err != nil {
		t.Fatal(err)
	}
	g, _, err := train.Build(m.Graph, train.Options{Optimizer: train.Adam})
	if err != nil {
		t.Fatal(err)
	}
	pp, err := placer.NewProblem(g, cost.NewTable(g, c, cost.Roofline{}))
	if err != nil {
		t.Fatal(err)
	}
	return c, NewProblem(pp, batch)
}

// TestMemberModelRunsAsTheSimulator: the tensor pipelines' proxy prices
// a run of share x of an op's work as the simulator prices a member of a
// group of t running x of the batch under the split (cost.Table.RunTime
// at the member's share s·x, weights s) plus x of the op's syncs over the
// group: so the partitioners price the groups' micro-batches by the
// simulator's rule. GPT-2 small training, amp, on 8xA100-2host.
func TestMemberModelRunsAsTheSimulator(t *testing.T) {
	c, p := gpt2SmallOn8xA100(t)
	g := p.Graph
	s := tensorParallel{levels: []sim.Sharding{sim.NoSharding}}
	cl := p.Costs.Classes()[0]
	for _, tp := range []int{2, 4} {
		groups := tensorGroups(c, cl, tp)
		_, split, err := s.solve(p, groups[0], tp, false)
		if err != nil {
			t.Fatal(err)
		}
		lead := groups[0][0]
		launch := c.Devices[lead].Type.LaunchOverhead
		ct := sim.NewGroupCollectives(c, groups[0])
		vtab := cost.NewTable(g, c.Sub([]int{lead}), memberModel(p, lead, tp, split, ct))
		checked := 0
		for op := range g.Ops {
			id := graph.OpID(op)
			sh := split.Share(id, tp)
			sync := split.SyncTime(ct, id, 1)
			for _, x := range []float64{1, 0.5, 1.0 / 8, 1.0 / 64} {
				want := p.Costs.RunTime(id, lead, sh*x, sh) + sync*x
				got := vtab.RunTime(id, 0, x, 1)
				// An op shorter than a launch is all launch to the
				// simulator; the proxy's launch may take some of its
				// syncs too: within a launch.
				tol := 1e-6*want + 1e-12
				if p.Costs.OpTime(id, lead) < launch {
					tol = launch
				}
				if math.Abs(got-want) > tol {
					t.Fatalf("t=%d op %s at x=%g: proxy %.9g s, member %.9g s", tp, g.Ops[op].Name, x, got, want)
				}
			}
			if sh < 1 {
				checked++
			}
		}
		if checked == 0 {
			t.Fatalf("t=%d: no op is split", tp)
		}
	}
}
