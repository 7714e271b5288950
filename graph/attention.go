package graph

import (
	"fmt"
	"path"
	"slices"
)

// The attention core as a fused kernel. Exporters write scaled
// dot-product attention out as ops: Q·Kᵀ (a MatMul, K transposed by a
// Transpose), a scale (Div or Mul by a scalar), an optional mask (Add of a
// bias, or Where of a boolean mask), Softmax over the last axis, an
// optional Dropout, and ·V (a MatMul). A runtime with a fused attention
// kernel (PyTorch's scaled_dot_product_attention with its FlashAttention
// or memory-efficient backends, FlashAttention itself, ONNX Runtime's
// attention fusion) runs the whole pattern as one kernel: the
// sequence × sequence scores are computed tile by tile in on-chip memory
// and never written out, and the backward pass recomputes them from Q, K,
// V, the output and the per-row softmax statistics instead of reading a
// stored probability matrix.
//
// FuseAttention rewrites each such pattern into one op of ONNX's
// Attention type (opset 23; inputs Q, K, V and the mask when it is not
// causal), so every later stage sees what that runtime runs: the training
// step saves Q, K, V and the output for its gradient (train), the
// roofline prices the op's FLOPs on tensor cores under autocast, its
// working set holds no score matrix, and tensor parallelism splits it
// over heads (shard).

// AttentionDomain marks the ops FuseAttention writes: ONNX Attention's
// semantics, named so a reader of a plan can tell a fused pattern from an
// Attention op the model file carried.
const AttentionDomain = "opplace.fused"

// FusedAttention is one pattern FuseAttention rewrote.
type FusedAttention struct {
	// Op is the fused op's name; Covers the names of the ops it replaced,
	// in the graph's order.
	Op     string
	Covers []string
	// Causal says the mask was read as causal: a square mask computed from
	// stored values alone (a decoder's lower-triangular buffer), which the
	// kernel applies by skipping the blocks above the diagonal.
	Causal bool
}

// attentionMatch is one pattern found, by op and tensor IDs.
type attentionMatch struct {
	sm, av          OpID
	q, k, v, mask   TensorID // mask: NoTensor when there is none
	covered         []OpID   // sorted
	causal, hasMask bool
	// batchHeads is the product of the scores' leading axes; sq and skv
	// the query and key lengths; dq and dv the head sizes.
	batchHeads, sq, skv, dq, dv int64
}

// NoTensor stands for an absent tensor.
const NoTensor TensorID = -1

