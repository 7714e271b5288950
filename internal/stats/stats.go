// Package stats holds the order statistics opplace reports of repeated
// measurements: one definition, so a profile's p10 and ONNX Runtime's p10
// of the same runs agree.
package stats

import (
	"math"
	"slices"
)

// Quantile is the q-quantile of xs by linear interpolation between order
// statistics (position q·(n−1), as numpy's default); 0 for none. xs is
// not modified.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// Median is Quantile(xs, 0.5).
func Median(xs []float64) float64 { return Quantile(xs, 0.5) }
