package placer

import (
	"math"
	"testing"
)

// TestUsageMatchesBruteForce replays random changes, many at repeated
// instants, and checks every level and peak against a sum over all
// changes.
func TestUsageMatchesBruteForce(t *testing.T) {
	type change struct {
		at    float64
		delta int64
	}
	levelAt := func(cs []change, at float64) int64 {
		var s int64
		for _, c := range cs {
			if c.at <= at {
				s += c.delta
			}
		}
		return s
	}
	peakOf := func(cs []change, from, to float64) int64 {
		p := levelAt(cs, from)
		for _, c := range cs {
			if c.at > from && c.at < to {
				p = max(p, levelAt(cs, c.at))
			}
		}
		return p
	}
	for seed := uint32(1); seed <= 10; seed++ {
		r := seed
		next := func() uint32 { r = r*1664525 + 1013904223; return r >> 8 }
		u := newUsage()
		var cs []change
		for i := 0; i < 600; i++ {
			c := change{float64(next()%200) / 4, int64(next()%2001) - 1000}
			u.add(c.at, c.delta)
			cs = append(cs, c)
			from := float64(next()%220)/4 - 2
			to := from + float64(next()%80)/4
			if next()%8 == 0 {
				to = math.Inf(1)
			}
			if got, want := u.level(from), levelAt(cs, from); got != want {
				t.Fatalf("seed %d step %d: level(%g) = %d, want %d", seed, i, from, got, want)
			}
			if got, want := u.peak(from, to), peakOf(cs, from, to); got != want {
				t.Fatalf("seed %d step %d: peak(%g, %g) = %d, want %d", seed, i, from, to, got, want)
			}
			if got, want := u.peak(math.Inf(-1), math.Inf(1)), peakOf(cs, math.Inf(-1), math.Inf(1)); got != want {
				t.Fatalf("seed %d step %d: peak over all time = %d, want %d", seed, i, got, want)
			}
		}
	}
}
