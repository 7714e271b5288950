package shard

import (
	"slices"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
)

// assemble turns the chosen strategies into the simulator's contract:
// shares, divided tensors and the collectives, each attached to the op
// that produces the tensor it converts, and the step's estimate. It
// prices exactly what the programs priced: across regions a tensor is
// made replicated by its producer and sliced, free, by its reader.
func (p *problem) assemble(sol *Solution) {
	g := p.g
	n, nt := len(g.Ops), len(g.Tensors)
	ts := &sim.TensorSplit{Split: make([]float32, n), Divided: make([]bool, nt), Syncs: make([][]sim.Sync, n)}
	sol.Split = ts
	sol.Choice = make([]string, n)
	sol.Layout = make([]Layout, nt)
	for i := range sol.Layout {
		sol.Layout[i] = Replicated
	}
	chosen := func(op graph.OpID) strategy { return p.strats[op][p.choice[op]] }
	addSync := func(op graph.OpID, k sim.CollectiveKind, x graph.TensorID) {
		b := g.Tensors[x].Bytes()
		ts.Syncs[op] = append(ts.Syncs[op], sim.Sync{Kind: k, Tensor: x, Bytes: b})
		sol.Estimate += p.m.Collective(k, b)
	}
	// Layouts of forward tensors; a parameter as its first reader takes it.
	for i := range g.Ops {
		if g.Ops[i].Phase != graph.Forward {
			continue
		}
		st := chosen(graph.OpID(i))
		for k, x := range g.Ops[i].Outputs {
			sol.Layout[x] = st.out[k]
		}
		for j, x := range g.Ops[i].Inputs {
			if tt := &g.Tensors[x]; tt.Kind == graph.Parameter && tt.Consumers[0] == graph.OpID(i) {
				sol.Layout[x] = st.in[j]
			}
		}
	}
	// Forward ops: share, and the conversions of their outputs.
	for i := range g.Ops {
		u := graph.OpID(i)
		if g.Ops[u].Phase != graph.Forward {
			continue
		}
		st := chosen(u)
		ts.Split[u] = st.split
		sol.Choice[u] = st.name
		if gv := p.gradOp[u]; gv != graph.NoOp {
			ts.Split[gv] = st.split
			sol.Choice[gv] = "grad:" + st.name
		}
		for k, x := range g.Ops[u].Outputs {
			lp := st.out[k]
			var done []Layout
			need := func(lt Layout) {
				if kind, ok := conversion(lp, lt); ok && !slices.Contains(done, lt) {
					done = append(done, lt)
					addSync(u, kind, x)
				}
			}
			if slices.Contains(g.Outputs, x) {
				need(Replicated)
			}
			for _, v := range g.Tensors[x].Consumers {
				if g.Ops[v].Phase != graph.Forward {
					continue
				}
				if p.region[v] != p.region[u] {
					need(Replicated)
					continue
				}
				for j, in := range g.Ops[v].Inputs {
					if in == x {
						need(chosen(v).in[j])
					}
				}
			}
		}
	}
	// Gradient ops: the conversions of the gradients they write.
	reduced := map[graph.TensorID]bool{}
	for i := range g.Ops {
		v := graph.OpID(i)
		gv := p.gradOp[v]
		if g.Ops[v].Phase != graph.Forward || gv == graph.NoOp {
			continue
		}
		st := chosen(v)
		seen := map[graph.TensorID]bool{}
		for j, x := range g.Ops[v].Inputs {
			if seen[x] || !p.hasGrad(x) {
				continue
			}
			seen[x] = true
			dx := p.gradTensor(v, x)
			if dx < 0 {
				continue
			}
			gl := st.grad[j]
			sol.Layout[dx] = gl
			ts.Divided[dx] = gl.IsSplit()
			tt := &g.Tensors[x]
			lp := Replicated
			switch {
			case tt.Kind == graph.Parameter:
				lp = st.in[j]
			case tt.Producer != graph.NoOp && p.region[tt.Producer] == p.region[v]:
				lp = chosen(tt.Producer).out[slices.Index(g.Ops[tt.Producer].Outputs, x)]
			}
			kind, ok := conversion(gl, dual(lp))
			if !ok {
				continue
			}
			if kind == sim.AllReduce {
				if u, dw := p.weightView(x); dw >= 0 {
					// The partial gradient of a weight's transpose is
					// reduced as the weight's own gradient, after the
					// view's gradient op: the same bytes, but run once
					// per step on the gradient accumulated over the
					// micro-batches, as data parallelism reduces it.
					sol.Layout[dw] = Partial
					if !reduced[dw] {
						reduced[dw] = true
						addSync(u, kind, dw)
					}
					continue
				}
			}
			addSync(gv, kind, dx)
		}
	}
	// Divided forward tensors and parameters; updates of divided weights
	// and their optimizer state.
	for x := range g.Tensors {
		if g.Tensors[x].Kind == graph.Parameter || g.Tensors[x].Producer != graph.NoOp && g.Ops[g.Tensors[x].Producer].Phase == graph.Forward {
			ts.Divided[x] = ts.Divided[x] || sol.Layout[x].IsSplit()
		}
	}
	for i := range g.Ops {
		op := &g.Ops[i]
		if op.Phase != graph.Update || len(op.Inputs) == 0 {
			continue
		}
		sol.Choice[i] = "update:replicated"
		if !ts.Divided[op.Inputs[0]] {
			continue
		}
		sol.Choice[i] = "update:split"
		ts.Split[i] = 1
		for _, x := range op.Inputs[1:] {
			if g.Tensors[x].Kind == graph.Parameter { // optimizer state
				ts.Divided[x] = true
				sol.Layout[x] = sol.Layout[op.Inputs[0]]
			}
		}
	}
	for i := range g.Ops {
		if sol.Choice[i] == "" {
			sol.Choice[i] = "replicated"
		}
		sol.Estimate += p.m.RunTime(graph.OpID(i), p.share(ts.Split[i]))
	}
}

