package shapes

import (
	"math"
	"testing"
)

func TestSaturating(t *testing.T) {
	for _, tc := range []struct {
		name     string
		a, b     int64
		mul, add int64
	}{
		{"small", 3, 4, 12, 7},
		{"zero", 0, math.MaxInt64, 0, MaxTotal},
		{"at the cap", MaxTotal, 1, MaxTotal, MaxTotal},
		{"just under", MaxTotal / 2, 2, MaxTotal, MaxTotal/2 + 2},
		{"past int64", math.MaxInt64, math.MaxInt64, MaxTotal, MaxTotal},
		{"unknown dimension", -1, 6, -6, 5},
	} {
		if got := MulSat(tc.a, tc.b); got != tc.mul {
			t.Errorf("%s: MulSat(%d, %d) = %d, want %d", tc.name, tc.a, tc.b, got, tc.mul)
		}
		if got := AddSat(tc.a, tc.b); got != tc.add {
			t.Errorf("%s: AddSat(%d, %d) = %d, want %d", tc.name, tc.a, tc.b, got, tc.add)
		}
	}
	if got := Prod([]int64{1 << 20, 1 << 20, 1 << 20}); got != MaxTotal {
		t.Errorf("Prod of 2^60 elements = %d, want the cap %d", got, MaxTotal)
	}
	if got := Prod(nil); got != 1 {
		t.Errorf("Prod of a scalar's shape = %d, want 1", got)
	}
}
