package placer_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/placer"
)

func TestCombineFailures(t *testing.T) {
	b := trainChain(8, 8, 100, 100)
	// Two 500-byte devices: no strategy fits eight 300-byte layers.
	p := problem(t, b, graphtest.Cluster(giga, 0, dev(giga, 500), dev(giga, 500)))
	var fails []placer.Failure
	for _, name := range []string{"single", "m-etf", "heft"} {
		pl, _ := placer.New(name)
		_, err := pl.Place(context.Background(), p)
		if err == nil {
			t.Fatalf("%s fitted", name)
		}
		fails = append(fails, placer.Failure{Strategy: name, Err: err})
	}
	fails = append(fails, placer.Failure{Strategy: "ilp", Err: errors.New("solver crashed")})
	err := placer.CombineFailures(fails)
	var inf *placer.InfeasibleError
	if !errors.As(err, &inf) {
		t.Fatalf("got %T %v, want an InfeasibleError", err, err)
	}
	var first *placer.InfeasibleError
	errors.As(fails[0].Err, &first)
	if inf.Need != first.Need || inf.Have != 1000 {
		t.Errorf("bounds %+v, want those of the first failure %+v", inf, first)
	}
	want := "each strategy tried: single: " + detail(fails[0].Err) + "; m-etf: " + detail(fails[1].Err) +
		"; heft: " + detail(fails[2].Err) + "; ilp: solver crashed"
	if inf.Detail != want {
		t.Errorf("detail\n%s\nwant\n%s", inf.Detail, want)
	}

	// Not about memory: the first error as it is.
	pin := fmt.Errorf("op %q is pinned to device %q, which the cluster does not have", "a", "gpu9")
	if err := placer.CombineFailures([]placer.Failure{{Strategy: "m-etf", Err: pin}, {Strategy: "heft", Err: pin}}); err != pin {
		t.Errorf("got %v", err)
	}
	if err := placer.CombineFailures([]placer.Failure{{Strategy: "m-etf", Err: fails[1].Err}, {Strategy: "heft", Err: context.Canceled}}); err != context.Canceled {
		t.Errorf("cancelled: got %v", err)
	}
	if placer.CombineFailures(nil) != nil {
		t.Error("no failures gave an error")
	}
}

func detail(err error) string {
	var inf *placer.InfeasibleError
	errors.As(err, &inf)
	return inf.Detail
}