// weightView finds, for forward tensor x, the weight it is a replicated
// view of (through Transpose, Cast or Identity ops left replicated, as
// exporters put between a parameter and its matmul): the gradient op of
// the view op reading the weight and the weight's gradient it writes.
// It returns -1 for the gradient when x is no such view, or when a view
// along the way has other readers or is split.
func (p *problem) weightView(x graph.TensorID) (graph.OpID, graph.TensorID) {
	g := p.g
	// One forward reader: a gradient of x summed with another reader's
	// replicated one would be counted t times by the all-reduce.
	readers := func(x graph.TensorID) int {
		n := 0
		for _, c := range g.Tensors[x].Consumers {
			if g.Ops[c].Phase == graph.Forward {
				n++
			}
		}
		return n
	}
	if readers(x) != 1 {
		return graph.NoOp, -1
	}
	for range 3 {
		u := g.Tensors[x].Producer
		if u == graph.NoOp || g.Ops[u].Phase != graph.Forward || p.gradOp[u] == graph.NoOp || len(g.Ops[u].Inputs) == 0 {
			return graph.NoOp, -1
		}
		switch g.Ops[u].Type {
		case "Transpose", "Cast", "Identity":
		default:
			return graph.NoOp, -1
		}
		if p.strats[u][p.choice[u]].split != 0 {
			return graph.NoOp, -1
		}
		in := g.Ops[u].Inputs[0]
		if readers(in) != 1 {
			return graph.NoOp, -1
		}
		if g.Tensors[in].Kind == graph.Parameter {
			if dw := p.gradTensor(u, in); dw >= 0 {
				return p.gradOp[u], dw
			}
			return graph.NoOp, -1
		}
		x = in
	}
	return graph.NoOp, -1
}
