package tf

import (
	"github.com/opplace/opplace/internal/shapes"
)

// Backward deduction: what an op's outputs (known from the signature or
// from their own consumers) say about its inputs. Every rule here is a
// deduction, never a guess: it returns for each input either nothing or
// the shapes the input can have given the op's semantics. One candidate
// is a fact; several are alternatives, of which only what they all agree
// on is taken (the rest may later be chosen by an assumption, see
// assume.go). A rule sees inputs and outputs as partial values: unknown
// dimensions are unknownDim.

// backRule deduces input shapes from what is known around an op.
type backRule func(n *node) [][]*value

var backRules = map[string]backRule{}

func init() {
	for _, op := range []string{"Reshape"} {
		backRules[op] = backReshape
	}
	backRules["Unpack"] = backUnpack
	backRules["Pack"] = backPack
	backRules["ExpandDims"] = backExpandDims
	backRules["Squeeze"] = backSqueeze
	for _, op := range []string{"ArgMax", "ArgMin", "Mean", "Sum", "Max", "Min", "Prod", "All", "Any", "EuclideanNorm"} {
		backRules[op] = backReduce
	}
	backRules["ConcatV2"] = backConcat
	backRules["GatherNd"] = backGatherNd
	backRules["Transpose"] = backTranspose
	for _, op := range []string{"Pad", "PadV2", "MirrorPad"} {
		backRules[op] = backPad
	}
	backRules["IdentityN"] = backIdentityN
	backRules["AddN"] = backAddN
	backRules["AccumulateNV2"] = backAddN
}

// backRuleFor returns op's rule: its own, else the generic one for
// shape-preserving or broadcasting ops, else nil.
func backRuleFor(op string) backRule {
	if r := backRules[op]; r != nil {
		return r
	}
	d := registry[op]
	switch {
	case d == nil:
		return nil
	case d.same:
		return backSame
	case d.bcast && op != "Select":
		return backBroadcast
	}
	return nil
}

// one wraps a single deduced value for input i of n inputs.
func one(n, i int, v *value) [][]*value {
	out := make([][]*value, n)
	if i < n {
		out[i] = []*value{v}
	}
	return out
}

func without(s []int64, k int) []int64 {
	return append(shapes.Clone(s[:k]), s[k+1:]...)
}

func insertAt(s []int64, k int, d int64) []int64 {
	return append(append(shapes.Clone(s[:k]), d), s[k:]...)
}

// outVal is output i, never nil.
func (n *node) outVal(i int) *value {
	if i < len(n.out) && n.out[i] != nil {
		return n.out[i]
	}
	return &value{}
}

// backSame: the first input has the first output's shape (elementwise
// unary ops, Cast, BiasAdd, Identity).
func backSame(n *node) [][]*value {
	o := n.outVal(0)
	return one(len(n.in), 0, &value{shape: shapes.Clone(o.shape), ranked: o.ranked, count: o.numElems()})
}

// backBroadcast: numpy broadcasting, right-aligned. Where the output has
// size 1, every input has size 1. Where it has d > 1, an input must
// supply d unless another input already does (or might: an unknown
// size): if every other input there is 1 or absent, this one is d.
func backBroadcast(n *node) [][]*value {
	o := n.outVal(0)
	res := make([][]*value, len(n.in))
	if !o.ranked {
		return res
	}
	R := len(o.shape)
	for j, x := range n.in {
		if x == nil || !x.ranked || len(x.shape) > R || x.known() {
			continue
		}
		s := partial(0, len(x.shape)).shape
		off := R - len(x.shape)
		for k := range s {
			d := o.shape[off+k]
			switch {
			case d == 1:
				s[k] = 1
			case d > 1 && othersAreOne(n.in, j, off+k, R):
				s[k] = d
			}
		}
		res[j] = []*value{{shape: s, ranked: true}}
	}
	return res
}

// othersAreOne reports whether every input but j has size 1 at output
// position pos (or does not reach it).
func othersAreOne(in []*value, j, pos, R int) bool {
	for i, y := range in {
		if i == j {
			continue
		}
		if y == nil || !y.ranked {
			return false
		}
		k := pos - (R - len(y.shape))
		if k >= 0 && y.shape[k] != 1 {
			return false
		}
	}
	return true
}

// backAddN: AddN does not broadcast; every input has the output's shape.
func backAddN(n *node) [][]*value {
	o := n.outVal(0)
	res := make([][]*value, len(n.in))
	for i := range res {
		res[i] = []*value{{shape: shapes.Clone(o.shape), ranked: o.ranked, count: o.numElems()}}
	}
	return res
}

