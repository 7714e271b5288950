package tf

import (
	"fmt"

	"github.com/opplace/opplace/internal/shapes"
)

// Assumptions: what settle (guess.go) falls back on when deduction
// leaves shapes unknown. Each is recorded in converter.assumed, kept only
// if a strict inference run finds no contradiction, and named in a
// warning.

// isBinaryBroadcast reports whether op is a broadcasting op of two
// operands, which the same-operand assumption applies to.
func isBinaryBroadcast(op string) bool {
	d := registry[op]
	return d != nil && d.bcast && op != "Select" && op != "SelectV2" && op != "AddN" && op != "AccumulateNV2"
}

// assumeSameOperands: two computed tensors (not weights) of one rank
// meeting in a broadcasting op, one of known size d > 1 on an axis where
// the other's size is unknown, are taken to be the same size there — the
// other could be 1, but adding activations of one rank almost always
// means a residual connection. Weights are excluded: broadcasting a bias
// or scale against activations is common. It reports whether it assumed
// anything that held.
func (c *converter) assumeSameOperands(tried map[string]bool) (bool, error) {
	type hint struct {
		name string
		v    *value
	}
	var hints []hint
	for _, i := range c.order {
		tn := &c.nodes[i]
		if len(tn.ins) != 2 || !isBinaryBroadcast(tn.def.GetOp()) {
			continue
		}
		a, b := c.vals[tn.ins[0].node][tn.ins[0].out], c.vals[tn.ins[1].node][tn.ins[1].out]
		if a.fromConst || b.fromConst || !a.ranked || !b.ranked || len(a.shape) != len(b.shape) || a.known() && b.known() {
			continue
		}
		for side, r := range tn.ins {
			x, y := a, b
			if side == 1 {
				x, y = b, a
			}
			s := partial(0, len(x.shape)).shape
			any := false
			for k, d := range x.shape {
				if d < 0 && y.shape[k] >= 0 {
					s[k] = y.shape[k]
					any = true
				}
			}
			name := tensorName(c.nodes[r.node].def.GetName(), r.out)
			if !any || isSource(c.nodes[r.node].def.GetOp()) || tried["same:"+name] {
				continue
			}
			hints = append(hints, hint{name, &value{shape: s, ranked: true}})
		}
	}
	if len(hints) == 0 {
		return false, nil
	}
	apply := func(hs []hint) bool {
		saved := make(map[string]*value, len(hs))
		for _, h := range hs {
			saved[h.name] = c.assumed[h.name]
			m, ok := meet(c.assumed[h.name], h.v)
			if !ok {
				m = h.v
			}
			c.assumed[h.name] = m
		}
		if c.tryStrict() {
			return true
		}
		for name, v := range saved {
			if v == nil {
				delete(c.assumed, name)
			} else {
				c.assumed[name] = v
			}
		}
		return false
	}
	// All at once (the usual case: independent residual adds), else the
	// first alone, so that one contradiction does not sink the others.
	// A tensor is named once however many rounds add to it.
	note := func(name string) {
		if !tried["noted:"+name] {
			tried["noted:"+name] = true
			c.assumedSame = append(c.assumedSame, name)
		}
	}
	if apply(hints) {
		for _, h := range hints {
			note(h.name)
		}
		return true, nil
	}
	if apply(hints[:1]) {
		note(hints[0].name)
	} else {
		tried["same:"+hints[0].name] = true
	}
	return true, nil
}

// assumeReshape settles the first Reshape, in graph order, whose input
// is known but whose output deduction left partly unknown (its target's
// values are missing): among the shapes its consumers allow (or, when
// they say nothing, those keeping some of the input's leading and
// trailing dimensions and making up its element count), it takes the
// single one keeping the most leading plus trailing input dimensions,
// the way reshapes usually merge or split axes in the middle
// ([N,H,W,C] → [N,H·W,C]). A tie settles nothing. It reports whether
// it assumed a shape that held.
func (c *converter) assumeReshape(tried map[string]bool) (bool, error) {
	for _, i := range c.order {
		tn := &c.nodes[i]
		if tn.def.GetOp() != "Reshape" || len(tn.ins) != 2 {
			continue
		}
		out := c.vals[i][0]
		x := c.vals[tn.ins[0].node][tn.ins[0].out]
		name := tn.def.GetName()
		if out.known() || !out.ranked || !x.known() || tried["reshape:"+name] {
			continue
		}
		cur := &value{shape: out.shape, ranked: true, count: x.elems()}
		var cands []*value
		for _, cd := range c.choices[name] {
			if m, ok := meet(cur, cd); ok && m.known() {
				cands = append(cands, m)
			}
		}
		if len(cands) == 0 {
			cands = reshapeCandidates(x.shape, cur)
		}
		best := preferred(x.shape, cands)
		if best == nil {
			continue
		}
		c.assumed[name] = best
		if !c.tryStrict() {
			delete(c.assumed, name)
			tried["reshape:"+name] = true
			continue
		}
		c.assumedReshape = append(c.assumedReshape, fmt.Sprintf("%s=%s", name, best))
		return true, nil
	}
	return false, nil
}

// reshapeCandidates lists the full shapes of out's rank, agreeing with
// its known dimensions and count, that copy p leading and s trailing
// dimensions of the input shape in and leave one dimension for the count
// to decide.
func reshapeCandidates(in []int64, out *value) []*value {
	r := len(out.shape)
	var cands []*value
	for p := 0; p <= min(r, len(in)); p++ {
		for s := 0; p+s <= min(r, len(in)); s++ {
			v := &value{shape: shapes.Clone(out.shape), ranked: true, count: out.count}
			ok := true
			for k := range p {
				if d := v.shape[k]; d >= 0 && d != in[k] {
					ok = false
				}
				v.shape[k] = in[k]
			}
			for k := range s {
				at := r - 1 - k
				if d := v.shape[at]; d >= 0 && d != in[len(in)-1-k] {
					ok = false
				}
				v.shape[at] = in[len(in)-1-k]
			}
			if ok && complete(v) && v.known() && shapes.Prod(v.shape) == out.count {
				v.count = 0
				cands = append(cands, v)
			}
		}
	}
	return cands
}

// keptDims is how many leading (p) and trailing (s) dimensions out
// shares with in (never counting one dimension twice).
func keptDims(in, out []int64) (p, s int) {
	n := min(len(in), len(out))
	for p < n && in[p] == out[p] {
		p++
	}
	for s < n-p && in[len(in)-1-s] == out[len(out)-1-s] {
		s++
	}
	return p, s
}

// preferred is the candidate shape keeping the most of in's leading and
// trailing dimensions, and of those the one keeping both ends best (the
// batch and channel axes around merged or split middle ones); nil when
// there is none or two different shapes tie.
func preferred(in []int64, cands []*value) *value {
	var best *value
	bestKept, bestEnds, tie := -1, -1, false
	for _, cd := range cands {
		p, s := keptDims(in, cd.shape)
		switch kept, ends := p+s, min(p, s); {
		case kept > bestKept || kept == bestKept && ends > bestEnds:
			best, bestKept, bestEnds, tie = cd, kept, ends, false
		case kept == bestKept && ends == bestEnds && cd.String() != best.String():
			tie = true
		}
	}
	if tie {
		return nil
	}
	return best
}
