package tf

import (
	"fmt"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

// meet merges two descriptions of one tensor: a rank known to either,
// dimensions known to either, an element count known to either, then
// completes the shape from the count (see complete). ok is false when
// they contradict each other. The result takes a's element type and
// contents (b's when a has none).
func meet(a, b *value) (*value, bool) {
	if a == nil {
		a = &value{}
	}
	if b == nil {
		b = &value{}
	}
	out := &value{dtype: a.dtype, ranked: a.ranked || b.ranked, fromConst: a.fromConst}
	if out.dtype == graph.Undefined {
		out.dtype = b.dtype
	}
	switch {
	case a.ranked && b.ranked:
		if len(a.shape) != len(b.shape) {
			return a, false
		}
		out.shape = shapes.Clone(a.shape)
		for i, d := range b.shape {
			switch {
			case d < 0:
			case out.shape[i] < 0:
				out.shape[i] = d
			case out.shape[i] != d:
				return a, false
			}
		}
	case a.ranked:
		out.shape = shapes.Clone(a.shape)
	case b.ranked:
		out.shape = shapes.Clone(b.shape)
	}
	ca, cb := a.numElems(), b.numElems()
	switch {
	case ca > 0 && cb > 0 && ca != cb:
		return a, false
	case ca > 0:
		out.count = ca
	default:
		out.count = cb
	}
	if !complete(out) {
		return a, false
	}
	switch {
	case a.hasInts() && out.known():
		out.ints = shapes.Clone(a.ints)
	case b.hasInts() && out.known():
		out.ints = shapes.Clone(b.ints)
	}
	if out.known() {
		out.count = 0
	}
	return out, true
}

// complete fills the unknown dimensions of a ranked value whose element
// count is known, where the count decides them: a single unknown
// dimension is the count over the product of the others, and when the
// known ones already make up the count every unknown one is 1. It
// reports false when the count contradicts the known dimensions.
func complete(v *value) bool {
	if !v.ranked || v.count <= 0 || v.known() {
		return true
	}
	p, unknowns, at := int64(1), 0, -1
	for i, d := range v.shape {
		if d < 0 {
			unknowns++
			at = i
			continue
		}
		p = shapes.MulSat(p, d)
	}
	if p == 0 || v.count%p != 0 {
		return false
	}
	switch {
	case unknowns == 1:
		v.shape[at] = v.count / p
	case v.count == p:
		for i, d := range v.shape {
			if d < 0 {
				v.shape[i] = 1
			}
		}
	}
	return true
}

// moreThan reports whether a tells more about a tensor's shape than b: a
// rank b lacks, a dimension b lacks, or a count b lacks.
func moreThan(a, b *value) bool {
	if b.known() {
		return false
	}
	if a.ranked != b.ranked {
		return a.ranked
	}
	if a.known() {
		return true
	}
	for i, d := range a.shape {
		if d >= 0 && b.shape[i] < 0 {
			return true
		}
	}
	return a.count > 0 && b.count == 0
}

// common is what every candidate shape agrees on: the rank when they
// share it, the dimensions equal in all, the count when they share it.
func common(cands []*value) *value {
	out := &value{ranked: true, count: cands[0].numElems()}
	r := cands[0].rank()
	for _, c := range cands {
		if c.rank() != r {
			out.ranked = false
		}
		if c.numElems() != out.count {
			out.count = 0
		}
	}
	if !out.ranked || r < 0 {
		return &value{count: out.count}
	}
	out.shape = shapes.Clone(cands[0].shape)
	for _, c := range cands[1:] {
		for i, d := range c.shape {
			if d != out.shape[i] {
				out.shape[i] = unknownDim
			}
		}
	}
	return out
}

// checkPartial rejects a partial shape no real tensor has: a rank or a
// product of known dimensions beyond the limits.
func checkPartial(v *value) error {
	if v.rank() > maxRank {
		return fmt.Errorf("rank %d is beyond any real tensor", v.rank())
	}
	n := int64(1)
	for _, d := range v.shape {
		if d >= 0 {
			n = shapes.MulSat(n, d)
		}
	}
	if n > shapes.MaxElements || v.count > shapes.MaxElements {
		return fmt.Errorf("shape %s has more elements than any real tensor", v)
	}
	return nil
}
