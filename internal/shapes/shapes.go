// Package shapes holds the tensor-shape arithmetic every importer's shape
// inference shares.
package shapes

import "fmt"

// NormAxis resolves a possibly negative axis against rank r, as ONNX and
// TensorFlow both count them (-1 is the last axis).
func NormAxis(a int64, r int) (int, error) {
	if a < -int64(r) || a >= int64(r) {
		return 0, fmt.Errorf("axis %d is out of range for rank %d", a, r)
	}
	if a < 0 {
		a += int64(r)
	}
	return int(a), nil
}

// BroadcastIndex maps flat index idx of the broadcast shape out to the
// flat index of an operand of shape s (numpy broadcasting: s aligned to
// the right, axes of size 1 repeated).
func BroadcastIndex(idx int64, out, s []int64) int64 {
	var r, stride int64 = 0, 1
	off := len(out) - len(s)
	for i := len(out) - 1; i >= 0; i-- {
		c := idx % out[i]
		idx /= out[i]
		if j := i - off; j >= 0 {
			if s[j] != 1 {
				r += c * stride
			}
			stride *= s[j]
		}
	}
	return r
}

// Clone copies a shape, never returning nil for an empty one (a scalar's
// shape is empty, not absent).
func Clone(s []int64) []int64 { return append([]int64{}, s...) }
