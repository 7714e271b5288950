package shard

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/sim"
)

// loadStep imports a test model at the given batch and builds its
// training step (Adam).
func loadStep(tb testing.TB, model string, batch int64) *graph.Graph {
	tb.Helper()
	m, err := onnx.Load(filepath.Join("../testdata/models", model+".onnx"), onnx.Options{Dims: map[string]int64{"batch": batch}})
	if err != nil {
		tb.Fatal(err)
	}
	return step(tb, m.Graph)
}

// blockOps are the forward ops of one block, by name prefix.
func blockOps(g *graph.Graph, prefix string) []graph.OpID {
	var ops []graph.OpID
	for i := range g.Ops {
		if g.Ops[i].Phase == graph.Forward && strings.HasPrefix(g.Ops[i].Name, prefix) {
			ops = append(ops, graph.OpID(i))
		}
	}
	return ops
}

func TestTransformerBlocks(t *testing.T) {
	for _, model := range []string{"gpt2_small", "bert_base"} {
		g := loadStep(t, model, 8)
		for _, tp := range []int{2, 4, 8} {
			t.Run(fmt.Sprintf("%s/t=%d", model, tp), func(t *testing.T) {
				sol, err := Solve(g, tp, flopModel{g: g, t: tp, bandwidth: 100e9}, Options{})
				if err != nil {
					t.Fatal(err)
				}
				// Block 0 is not its successors' twin: the export stores
				// the layer norms' identical initial weights once, in
				// block 0, and the later blocks read them through
				// Identity ops; it is solved with the rest of the graph.
				if sol.Blocks != 11 || sol.Distinct != 1 {
					t.Errorf("%d blocks, %d distinct; want 11 blocks, 1 distinct", sol.Blocks, sol.Distinct)
				}
				for _, b := range []int{0, 5, 11} {
					prefix := fmt.Sprintf("/blocks/blocks.%d/", b)
					want := map[string]string{"qkv/MatMul": "column", "proj/MatMul": "row", "fc1/MatMul": "column", "fc2/MatMul": "row",
						"MatMul": "heads", "MatMul_1": "heads"}
					allReduces := 2
					if 12%tp != 0 {
						// 12 heads do not split 8 ways: attention stays
						// whole, the MLP is still column then row.
						want = map[string]string{"qkv/MatMul": "replicated", "proj/MatMul": "replicated", "fc1/MatMul": "column", "fc2/MatMul": "row",
							"MatMul": "replicated", "MatMul_1": "replicated"}
						allReduces = 1
					}
					for name, w := range want {
						id := opID(t, g, prefix+name)
						if got := sol.Choice[id]; got != w {
							t.Errorf("%s%s is %q, want %q", prefix, name, got, w)
						}
						gid := opID(t, g, prefix+name+"/grad")
						share := float32(1)
						if w == "replicated" {
							share = 0
						}
						if sol.Split.Split[id] != share || sol.Split.Split[gid] != share {
							t.Errorf("%s%s: shares %v and %v (grad), want %v", prefix, name, sol.Split.Split[id], sol.Split.Split[gid], share)
						}
						if w == "replicated" || !strings.Contains(name, "/") {
							continue
						}
						module := strings.TrimSuffix(name, "/MatMul")
						for _, p := range []string{"weight", "weight/adam_state0", "weight/adam_state1"} {
							x, ok := g.TensorByName(fmt.Sprintf("blocks.%d.%s.%s", b, module, p))
							if !ok || !sol.Split.Divided[x] {
								t.Errorf("block %d: blocks.%d.%s.%s not divided", b, b, module, p)
							}
						}
						if u := opID(t, g, fmt.Sprintf("blocks.%d.%s.weight/adam", b, module)); sol.Split.Split[u] != 1 {
							t.Errorf("block %d: the update of %s's weight has share %v", b, module, sol.Split.Split[u])
						}
					}
					ops := blockOps(g, prefix)
					fwd, bwd := syncs(g, sol, ops, sim.AllReduce)
					if fwd != allReduces || bwd != allReduces {
						t.Errorf("block %d: %d forward and %d backward all-reduces, want %d and %d", b, fwd, bwd, allReduces, allReduces)
					}
					ag, agb := syncs(g, sol, ops, sim.AllGather)
					rs, rsb := syncs(g, sol, ops, sim.ReduceScatter)
					if ag+agb+rs+rsb != 0 {
						t.Errorf("block %d: %d+%d all-gathers and %d+%d reduce-scatters, want none", b, ag, agb, rs, rsb)
					}
					if b == 5 {
						t.Logf("block 5: all-reduce %d+%d, all-gather %d+%d, reduce-scatter %d+%d (forward+backward); estimate %.3f ms",
							fwd, bwd, ag, agb, rs, rsb, sol.Estimate*1e3)
					}
				}
			})
		}
	}
}