// FuseAttention returns a copy of g with every attention pattern it
// recognises replaced by one AttentionDomain Attention op, and what it
// replaced; g itself is not modified. A graph with no pattern is
// returned as is. Only patterns whose intermediates nothing else reads
// are fused: a score matrix a second op consumes must be written out.
func FuseAttention(g *Graph) (*Graph, []FusedAttention, error) {
	var matches []attentionMatch
	taken := make([]bool, len(g.Ops))
	for i := range g.Ops {
		if g.Ops[i].Type != "Softmax" || g.Ops[i].Phase != Forward {
			continue
		}
		m, ok := matchAttention(g, OpID(i))
		if !ok || slices.ContainsFunc(m.covered, func(id OpID) bool { return taken[id] }) {
			continue
		}
		for _, id := range m.covered {
			taken[id] = true
		}
		matches = append(matches, m)
	}
	if len(matches) == 0 {
		return g, nil, nil
	}
	// The fused op takes the place of the pattern's last op (·V), whose
	// output it writes; the tensors only the pattern read are dropped.
	at := make(map[OpID]*attentionMatch, len(matches))
	drop := make([]bool, len(g.Tensors))
	for i := range matches {
		m := &matches[i]
		at[m.av] = m
		for _, id := range m.covered {
			for _, t := range g.Ops[id].Outputs {
				if t != g.Ops[m.av].Outputs[0] {
					drop[t] = true
				}
			}
		}
	}
	out := New(g.Name, len(g.Ops), len(g.Tensors))
	newID := make([]TensorID, len(g.Tensors))
	for i := range g.Tensors {
		if drop[i] {
			newID[i] = NoTensor
			continue
		}
		t := g.Tensors[i]
		t.Shape = slices.Clone(t.Shape)
		id, err := out.AddTensor(t)
		if err != nil {
			return nil, nil, err
		}
		newID[i] = id
	}
	remap := func(ts []TensorID) []TensorID {
		r := make([]TensorID, 0, len(ts))
		for _, t := range ts {
			r = append(r, newID[t])
		}
		return r
	}
	names := make(map[string]bool, len(g.Ops))
	for i := range g.Ops {
		names[g.Ops[i].Name] = true
	}
	newOp := make([]OpID, len(g.Ops))
	for i := range newOp {
		newOp[i] = NoOp
	}
	var fused []FusedAttention
	for i := range g.Ops {
		m, last := at[OpID(i)]
		if taken[i] && !last {
			continue
		}
		var op Op
		if last {
			op = m.op(g, names)
			op.Inputs = remap(op.Inputs)
			op.Outputs = remap(op.Outputs)
			f := FusedAttention{Op: op.Name, Causal: m.causal}
			for _, id := range m.covered {
				f.Covers = append(f.Covers, g.Ops[id].Name)
			}
			fused = append(fused, f)
		} else {
			op = g.Ops[i]
			op.Inputs = remap(op.Inputs)
			op.Outputs = remap(op.Outputs)
		}
		// A control dependency on a replaced op waits for the fused op
		// (newOp maps every op it covers to it).
		var deps []OpID
		for _, d := range op.ControlDeps {
			if nd := newOp[d]; nd != NoOp && !slices.Contains(deps, nd) {
				deps = append(deps, nd)
			}
		}
		op.ControlDeps = deps
		id, err := out.AddOp(op)
		if err != nil {
			return nil, nil, err
		}
		newOp[i] = id
		if last {
			for _, c := range m.covered {
				newOp[c] = id
			}
		}
	}
	out.Inputs = remap(g.Inputs)
	out.Outputs = remap(g.Outputs)
	return out, fused, nil
}

// op is the fused op of m, named in the Softmax's module.
func (m *attentionMatch) op(g *Graph, names map[string]bool) Op {
	sm := &g.Ops[m.sm]
	dir := path.Dir(sm.Name)
	base := "Attention"
	if dir != "." && dir != "/" {
		base = dir + "/Attention"
	}
	name := base
	for i := 1; names[name]; i++ {
		name = fmt.Sprintf("%s_%d", base, i)
	}
	names[name] = true
	ins := []TensorID{m.q, m.k, m.v}
	if m.hasMask && !m.causal {
		ins = append(ins, m.mask)
	}
	// FLOPs as FlashAttention counts them (its benchmarks'
	// 4·b·h·sq·skv·d forward, halved when causal), plus the softmax's
	// exponent, sum and scale per score; the causal kernel skips the
	// blocks above the diagonal.
	scores := m.batchHeads * m.sq * m.skv
	macs := scores * (m.dq + m.dv)
	flops := 2*macs + 5*scores
	if m.causal {
		macs /= 2
		flops /= 2
	}
	attrs := Attrs{}
	if m.causal {
		attrs["is_causal"] = Attr{Kind: AttrInt, Int: 1}
	}
	return Op{
		Name:   name,
		Type:   "Attention",
		Domain: AttentionDomain,
		Attrs:  attrs,
		Inputs: ins,
		// The ·V product's output, so every reader downstream is unchanged.
		Outputs:  []TensorID{g.Ops[m.av].Outputs[0]},
		Colocate: sm.Colocate,
		Device:   sm.Device,
		Phase:    Forward,
		Work:     Work{FLOPs: flops, MACs: macs},
	}
}

