package sim_test

import (
	"fmt"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/sim"
)

// rcChain is a training chain of k layers, each two forward ops: f_i
// (1 GFLOP) reads h_{i-1} (x for layer 0) and writes u_i of u bytes, g_i
// (1 GFLOP) reads u_i and writes h_i of h bytes. Its backward, layer by
// layer from the last: bg_i (2 GFLOP) reads the gradient of h_i (h_{k-1}
// itself for the last layer, as a loss seeds it) and u_i and writes u
// bytes; bf_i (2 GFLOP) reads bg_i's output and h_{i-1} and writes h
// bytes. So u_i is saved for backward and only layer i's forward reads
// it, while h_i is the next layer's input, and h_{k-1} is read by
// backward only, as the inner tensors of a fused op are. With modules,
// layer i's ops are named "/l<i>/f" and "/l<i>/g": each layer is a
// segment.
func rcChain(k int, x, u, h int64, modules bool) *graph.Graph {
	b := graphtest.New("rc").Input("x", x)
	name := func(i int, op string) string {
		if modules {
			return fmt.Sprintf("/l%d/%s", i, op)
		}
		return fmt.Sprintf("l%d_%s", i, op)
	}
	prev := "x"
	for i := 0; i < k; i++ {
		b.Op(name(i, "f"), 1e9, u, prev)
		b.Op(name(i, "g"), 1e9, h, name(i, "f"))
		prev = name(i, "g")
	}
	nf := len(b.G.Ops)
	grad := prev
	for i := k - 1; i >= 0; i-- {
		in := "x"
		if i > 0 {
			in = name(i-1, "g")
		}
		b.Op(fmt.Sprintf("bg%d", i), 2e9, u, grad, name(i, "f"))
		b.Op(fmt.Sprintf("bf%d", i), 2e9, h, fmt.Sprintf("bg%d", i), in)
		grad = fmt.Sprintf("bf%d", i)
	}
	for i := nf; i < len(b.G.Ops); i++ {
		b.G.Ops[i].Phase = graph.Backward
	}
	return b.G
}

func onOneDevice(g *graph.Graph, m int, sched sim.Schedule, recompute bool) *sim.Plan {
	return &sim.Plan{
		Placement:    sim.Placement{Device: make([]int, len(g.Ops))},
		Stages:       []sim.Stage{{Replicas: [][]int{{0}}, Recompute: recompute}},
		MicroBatches: m, Schedule: sched,
	}
}

// TestRecomputeLayers checks per-module recomputation against hand
// counts on one device under GPipe, where all M micro-batches are
// stashed before the first backward. Without recomputation the peak is at
// the first backward op: x, every micro-batch's u_i and h_i, and bg's
// output, X + k(U+H) + U/M. With it, each micro-batch keeps only the
// layer inputs h_0..h_{k-2} (the checkpoints), and the peak is at a
// backward op that recomputes its layer: X + (k-1)H, the layer's
// activations again (u_{k-1} and h_{k-1} for the last layer; u_i and
// the incoming gradient of h_i for the others) and bg_i's output, X +
// (k-1)H + (2U+H)/M. The step
// grows by the forward time of the whole batch: each layer's forward is
// run once more per micro-batch.
func TestRecomputeLayers(t *testing.T) {
	const k, M = 4, 4
	const X, U, H = 1000, 8000, 1000
	g := rcChain(k, X, U, H, true)
	c := graphtest.Cluster(1e18, 0, devices(1, 1<<40)...)
	off := runPlan(t, g, c, onOneDevice(g, M, sim.GPipe, false))
	on := runPlan(t, g, c, onOneDevice(g, M, sim.GPipe, true))
	if got, want := off.PeakMemory[0], int64(X+k*(U+H)+U/M); got != want {
		t.Errorf("peak without recompute %d, want %d", got, want)
	}
	if got, want := on.PeakMemory[0], int64(X+(k-1)*H+(2*U+H)/M); got != want {
		t.Errorf("peak with recompute %d, want %d", got, want)
	}
	// 2k forward GFLOP and 4k backward GFLOP at 1 GFLOP/s.
	fwd := float64(2 * k)
	if want := fwd + 2*fwd; !near(off.Step, want) {
		t.Errorf("step without recompute %g, want %g", off.Step, want)
	}
	if want := off.Step + fwd; !near(on.Step, want) {
		t.Errorf("step with recompute %g, want %g (the forward once more)", on.Step, want)
	}
	if want := off.Stages[0].Compute + fwd; !near(on.Stages[0].Compute, want) {
		t.Errorf("stage compute with recompute %g, want %g", on.Stages[0].Compute, want)
	}
}