// TestGPT2XLOneDistinctBlock: GPT-2 XL (exported without weight
// deduplication) is 48 twin blocks, one program. Its 25 heads split 5
// ways but not 8: at t=8 the attention stays whole, yet the search still
// splits the fused QKV projection (its 4800 columns divide by 8) and
// all-gathers its output (whole, or its three pieces: the same bytes),
// whose backward is a third all-reduce.
func TestGPT2XLOneDistinctBlock(t *testing.T) {
	g := loadStep(t, "gpt2_xl", 4)
	for _, tc := range []struct {
		t         int
		attention [3]string // qkv, scores, proj
		fwd, bwd  int       // all-reduces per block
		gathers   int       // forward all-gathers per block
	}{
		{5, [3]string{"column", "heads", "row"}, 2, 2, 0},
		{8, [3]string{"column", "replicated", "replicated"}, 1, 2, 1},
	} {
		begin := time.Now()
		sol, err := Solve(g, tc.t, flopModel{g: g, t: tc.t, bandwidth: 100e9}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("gpt2_xl t=%d: solved in %v, %d blocks, %d distinct, estimate %.1f ms", tc.t, time.Since(begin), sol.Blocks, sol.Distinct, sol.Estimate*1e3)
		if sol.Blocks != 48 || sol.Distinct != 1 {
			t.Errorf("t=%d: %d blocks, %d distinct; want 48 and 1", tc.t, sol.Blocks, sol.Distinct)
		}
		for _, b := range []int{0, 23, 47} {
			want := map[string]string{"qkv/MatMul": tc.attention[0], "MatMul": tc.attention[1], "proj/MatMul": tc.attention[2],
				"fc1/MatMul": "column", "fc2/MatMul": "row"}
			for name, w := range want {
				if got := sol.Choice[opID(t, g, fmt.Sprintf("/blocks/blocks.%d/%s", b, name))]; got != w {
					t.Errorf("t=%d: block %d %s is %q, want %q", tc.t, b, name, got, w)
				}
			}
			ops := blockOps(g, fmt.Sprintf("/blocks/blocks.%d/", b))
			fwd, bwd := syncs(g, sol, ops, sim.AllReduce)
			if fwd != tc.fwd || bwd != tc.bwd {
				t.Errorf("t=%d: block %d has %d+%d all-reduces, want %d+%d", tc.t, b, fwd, bwd, tc.fwd, tc.bwd)
			}
			// Gathering the QKV output before its Split or its three
			// pieces after it moves the same bytes: equal optima.
			if ag, _ := syncs(g, sol, ops, sim.AllGather); ag != tc.gathers && (tc.gathers != 1 || ag != 3) {
				t.Errorf("t=%d: block %d has %d forward all-gathers, want %d", tc.t, b, ag, tc.gathers)
			}
		}
	}
}

// BenchmarkSolve times the search on GPT-2 XL's training step for a
// group of 8 (the step is built once, outside the timing).
func BenchmarkSolve(b *testing.B) {
	g := loadStep(b, "gpt2_xl", 4)
	m := flopModel{g: g, t: 8, bandwidth: 100e9}
	b.ResetTimer()
	for range b.N {
		if _, err := Solve(g, 8, m, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSolveDenseNet times the search on DenseNet-121's training step
// for a group of 4: its dense blocks differ in width, so no block repeats
// and the whole step is one program of 623 ops (about 45,000 nonzeros),
// which Cbc took 4-6 s over and its LP relaxation (RelaxFirst) solves in
// under a second.
func BenchmarkSolveDenseNet(b *testing.B) {
	g := loadStep(b, "heldout/densenet121", 1)
	m := flopModel{g: g, t: 4, bandwidth: 100e9}
	b.ResetTimer()
	for range b.N {
		if _, err := Solve(g, 4, m, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