// only reports whether tensor t is read by exactly one op, reader, and is
// not a graph output.
func only(g *Graph, t TensorID, reader OpID) bool {
	tt := &g.Tensors[t]
	if len(tt.Consumers) != 1 || tt.Consumers[0] != reader {
		return false
	}
	return !slices.Contains(g.Outputs, t)
}

// matchAttention matches the pattern around Softmax op sm.
func matchAttention(g *Graph, sm OpID) (attentionMatch, bool) {
	m := attentionMatch{mask: NoTensor, sm: sm}
	s := &g.Ops[sm]
	if len(s.Inputs) != 1 || len(s.Outputs) != 1 {
		return m, false
	}
	st := &g.Tensors[s.Inputs[0]]
	if !st.ShapeKnown || len(st.Shape) < 3 {
		return m, false
	}
	if ax := s.Attrs.Int("axis", -1); ax != -1 && ax != int64(len(st.Shape)-1) {
		return m, false
	}
	covered := []OpID{sm}
	// Forward of the Softmax: an optional Dropout, then ·V.
	p := s.Outputs[0]
	for {
		ts := &g.Tensors[p]
		if len(ts.Consumers) != 1 || slices.Contains(g.Outputs, p) {
			return m, false
		}
		c := ts.Consumers[0]
		op := &g.Ops[c]
		if op.Type == "Dropout" && len(op.Inputs) >= 1 && op.Inputs[0] == p {
			// A Dropout's mask output, if any, is read by nothing else.
			for _, o := range op.Outputs[1:] {
				if len(g.Tensors[o].Consumers) > 0 || slices.Contains(g.Outputs, o) {
					return m, false
				}
			}
			covered = append(covered, c)
			p = op.Outputs[0]
			continue
		}
		if op.Type != "MatMul" || len(op.Inputs) != 2 || op.Inputs[0] != p || op.Inputs[1] == p {
			return m, false
		}
		m.av, m.v = c, op.Inputs[1]
		covered = append(covered, c)
		break
	}
	// Backward from the Softmax: mask, scale, Q·Kᵀ.
	x := s.Inputs[0]
	reader := sm
	for steps := 0; ; steps++ {
		if steps > 6 || !only(g, x, reader) {
			return m, false
		}
		pid := g.Tensors[x].Producer
		if pid == NoOp {
			return m, false
		}
		op := &g.Ops[pid]
		switch {
		case op.Type == "MatMul" && len(op.Inputs) == 2 && len(op.Outputs) == 1:
			m.q = op.Inputs[0]
			covered = append(covered, pid)
			kt := op.Inputs[1]
			m.k = kt
			// Fold a Transpose that swaps K's last two axes.
			if tp := g.Tensors[kt].Producer; tp != NoOp && swapsLastTwo(g, tp) && only(g, kt, pid) {
				m.k = g.Ops[tp].Inputs[0]
				covered = append(covered, tp)
			}
			return m.finish(g, covered, st)
		case (op.Type == "Div" || op.Type == "Mul") && len(op.Inputs) == 2 && scalar(g, op.Inputs[1]):
			covered = append(covered, pid)
			x, reader = op.Inputs[0], pid
		case op.Type == "Mul" && len(op.Inputs) == 2 && scalar(g, op.Inputs[0]):
			covered = append(covered, pid)
			x, reader = op.Inputs[1], pid
		case (op.Type == "Add" || op.Type == "Sub") && len(op.Inputs) == 2 && !m.hasMask:
			a, b := op.Inputs[0], op.Inputs[1]
			if op.Type == "Add" && sameShape(g, b, x) && !sameShape(g, a, x) {
				a, b = b, a
			}
			if !sameShape(g, a, x) {
				return m, false
			}
			m.mask, m.hasMask = b, true
			covered = append(covered, pid)
			x, reader = a, pid
		case op.Type == "Where" && len(op.Inputs) == 3 && !m.hasMask:
			// masked_fill: Where(mask, scores, fill) or Where(mask, fill, scores).
			a, fill := op.Inputs[1], op.Inputs[2]
			if !sameShape(g, a, x) {
				a, fill = fill, a
			}
			if !sameShape(g, a, x) || !scalar(g, fill) {
				return m, false
			}
			m.mask, m.hasMask = op.Inputs[0], true
			covered = append(covered, pid)
			x, reader = a, pid
		case op.Type == "Cast" && len(op.Inputs) == 1:
			covered = append(covered, pid)
			x, reader = op.Inputs[0], pid
		default:
			return m, false
		}
	}
}