// TestRecomputeStage checks a stage without module names: its ops on one
// device are one segment, so every h_i is saved too, the forward keeps
// nothing but x, and the first backward of a micro-batch recomputes the
// whole forward. The peak is there: X, one micro-batch's u_i and h_i
// again, and bg_{k-1}'s output: X + (k+1)U/M + kH/M.
func TestRecomputeStage(t *testing.T) {
	const k, M = 4, 4
	const X, U, H = 1000, 8000, 1000
	g := rcChain(k, X, U, H, false)
	c := graphtest.Cluster(1e18, 0, devices(1, 1<<40)...)
	off := runPlan(t, g, c, onOneDevice(g, M, sim.GPipe, false))
	on := runPlan(t, g, c, onOneDevice(g, M, sim.GPipe, true))
	if got, want := on.PeakMemory[0], int64(X+(k+1)*U/M+k*H/M); got != want {
		t.Errorf("peak with recompute %d, want %d", got, want)
	}
	if want := off.Step + float64(2*k); !near(on.Step, want) {
		t.Errorf("step with recompute %g, want %g", on.Step, want)
	}
}

// TestRecomputeOffUnchanged checks a plan without recomputation, and one
// recomputing an inference graph, run as before.
func TestRecomputeOffUnchanged(t *testing.T) {
	g := rcChain(3, 100, 800, 100, true)
	c := graphtest.Cluster(1e18, 0, devices(1, 1<<40)...)
	a := runPlan(t, g, c, onOneDevice(g, 2, sim.OneFOneB, false))
	b := runPlan(t, g, c, onOneDevice(g, 2, sim.OneFOneB, false))
	if a.Step != b.Step || a.PeakMemory[0] != b.PeakMemory[0] {
		t.Errorf("two runs differ")
	}
	inf := graphtest.New("inf").Input("x", 100).Op("/a/f", 1e9, 800, "x").Op("/a/g", 1e9, 100, "/a/f").Output("/a/g").G
	off := runPlan(t, inf, c, onOneDevice(inf, 2, "", false))
	on := runPlan(t, inf, c, onOneDevice(inf, 2, "", true))
	if off.Step != on.Step || off.PeakMemory[0] != on.PeakMemory[0] {
		t.Errorf("inference: recompute changed step %g -> %g or peak %d -> %d", off.Step, on.Step, off.PeakMemory[0], on.PeakMemory[0])
	}
}

// TestRecomputePerStage runs rcChain's 4 layers as a 2-stage 1F1B
// pipeline (layers 0-1 on device 0, 2-3 on device 1) with recomputation
// in the first stage only: the second stage's peak and busy time are
// untouched, the first stage's peak falls and its busy time grows by its
// forward time (2 layers of 2 GFLOP at 1 GFLOP/s).
func TestRecomputePerStage(t *testing.T) {
	const k, M = 4, 4
	g := rcChain(k, 1000, 8000, 1000, true)
	c := graphtest.Cluster(1e18, 0, devices(2, 1<<40)...)
	plan := func(rc bool) *sim.Plan {
		p := &sim.Plan{Placement: sim.Placement{Device: make([]int, len(g.Ops))}, OpStage: make([]int, len(g.Ops)), MicroBatches: M,
			Stages: []sim.Stage{{Replicas: [][]int{{0}}, Recompute: rc}, {Replicas: [][]int{{1}}}}}
		for i, op := range g.Ops {
			var layer int
			if op.Name[0] == '/' {
				fmt.Sscanf(op.Name, "/l%d/", &layer)
			} else {
				fmt.Sscanf(op.Name[2:], "%d", &layer) // bg<i>, bf<i>
			}
			if layer >= k/2 {
				p.Device[i], p.OpStage[i] = 1, 1
			}
		}
		return p
	}
	off := runPlan(t, g, c, plan(false))
	on := runPlan(t, g, c, plan(true))
	if on.PeakMemory[1] != off.PeakMemory[1] || !near(on.Busy[1], off.Busy[1]) {
		t.Errorf("stage 1: peak %d -> %d, busy %g -> %g; want both unchanged", off.PeakMemory[1], on.PeakMemory[1], off.Busy[1], on.Busy[1])
	}
	if on.PeakMemory[0] >= off.PeakMemory[0] {
		t.Errorf("stage 0: peak %d -> %d; want lower", off.PeakMemory[0], on.PeakMemory[0])
	}
	fwd := float64(k)
	if !near(on.Busy[0], off.Busy[0]+fwd) {
		t.Errorf("stage 0 busy %g -> %g; want %g longer", off.Busy[0], on.Busy[0], fwd)
	}
	// Per micro-batch each stage's forward takes 1 s and backward 2 s;
	// stage 0's backward takes 3 s with its recompute. Traced by hand,
	// stage 0 runs F0 [0,1], F1 [1,2], B0 [4,7], F2 [7,8], B1 [8,11],
	// F3 [11,12], B2 [12,15], B3 [15,18] (each backward after stage 1's,
	// which ends at 4, 7, 11, 15): 18 s against (M+S-1)·3 = 15 s without,
	// 3 s more, within (M+S-1)/M times stage 0's added forward.
	if want := off.Step + 3; !near(on.Step, want) || on.Step > off.Step+fwd*float64(M+1)/M {
		t.Errorf("step %g -> %g; want %g", off.Step, on.Step, want)
	}
	t.Logf("stage 0 peak %d -> %d, step %g -> %g", off.PeakMemory[0], on.PeakMemory[0], off.Step, on.Step)
}