// backReshape: a reshape keeps the element count.
func backReshape(n *node) [][]*value {
	if c := n.outVal(0).numElems(); c > 0 {
		return one(len(n.in), 0, &value{count: c})
	}
	return nil
}

// backUnpack: the input is any output's shape with num inserted at axis
// (the outputs all share one shape).
func backUnpack(n *node) [][]*value {
	base := &value{}
	for _, o := range n.out {
		m, ok := meet(base, o)
		if !ok {
			return nil
		}
		base = m
	}
	if !base.ranked {
		return nil
	}
	ax, err := shapes.NormAxis(n.attrInt("axis", 0), len(base.shape)+1)
	if err != nil {
		return nil
	}
	return one(len(n.in), 0, &value{shape: insertAt(base.shape, ax, int64(len(n.out))), ranked: true})
}

// backPack: every input is the output without the packed axis, and all
// inputs share one shape (so a constant sibling shapes a computed one).
func backPack(n *node) [][]*value {
	base := &value{}
	o := n.outVal(0)
	if o.ranked && len(o.shape) > 0 {
		if ax, err := shapes.NormAxis(n.attrInt("axis", 0), len(o.shape)); err == nil {
			base = &value{shape: without(o.shape, ax), ranked: true}
		}
	}
	for _, x := range n.in {
		m, ok := meet(base, &value{shape: x.shape, ranked: x.ranked, count: x.numElems()})
		if !ok {
			return nil
		}
		base = m
	}
	res := make([][]*value, len(n.in))
	for i := range res {
		res[i] = []*value{base}
	}
	return res
}

// backExpandDims: the input is the output without the inserted axis; when
// the axis is unknown, without any axis that may be the inserted 1.
func backExpandDims(n *node) [][]*value {
	o := n.outVal(0)
	if !o.ranked || len(o.shape) == 0 {
		return nil
	}
	if a, err := n.ints(1); err == nil && len(a) == 1 {
		ax, err := shapes.NormAxis(a[0], len(o.shape))
		if err != nil {
			return nil
		}
		return one(len(n.in), 0, &value{shape: without(o.shape, ax), ranked: true})
	}
	var cands []*value
	for k, d := range o.shape {
		if d == 1 || d < 0 {
			cands = append(cands, &value{shape: without(o.shape, k), ranked: true})
		}
	}
	res := make([][]*value, len(n.in))
	res[0] = cands
	return res
}

// backSqueeze: with explicit squeeze_dims the input is the output with
// 1s put back.
func backSqueeze(n *node) [][]*value {
	o := n.outVal(0)
	dims := n.attrInts("squeeze_dims")
	if len(dims) == 0 {
		dims = n.attrInts("axis")
	}
	if !o.ranked || len(dims) == 0 {
		return nil
	}
	r := len(o.shape) + len(dims)
	drop := make([]bool, r)
	for _, a := range dims {
		ax, err := shapes.NormAxis(a, r)
		if err != nil || drop[ax] {
			return nil
		}
		drop[ax] = true
	}
	s, k := make([]int64, r), 0
	for i := range s {
		if drop[i] {
			s[i] = 1
			continue
		}
		s[i] = o.shape[k]
		k++
	}
	return one(len(n.in), 0, &value{shape: s, ranked: true})
}

// backReduce: ArgMax/ArgMin and reductions. Without keep_dims the input
// is the output with the reduced axes put back (unknown sizes); with it,
// the output's shape with the reduced axes unknown. An unknown scalar
// axis makes each position a candidate.
func backReduce(n *node) [][]*value {
	o := n.outVal(0)
	if !o.ranked {
		return nil
	}
	keep := n.attrBool("keep_dims")
	res := make([][]*value, len(n.in))
	axes, err := n.ints(1)
	if err == nil {
		uniq := map[int64]bool{}
		r := len(o.shape)
		if !keep {
			for _, a := range axes {
				uniq[a] = true
			}
			r += len(uniq) // negative and positive spellings of one axis are rare
		}
		drop := make([]bool, r)
		for _, a := range axes {
			ax, err := shapes.NormAxis(a, r)
			if err != nil {
				return nil
			}
			drop[ax] = true
		}
		s, k := make([]int64, r), 0
		for i := range s {
			switch {
			case drop[i]:
				s[i] = unknownDim
				if !keep {
					continue
				}
				k++
			default:
				if k >= len(o.shape) {
					return nil
				}
				s[i] = o.shape[k]
				k++
			}
		}
		res[0] = []*value{{shape: s, ranked: true}}
		return res
	}
	if idx := n.input(1); idx == nil || !idx.known() || shapes.Prod(idx.shape) != 1 {
		return nil
	}
	if keep {
		for k, d := range o.shape {
			if d == 1 || d < 0 {
				s := shapes.Clone(o.shape)
				s[k] = unknownDim
				res[0] = append(res[0], &value{shape: s, ranked: true})
			}
		}
		return res
	}
	for k := 0; k <= len(o.shape); k++ {
		res[0] = append(res[0], &value{shape: insertAt(o.shape, k, unknownDim), ranked: true})
	}
	return res
}

