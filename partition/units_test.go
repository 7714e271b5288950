package partition

import (
	"os"
	"testing"

	"github.com/opplace/opplace/costed"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
)

// checkColocationUnits fails t for every colocation group of g whose ops
// buildUnits put in more than one unit.
func checkColocationUnits(t *testing.T, g *graph.Graph) {
	t.Helper()
	u, err := buildUnits(g, func(graph.OpID) bool { return false }, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, members := range graph.ColocationGroups(g).Groups() {
		for _, op := range members[1:] {
			if u.unitOf[op] != u.unitOf[members[0]] {
				t.Errorf("colocation group %q split: %s in unit %d, %s in unit %d", g.Ops[op].Colocate,
					g.Ops[members[0]].Name, u.unitOf[members[0]], g.Ops[op].Name, u.unitOf[op])
			}
		}
	}
}

func TestUnitsKeepBackwardOnlyGroupsWhole(t *testing.T) {
	type op struct {
		name     string
		backward bool
		colocate string
		inputs   []string
	}
	for _, tc := range []struct {
		name string
		ops  []op
	}{
		// The loss's group (as in BERT's Bert_Total_Loss and its
		// Grad/Identity ops) holds no forward op. Its sources come first
		// in the order, find no unit then, and the reverse pass gave them
		// their successors' units while the loss had joined b's.
		{name: "sources before a member with a predecessor", ops: []op{
			{"id0", true, "loss", nil},
			{"id1", true, "loss", nil},
			{"a", false, "a", []string{"x"}},
			{"b", false, "b", []string{"a"}},
			{"total", true, "loss", []string{"b"}},
			{"b_grad", true, "b", []string{"a", "id1"}},
			{"a_grad", true, "a", []string{"x", "b_grad", "id0"}},
		}},
		// No op of the group finds a unit going forward: the group goes
		// whole where its last op's earliest successor is.
		{name: "sources only", ops: []op{
			{"id0", true, "loss", nil},
			{"id1", true, "loss", nil},
			{"a", false, "a", []string{"x"}},
			{"b", false, "b", []string{"a"}},
			{"b_grad", true, "b", []string{"a", "id1"}},
			{"a_grad", true, "a", []string{"x", "b_grad", "id0"}},
		}},
		{name: "forward op in the group", ops: []op{
			{"id0", true, "b", nil},
			{"a", false, "a", []string{"x"}},
			{"b", false, "b", []string{"a"}},
			{"a_grad", true, "a", []string{"x", "id0"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := graphtest.New("units").Input("x", 1)
			for _, o := range tc.ops {
				b.Op(o.name, 1e9, 8, o.inputs...)
				g := b.G
				g.Ops[len(g.Ops)-1].Colocate = o.colocate
				if o.backward {
					g.Ops[len(g.Ops)-1].Phase = graph.Backward
				}
			}
			checkColocationUnits(t, b.G)
		})
	}
}

// TestUnitsBERTColocation is the repro on BERT-3 training: the
// colorClass of Bert_Total_Loss and its Grad/Identity ops, all backward,
// was split across stages.
func TestUnitsBERTColocation(t *testing.T) {
	path := "/work/shared/peers/dnn-partitioning/throughput-inputs_OperatorGraphs_bert_l-3_training.json"
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s not available: %v", path, err)
	}
	m, err := costed.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	checkColocationUnits(t, m.Graph)
}
