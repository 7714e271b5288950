package partition

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestChainLatticeMatchesEnumeration checks the downsets of a path taken
// as its prefixes (no bit sets) against the breadth-first enumeration
// with a bit set per downset: the same downsets in the same order, with
// the same cover edges, membership and sums.
func TestChainLatticeMatchesEnumeration(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 8 {
		n := 5 + rng.IntN(70)
		ops := make([]fwdOp, n)
		prev := "x"
		for i := range ops {
			name := fmt.Sprintf("op%d", i)
			ops[i] = fwdOp{name, 0.1 + 4*rng.Float64(), int64(1 + rng.IntN(1<<20)), int64(rng.IntN(1 << 22)), []string{prev}}
			prev = name
		}
		p := newTestProblem(t, buildGraph(ops, trial%2 == 0), testCluster(2+rng.IntN(4), 1<<30, giga), Options{})
		if !chainOrdered(p.u) {
			t.Fatalf("trial %d: a path of %d units is not taken for a chain", trial, p.u.n)
		}
		got, err := idealLatticeBy(p.u, p.m, 1<<20, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		want, err := enumerateIdeals(p.u, p.m, 1<<20, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if got.words != 0 || got.n != want.n || !got.chain || !want.chain {
			t.Fatalf("trial %d: %d downsets (bit-set words %d, chain %v), enumerated %d (chain %v)", trial, got.n, got.words, got.chain, want.n, want.chain)
		}
		for name, eq := range map[string]bool{
			"cover":  slices.Equal(got.cover, want.cover) && slices.Equal(got.coverStart, want.coverStart),
			"size":   slices.Equal(got.size, want.size),
			"cut":    slices.Equal(got.cut, want.cut),
			"fwd":    slices.Equal(got.fwd, want.fwd) && slices.Equal(got.bwd, want.bwd) && slices.Equal(got.upd, want.upd),
			"params": slices.Equal(got.params, want.params) && slices.Equal(got.grads, want.grads) && slices.Equal(got.stash, want.stash),
			"fast":   slices.Equal(got.fast, want.fast) && slices.Equal(got.launch, want.launch),
		} {
			if !eq {
				t.Errorf("trial %d: %s differs from the enumeration's", trial, name)
			}
		}
		for i := range int32(got.n) {
			for v := range int32(p.u.n) {
				if got.has(i, v) != want.has(i, v) {
					t.Fatalf("trial %d: downset %d holds unit %d: %v, enumerated %v", trial, i, v, got.has(i, v), want.has(i, v))
				}
			}
		}
	}
}

// TestIdealLatticeTooManyAtOnce checks that a unit graph with as many
// units as the downsets allowed is refused before any is enumerated (n
// units have at least n+1 downsets), and one more allowed is enough for
// a path.
func TestIdealLatticeTooManyAtOnce(t *testing.T) {
	ops := make([]fwdOp, 40)
	prev := "x"
	for i := range ops {
		ops[i] = fwdOp{fmt.Sprintf("op%d", i), 1, 1, 0, []string{prev}}
		prev = ops[i].name
	}
	p := newTestProblem(t, buildGraph(ops, false), testCluster(2, 1<<30, giga), Options{})
	if _, err := idealLatticeBy(p.u, p.m, p.u.n, time.Time{}); err != errTooManyIdeals {
		t.Fatalf("%d units, at most %d downsets: %v, want errTooManyIdeals", p.u.n, p.u.n, err)
	}
	l, err := idealLatticeBy(p.u, p.m, p.u.n+1, time.Time{})
	if err != nil || l.n != p.u.n+1 {
		t.Fatalf("%d units, at most %d downsets: %v, want all %d", p.u.n, p.u.n+1, err, p.u.n+1)
	}
}
