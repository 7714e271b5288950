package tf

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

// maxFold bounds the size of integer tensors whose contents are tracked
// for partial evaluation (shape-feeding tensors hold a handful).
const maxFold = 4096

// maxRank bounds tensor ranks (TensorFlow's own limit is 254; real
// graphs stay under 10).
const maxRank = 254

// unknownDim marks a dimension whose size inference could not determine
// (TensorFlow writes it as -1 too).
const unknownDim = -1

// value is what inference knows about one tensor: its element type, its
// rank and dimensions (each possibly unknown) and, for small integer
// tensors, its contents. Partial shapes matter in TensorFlow.js models,
// whose weight files (holding the values of shape-feeding constants) are
// often not shipped: the rank survives and later ops recover the sizes.
type value struct {
	dtype graph.DType
	// shape holds the dimensions when ranked; unknownDim for unknown ones.
	shape  []int64
	ranked bool
	// ints holds the row-major contents of an integer or bool tensor with
	// a known shape; nil when not known.
	ints []int64
	// fromConst marks a Const node's value (a weight, not an activation).
	fromConst bool
	// count is the element count when the shape is only partly known
	// but the count is (the output of a Reshape whose target values are
	// missing keeps its input's count); 0 when unknown.
	count int64
}

// unknown returns a value of unknown shape.
func unknown(dt graph.DType) *value { return &value{dtype: dt} }

// partial returns a value of known rank and unknown dimensions.
func partial(dt graph.DType, rank int) *value {
	s := make([]int64, rank)
	for i := range s {
		s[i] = unknownDim
	}
	return &value{dtype: dt, shape: s, ranked: true}
}

// known reports whether every dimension is known.
func (v *value) known() bool {
	if v == nil || !v.ranked {
		return false
	}
	for _, d := range v.shape {
		if d < 0 {
			return false
		}
	}
	return true
}

func (v *value) rank() int {
	if v == nil || !v.ranked {
		return -1
	}
	return len(v.shape)
}

// elems is the element count of a known shape (1 for a scalar), else 0.
func (v *value) elems() int64 {
	if !v.known() {
		return 0
	}
	return shapes.Prod(v.shape)
}

// numElems is the element count: the product of a known shape, else the
// tracked count (0 when unknown).
func (v *value) numElems() int64 {
	if v.known() {
		return shapes.Prod(v.shape)
	}
	if v == nil {
		return 0
	}
	return v.count
}

// hasInts reports whether the contents are known.
func (v *value) hasInts() bool {
	return v.known() && v.ints != nil && int64(len(v.ints)) == shapes.Prod(v.shape)
}

func (v *value) String() string {
	if !v.ranked {
		return "?"
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range v.shape {
		if i > 0 {
			b.WriteByte(',')
		}
		if d < 0 {
			b.WriteByte('?')
		} else {
			b.WriteString(strconv.FormatInt(d, 10))
		}
	}
	b.WriteByte(']')
	return b.String()
}

// sameShape reports whether a and b print alike: both unranked, or of
// one rank with the same dimensions, unknown ones included.
func sameShape(a, b *value) bool {
	if !a.ranked || !b.ranked {
		return a.ranked == b.ranked
	}
	return slices.EqualFunc(a.shape, b.shape, func(x, y int64) bool { return x == y || x < 0 && y < 0 })
}

// checkShape rejects negative dimensions and absurd element counts in a
// shape meant to be fully known.
func checkShape(s []int64) error {
	n := int64(1)
	for _, d := range s {
		if d < 0 {
			return fmt.Errorf("negative dimension %d", d)
		}
		n = shapes.MulSat(n, d)
	}
	if n > shapes.MaxElements {
		return fmt.Errorf("shape %v has %d elements, more than any real tensor", s, n)
	}
	return nil
}

// broadcastDims merges two dimensions under numpy broadcasting. An
// unknown dimension against a known d > 1 yields d: the unknown side is 1
// or d either way.
func broadcastDims(a, b int64) (int64, error) {
	switch {
	case a == b:
		return a, nil
	case a == 1:
		return b, nil
	case b == 1:
		return a, nil
	case a < 0:
		return b, nil
	case b < 0:
		return a, nil
	}
	return 0, fmt.Errorf("dimensions %d and %d do not broadcast", a, b)
}

// broadcast merges two ranked shapes (numpy rules, right-aligned).
func broadcast(a, b []int64) ([]int64, error) {
	if len(a) < len(b) {
		a, b = b, a
	}
	out := shapes.Clone(a)
	off := len(a) - len(b)
	for i, d := range b {
		m, err := broadcastDims(a[off+i], d)
		if err != nil {
			return nil, fmt.Errorf("shapes %v and %v: %v", fmtShape(a), fmtShape(b), err)
		}
		out[off+i] = m
	}
	return out, nil
}

func fmtShape(s []int64) string { return (&value{shape: s, ranked: true}).String() }

// compatible reports whether a fully known shape agrees with a partial
// one wherever the partial one is known.
func compatible(full []int64, v *value) bool {
	if v == nil || !v.ranked {
		return true
	}
	if len(full) != len(v.shape) {
		return false
	}
	for i, d := range v.shape {
		if d >= 0 && d != full[i] {
			return false
		}
	}
	return true
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
