package onnx

import (
	"fmt"
	"math"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

// maxFold bounds the size of tensors whose contents are tracked for
// partial evaluation. Shape-feeding tensors hold a handful of elements;
// larger ones (attention masks) are shaped but not evaluated.
const maxFold = 4096

// value is what inference knows about one tensor: its element type, its
// shape when known and, for small tensors, its contents. Contents feed
// the shape computations of Reshape, Expand, Slice and friends, which in
// PyTorch exports are computed at run time by Shape→Gather→Concat chains.
type value struct {
	dtype graph.DType
	shape []int64
	known bool
	// ints holds the row-major contents of an integer or bool tensor;
	// floats those of a floating-point tensor. Nil when not known.
	ints   []int64
	floats []float64
}

func (v *value) rank() int { return len(v.shape) }

// elems is the element count of a known shape (1 for a scalar).
func (v *value) elems() int64 {
	if v == nil || !v.known {
		return 0
	}
	return shapes.Prod(v.shape)
}

// hasInts reports whether the contents are known as integers.
func (v *value) hasInts() bool {
	return v != nil && v.known && v.ints != nil && int64(len(v.ints)) == shapes.Prod(v.shape)
}

// hasFloats reports whether the contents are known as floats.
func (v *value) hasFloats() bool {
	return v != nil && v.known && v.floats != nil && int64(len(v.floats)) == shapes.Prod(v.shape)
}

// numbers returns the contents as float64 whatever the element type.
func (v *value) numbers() ([]float64, bool) {
	switch {
	case v.hasFloats():
		return v.floats, true
	case v.hasInts():
		f := make([]float64, len(v.ints))
		for i, x := range v.ints {
			f[i] = float64(x)
		}
		return f, true
	}
	return nil, false
}

// intsOf returns the contents as integers, converting floats by
// truncation (as Cast does).
func (v *value) intsOf() ([]int64, bool) {
	switch {
	case v.hasInts():
		return v.ints, true
	case v.hasFloats():
		out := make([]int64, len(v.floats))
		for i, f := range v.floats {
			if math.IsNaN(f) || math.Abs(f) > 1<<62 {
				return nil, false
			}
			out[i] = int64(f)
		}
		return out, true
	}
	return nil, false
}

func isIntType(d graph.DType) bool {
	switch d {
	case graph.Int8, graph.Int16, graph.Int32, graph.Int64, graph.Uint8, graph.Uint16,
		graph.Uint32, graph.Uint64, graph.Bool, graph.Int4, graph.Uint4:
		return true
	}
	return false
}

// checkShape rejects negative dimensions and absurd sizes.
func checkShape(s []int64) error {
	for i, d := range s {
		if d < 0 {
			return fmt.Errorf("dimension %d of shape %v is negative", i, s)
		}
	}
	if shapes.Prod(s) > shapes.MaxElements {
		return fmt.Errorf("shape %v has more than 2^50 elements", s)
	}
	return nil
}

// broadcast applies numpy's multidirectional broadcasting to two shapes.
func broadcast(a, b []int64) ([]int64, error) {
	n := max(len(a), len(b))
	out := make([]int64, n)
	for i := 0; i < n; i++ {
		da, db := int64(1), int64(1)
		if j := i - (n - len(a)); j >= 0 {
			da = a[j]
		}
		if j := i - (n - len(b)); j >= 0 {
			db = b[j]
		}
		switch {
		case da == db, db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			return nil, fmt.Errorf("shapes %v and %v do not broadcast (axis %d: %d vs %d)", a, b, i, da, db)
		}
	}
	return out, nil
}

// shapeValue returns a 1-D int64 value holding s, the form of a Shape
// output.
func shapeValue(s []int64) *value {
	return &value{dtype: graph.Int64, shape: []int64{int64(len(s))}, known: true, ints: shapes.Clone(s)}
}
