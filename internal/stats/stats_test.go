package stats

import (
	"math"
	"testing"
)

func TestQuantile(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		q    float64
		want float64
	}{
		{nil, 0.5, 0},
		{[]float64{7}, 0.9, 7},
		{[]float64{3, 1, 2}, 0.5, 2},
		{[]float64{4, 1, 3, 2}, 0.5, 2.5},
		{[]float64{10, 0}, 0.1, 1},
		{[]float64{5, 1, 9}, 0, 1},
		{[]float64{5, 1, 9}, 1, 9},
		{[]float64{5, 1, 3, 2, 4}, 0.1, 1.4},
		{[]float64{5, 1, 3, 2, 4}, 0.9, 4.6},
	} {
		xs := append([]float64(nil), tc.xs...)
		if got := Quantile(tc.xs, tc.q); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Quantile(%v, %g) = %g, want %g", tc.xs, tc.q, got, tc.want)
		}
		for i := range xs {
			if xs[i] != tc.xs[i] {
				t.Fatalf("Quantile reordered its input: %v", tc.xs)
			}
		}
	}
	if got := Median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("Median = %g, want 2.5", got)
	}
}
