package tf

import (
	"fmt"

	"github.com/opplace/opplace/internal/shapes"
)

// inferStridedSlice follows TensorFlow's StridedSlice: begin, end and
// strides index a sparse spec whose bit masks say which entries ignore
// their begin or end, which one is the ellipsis (all axes it covers kept
// whole), which insert a new axis and which shrink an axis away (the
// entry is an index, not a range).
func inferStridedSlice(n *node) error {
	x := n.input(0)
	if x == nil || !x.ranked {
		return errPartial
	}
	begin, err := n.ints(1)
	if err != nil {
		return err
	}
	end, err := n.ints(2)
	if err != nil {
		return err
	}
	strides, err := n.ints(3)
	if err != nil {
		return err
	}
	if len(begin) != len(end) || len(begin) != len(strides) {
		return fmt.Errorf("begin %v, end %v and strides %v differ in length", begin, end, strides)
	}
	bm, em := n.attrInt("begin_mask", 0), n.attrInt("end_mask", 0)
	elm, nam, sam := n.attrInt("ellipsis_mask", 0), n.attrInt("new_axis_mask", 0), n.attrInt("shrink_axis_mask", 0)
	bit := func(m int64, i int) bool { return m&(1<<uint(i)) != 0 }
	if elm&(elm-1) != 0 {
		return fmt.Errorf("ellipsis_mask %d sets more than one ellipsis", elm)
	}
	rank := len(x.shape)
	var out []int64
	// sel[i] lists, per input axis, the indices taken (for folding 1-D
	// contents); nil when not tracked.
	var sel []int64
	fold := x.hasInts() && rank == 1
	dim := 0
	full := func() {
		out = append(out, x.shape[dim])
		if fold {
			for k := int64(0); k < x.shape[0]; k++ {
				sel = append(sel, k)
			}
		}
		dim++
	}
	sawEllipsis := false
	for i := range begin {
		switch {
		case bit(elm, i):
			sawEllipsis = true
			after := 0
			for j := i + 1; j < len(begin); j++ {
				if !bit(nam, j) {
					after++
				}
			}
			for dim < rank-after {
				full()
			}
		case bit(nam, i):
			out = append(out, 1)
		default:
			if dim >= rank {
				return fmt.Errorf("slice spec has more entries than %s has axes", x)
			}
			s := strides[i]
			if s == 0 {
				return fmt.Errorf("stride %d is zero", i)
			}
			d := x.shape[dim]
			if bit(sam, i) {
				b := begin[i]
				if d >= 0 {
					if b < 0 {
						b += d
					}
					if b < 0 || b >= d {
						return fmt.Errorf("index %d is out of range for axis %d of %s", begin[i], dim, x)
					}
				}
				if fold {
					sel = append(sel, b)
				}
				dim++
				continue
			}
			if d < 0 {
				out = append(out, unknownDim)
				fold = false
				dim++
				continue
			}
			b, e := sliceBounds(begin[i], end[i], s, d, bit(bm, i), bit(em, i))
			var size int64
			if s > 0 {
				size = max(0, ceilDivSigned(e-b, s))
			} else {
				size = max(0, ceilDivSigned(b-e, -s))
			}
			out = append(out, size)
			if fold {
				for k := int64(0); k < size; k++ {
					sel = append(sel, b+k*s)
				}
			}
			dim++
		}
	}
	if !sawEllipsis {
		for dim < rank {
			full()
		}
	}
	if out == nil {
		out = []int64{}
	}
	v := &value{dtype: n.dt(), shape: out, ranked: true}
	if fold && v.known() && int64(len(sel)) == shapes.Prod(out) {
		v.ints = make([]int64, len(sel))
		for k, idx := range sel {
			v.ints[k] = x.ints[idx]
		}
	}
	return n.setValue(0, v)
}

// sliceBounds normalises one axis's begin and end for a stride s over a
// dimension of size d, clamping like Python slicing.
func sliceBounds(b, e, s, d int64, bMask, eMask bool) (int64, int64) {
	norm := func(x, lo, hi int64) int64 {
		if x < 0 {
			x += d
		}
		return min(max(x, lo), hi)
	}
	if s > 0 {
		if bMask {
			b = 0
		} else {
			b = norm(b, 0, d)
		}
		if eMask {
			e = d
		} else {
			e = norm(e, 0, d)
		}
		return b, e
	}
	if bMask {
		b = d - 1
	} else {
		b = norm(b, -1, d-1)
	}
	if eMask {
		e = -1
	} else {
		e = norm(e, -1, d-1)
	}
	return b, e
}