// finish checks the shapes of a matched pattern and fills its sizes.
func (m attentionMatch) finish(g *Graph, covered []OpID, scores *Tensor) (attentionMatch, bool) {
	q, k, v := &g.Tensors[m.q], &g.Tensors[m.k], &g.Tensors[m.v]
	if !q.ShapeKnown || !k.ShapeKnown || !v.ShapeKnown || q.Kind != Activation || v.Kind != Activation {
		return m, false
	}
	r := len(scores.Shape)
	if len(q.Shape) != r || len(v.Shape) != r {
		return m, false
	}
	m.sq, m.skv = scores.Shape[r-2], scores.Shape[r-1]
	m.dq, m.dv = q.Shape[r-1], v.Shape[r-1]
	if q.Shape[r-2] != m.sq || v.Shape[r-2] != m.skv {
		return m, false
	}
	m.batchHeads = 1
	for _, d := range scores.Shape[:r-2] {
		m.batchHeads *= d
	}
	if m.batchHeads <= 0 || m.sq <= 0 || m.skv <= 0 {
		return m, false
	}
	m.covered = covered
	slices.Sort(m.covered)
	if m.hasMask {
		m.causal = m.sq == m.skv && squareMask(g, m.mask, m.sq) && !fromInputs(g, m.mask)
	}
	return m, true
}

// swapsLastTwo reports whether op is a Transpose exchanging its input's
// last two axes and nothing else.
func swapsLastTwo(g *Graph, id OpID) bool {
	op := &g.Ops[id]
	if op.Type != "Transpose" || len(op.Inputs) != 1 {
		return false
	}
	perm := op.Attrs["perm"].Ints
	n := len(perm)
	if n < 2 {
		return false
	}
	for i := 0; i < n-2; i++ {
		if perm[i] != int64(i) {
			return false
		}
	}
	return perm[n-2] == int64(n-1) && perm[n-1] == int64(n-2)
}

// scalar reports whether t holds one element.
func scalar(g *Graph, t TensorID) bool {
	tt := &g.Tensors[t]
	return tt.ShapeKnown && tt.Elements() == 1
}

// sameShape reports whether tensors a and b have one known shape.
func sameShape(g *Graph, a, b TensorID) bool {
	ta, tb := &g.Tensors[a], &g.Tensors[b]
	return ta.ShapeKnown && tb.ShapeKnown && slices.Equal(ta.Shape, tb.Shape)
}

// squareMask reports whether mask t ends in two axes of length s.
func squareMask(g *Graph, t TensorID, s int64) bool {
	tt := &g.Tensors[t]
	n := len(tt.Shape)
	return tt.ShapeKnown && n >= 2 && tt.Shape[n-1] == s && tt.Shape[n-2] == s
}

// fromInputs reports whether t's value depends on a graph input: its
// producers' cone reaches an Input tensor other than through ops that
// read only shapes (Shape, Size).
func fromInputs(g *Graph, t TensorID) bool {
	seen := map[TensorID]bool{}
	stack := []TensorID{t}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[x] {
			continue
		}
		seen[x] = true
		tt := &g.Tensors[x]
		if tt.Kind == Input {
			return true
		}
		if tt.Producer == NoOp {
			continue
		}
		op := &g.Ops[tt.Producer]
		if op.Type == "Shape" || op.Type == "Size" {
			continue
		}
		stack = append(stack, op.Inputs...)
	}
	return false
}
