package shapes

import (
	"slices"
	"testing"
)

func TestNormAxis(t *testing.T) {
	for _, tc := range []struct {
		a    int64
		r    int
		want int
		ok   bool
	}{{0, 3, 0, true}, {2, 3, 2, true}, {-1, 3, 2, true}, {-3, 3, 0, true}, {3, 3, 0, false}, {-4, 3, 0, false}, {0, 0, 0, false}} {
		got, err := NormAxis(tc.a, tc.r)
		if (err == nil) != tc.ok || tc.ok && got != tc.want {
			t.Errorf("NormAxis(%d, %d) = %d, %v", tc.a, tc.r, got, err)
		}
	}
}

func TestBroadcastIndex(t *testing.T) {
	// out 2x3; s = [3] repeats along axis 0, s = [2,1] along axis 1.
	out := []int64{2, 3}
	var row, col []int64
	for i := int64(0); i < 6; i++ {
		row = append(row, BroadcastIndex(i, out, []int64{3}))
		col = append(col, BroadcastIndex(i, out, []int64{2, 1}))
	}
	if !slices.Equal(row, []int64{0, 1, 2, 0, 1, 2}) || !slices.Equal(col, []int64{0, 0, 0, 1, 1, 1}) {
		t.Errorf("row %v, col %v", row, col)
	}
	if c := Clone(nil); c == nil || len(c) != 0 {
		t.Error("Clone(nil) must be an empty, non-nil shape")
	}
}
