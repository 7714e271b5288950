package strategy_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/strategy"
)

// TestExplain: an asked strategy's memory failure names the strategy and,
// unless the memory bound proves that nothing fits, the first cheap
// strategy that does fit; exit code 3 must never hide a plan that exists.
func TestExplain(t *testing.T) {
	// single needs one device holding all four 256 MiB layers and their
	// gradients (2 GiB); two 1200 MiB devices hold them only when split.
	split := problem(t, 4, 256<<20, 2, 1200<<20)
	// 4 x 256 MiB of parameters on 2 x 300 MiB: no plan fits at all.
	none := problem(t, 4, 256<<20, 2, 300<<20)
	tests := []struct {
		name    string
		p       *strategy.Problem
		proved  bool
		alt     string
		message string
	}{
		{"single fails, m-topo fits", split, false, "m-topo", "strategy single found no plan that fits the cluster's memory, though no bound rules one out"},
		{"nothing fits", none, true, "", "the model does not fit the cluster: a plan needs at least"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := strategy.New("single", strategy.Config{})
			if err != nil {
				t.Fatal(err)
			}
			o := strategy.Evaluate(context.Background(), tc.p, "single", s)
			if o.Err == nil {
				t.Fatal("single fitted")
			}
			err = strategy.Explain(context.Background(), tc.p, strategy.Config{}, "single", o.Err)
			var inf *placer.InfeasibleError
			if !errors.As(err, &inf) {
				t.Fatalf("got %T %v, want an InfeasibleError", err, err)
			}
			if inf.Proved != tc.proved || inf.Alternative != tc.alt || inf.Strategy != "single" {
				t.Errorf("proved %v, alternative %q, strategy %q; want %v, %q, single", inf.Proved, inf.Alternative, inf.Strategy, tc.proved, tc.alt)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, tc.message) {
				t.Errorf("message %q\nwant it to start with %q", msg, tc.message)
			}
			if tc.alt != "" && !strings.Contains(err.Error(), "strategy "+tc.alt+" finds a plan that fits") {
				t.Errorf("message %q does not name %s", err, tc.alt)
			}
		})
	}
	// Errors that are not about memory pass through.
	other := errors.New("solver crashed")
	if err := strategy.Explain(context.Background(), split, strategy.Config{}, "ilp", other); err != other {
		t.Errorf("got %v, want the error as it was", err)
	}
}