// backConcat: off the concatenation axis every input has the output's
// sizes; on it, an input whose size is the only unknown one is the
// output's minus the others'. An unknown axis is deduced when exactly
// one position has an input size that differs from the output's.
func backConcat(n *node) [][]*value {
	if len(n.in) < 2 {
		return nil
	}
	vals := n.in[:len(n.in)-1]
	o := n.outVal(0)
	if !o.ranked || len(o.shape) == 0 {
		return nil
	}
	R := len(o.shape)
	axis := -1
	if a, err := n.ints(len(n.in) - 1); err == nil && len(a) == 1 {
		ax, err := shapes.NormAxis(a[0], R)
		if err != nil {
			return nil
		}
		axis = ax
	} else {
		for k := range R {
			for _, v := range vals {
				if v.ranked && len(v.shape) == R && v.shape[k] >= 0 && o.shape[k] >= 0 && v.shape[k] != o.shape[k] {
					if axis >= 0 && axis != k {
						return nil
					}
					axis = k
				}
			}
		}
	}
	if axis < 0 {
		return nil
	}
	res := make([][]*value, len(n.in))
	missing, sum := -1, int64(0)
	for i, v := range vals {
		if v.ranked && len(v.shape) != R {
			return nil // inconsistent ranks: forward inference reports it
		}
		if !v.ranked || v.shape[axis] < 0 {
			if missing >= 0 {
				missing = -2
			} else if missing == -1 {
				missing = i
			}
			continue
		}
		sum += v.shape[axis]
	}
	for i := range vals {
		s := shapes.Clone(o.shape)
		s[axis] = unknownDim
		if i == missing && o.shape[axis] >= 0 && o.shape[axis] >= sum {
			s[axis] = o.shape[axis] - sum
		}
		res[i] = []*value{{shape: s, ranked: true}}
	}
	return res
}

// backGatherNd: the output is indices.shape[:-1] + params.shape[q:]
// where q = indices.shape[-1], so params' trailing sizes are the
// output's.
func backGatherNd(n *node) [][]*value {
	idx := n.input(1)
	o := n.outVal(0)
	if idx == nil || !idx.ranked || len(idx.shape) == 0 || !o.ranked || n.attrInt("batch_dims", 0) != 0 {
		return nil
	}
	m := len(idx.shape)
	q := idx.shape[m-1]
	if q < 0 || q > maxRank || len(o.shape) < m-1 {
		return nil
	}
	tail := o.shape[m-1:]
	s := append(partial(0, int(q)).shape, tail...)
	return one(len(n.in), 0, &value{shape: s, ranked: true})
}

// backTranspose: with a known permutation, input axis perm[i] is output
// axis i.
func backTranspose(n *node) [][]*value {
	o := n.outVal(0)
	perm, err := n.ints(1)
	if err != nil || !o.ranked || len(perm) != len(o.shape) {
		return nil
	}
	s := partial(0, len(perm)).shape
	for i, p := range perm {
		ax, err := shapes.NormAxis(p, len(perm))
		if err != nil {
			return nil
		}
		s[ax] = o.shape[i]
	}
	return one(len(n.in), 0, &value{shape: s, ranked: true})
}

// backPad: with known paddings the input is the output less them.
func backPad(n *node) [][]*value {
	o := n.outVal(0)
	pads, err := n.ints(1)
	if err != nil || !o.ranked || len(pads) != 2*len(o.shape) {
		return nil
	}
	s := shapes.Clone(o.shape)
	for i := range s {
		if s[i] >= 0 {
			s[i] -= pads[2*i] + pads[2*i+1]
			if s[i] < 0 {
				return nil
			}
		}
	}
	return one(len(n.in), 0, &value{shape: s, ranked: true})
}

// backIdentityN: input i is output i.
func backIdentityN(n *node) [][]*value {
	res := make([][]*value, len(n.in))
	for i := range res {
		o := n.outVal(i)
		res[i] = []*value{{shape: shapes.Clone(o.shape), ranked: o.ranked, count: o.numElems()}}
	}
	return res
}
