package strategy_test

import (
	"strings"
	"testing"

	"github.com/opplace/opplace/sim"
	"github.com/opplace/opplace/strategy"
)

func TestParseParallel(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want strategy.Parallel
		err  string
	}{
		{in: "tp=8,pp=8,mbs=1,recompute=full", want: strategy.Parallel{Tensor: 8, Pipeline: 8, MicroBatchSize: 1, Recompute: true}},
		{in: "tp=2, dp=4, zero=zero1", want: strategy.Parallel{Tensor: 2, Pipeline: 1, Data: 4, Sharding: sim.ZeRO1}},
		{in: "pp=4,recompute=none,zero=none", want: strategy.Parallel{Tensor: 1, Pipeline: 4}},
		{in: "tp=0", err: "tp=0 must be a whole number of at least 1"},
		{in: "tp=2,tp=4", err: "tp is given twice"},
		{in: "tp", err: `"tp" is not KEY=VALUE`},
		{in: "mbs=x", err: "mbs=x must be a whole number"},
		{in: "recompute=selective", err: "recompute=selective: use none or full"},
		{in: "dp=8,zero=zero3", want: strategy.Parallel{Tensor: 1, Pipeline: 1, Data: 8, Sharding: sim.ZeRO3}},
		{in: "zero=zero4", err: "zero=zero4"},
		{in: "vp=2", err: `unknown key "vp"`},
	} {
		got, err := strategy.ParseParallel(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: %v, want an error saying %q", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.err == "" && *got != tc.want:
			t.Errorf("%q: %+v, want %+v", tc.in, *got, tc.want)
		}
	}
}
