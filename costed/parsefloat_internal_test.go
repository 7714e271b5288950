package costed

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestParseFloat checks parseFloat against strconv.ParseFloat.
func TestParseFloat(t *testing.T) {
	cases := []string{"0", "-0", "0.0", "1", "-1", "0.005", "0.0051", "123456789012345", "1234567890123456", "0.1", "0.3", "2.675",
		"1e5", "1E-5", "-2.5e+3", "1e400", "0.0000000000000000000001", "0.00000000000000000000001", "999999999999999.9", "100.000000000000000",
		"0.000000000000000000000000001234", "4.35", "86400000", "17976931348623157e292"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		d := r.IntN(16) + 1
		digits := make([]byte, d)
		for i := range digits {
			digits[i] = byte('0' + r.IntN(10))
		}
		if digits[0] == '0' && d > 1 {
			digits[0] = '1'
		}
		s := string(digits)
		if k := r.IntN(d + 1); k < d {
			s = s[:k+1] + "." + s[k+1:]
			if s[len(s)-1] == '.' {
				s += "0"
			}
		}
		if r.IntN(2) == 0 {
			s = "0.0000" + string(digits)
		}
		if r.IntN(4) == 0 {
			s = "-" + s
		}
		cases = append(cases, s)
	}
	for _, c := range cases {
		want, werr := strconv.ParseFloat(c, 64)
		got, err := parseFloat([]byte(c))
		if (err == nil) != (werr == nil) || math.Float64bits(got) != math.Float64bits(want) && !(math.IsNaN(got) && math.IsNaN(want)) {
			t.Fatalf("parseFloat(%q) = %v, %v; strconv: %v, %v", c, got, err, want, werr)
		}
	}
}
