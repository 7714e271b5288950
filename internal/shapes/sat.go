package shapes

import "math/bits"

// MaxElements bounds the element count of any inferred tensor: a shape
// beyond it (2^50 elements) is a corrupt model or a shape-arithmetic bug,
// not a workload.
const MaxElements = int64(1) << 50

// MulSat multiplies non-negative counts (dimensions, elements, FLOPs),
// saturating at MaxTotal instead of wrapping: a count that large is past
// anything CheckTotals lets through, so saturating there keeps an absurd
// shape an error and leaves int64 room for the sums built on the count.
// A negative operand (an unknown dimension) gives the plain product.
func MulSat(a, b int64) int64 {
	if a < 0 || b < 0 {
		return a * b
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo >= uint64(MaxTotal) {
		return MaxTotal
	}
	return int64(lo)
}

// AddSat adds non-negative counts, saturating at MaxTotal as MulSat does.
func AddSat(a, b int64) int64 {
	if a >= MaxTotal-b {
		return MaxTotal
	}
	return a + b
}

// Prod is the element count of shape s, saturating as MulSat does.
func Prod(s []int64) int64 {
	n := int64(1)
	for _, d := range s {
		n = MulSat(n, d)
	}
	return n
}
