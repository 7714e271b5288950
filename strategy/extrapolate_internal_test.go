package strategy

import (
	"context"
	"math"
	"testing"

	"github.com/opplace/opplace/sim"
)

// TestExtrapolatedStepsAreSimulated: a step of many micro-batches that
// the simulator extrapolates from three short runs (sim.Result.
// Extrapolated) has every figure the run-by-run simulation gives: the
// step, each op's first start and last end, each device's busy time and
// memory, each stage's figures and the bytes moved. The plans are the
// ones the strategies propose for GPT-2 small training at a batch of 256
// on 8xA100-2host (data parallel, pipelines, tensor-parallel groups
// and their pipelines; 1F1B and GPipe; as proposed, recomputing
// everything and under ZeRO-3), each run at 64 micro-batches.
func TestExtrapolatedStepsAreSimulated(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates some hundred steps of GPT-2 small")
	}
	_, p := gpt2SmallTrainingOn8xA100(t, 256)
	plans := proposed(t, p, []Config{{}, {Recompute: "all"}, {Sharding: "zero3"}}, "dp", "pipeline:pipedream", "pipeline:gpipe", "tensor")
	const mb = 64
	steps, extrapolated := 0, 0
	for i, pl := range plans {
		q := *pl
		q.MicroBatches, q.Record = mb, false
		got, err := p.Simulate(&q)
		if err != nil {
			continue // a plan some strategy's checks would refuse
		}
		steps++
		if !got.Extrapolated {
			continue
		}
		extrapolated++
		q.Record = true
		want, err := p.Simulate(&q)
		if err != nil {
			t.Fatal(err)
		}
		if err := sameFigures(got, want); err != "" {
			t.Errorf("plan %d (%d stages, %d micro-batches): %s", i, q.NumStages(), mb, err)
		}
	}
	t.Logf("%d plans at %d micro-batches: %d steps, %d extrapolated", len(plans), mb, steps, extrapolated)
	if extrapolated < steps/2 || extrapolated < 10 {
		t.Fatalf("%d of %d steps extrapolated, want most", extrapolated, steps)
	}
}

// proposed is every plan the named strategies propose for p under each
// configuration, in order.
func proposed(t *testing.T, p *Problem, cfgs []Config, names ...string) []*sim.Plan {
	t.Helper()
	var plans []*sim.Plan
	for _, cfg := range cfgs {
		for _, name := range names {
			s, err := New(name, cfg)
			if err != nil {
				t.Fatal(err)
			}
			props, err := s.Propose(context.Background(), p)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for _, pr := range props {
				if pr.Plan != nil {
					plans = append(plans, pr.Plan)
				}
			}
		}
	}
	return plans
}

// sameFigures is "" when a (extrapolated) has b's figures, times within
// a billionth of the step, else the first that differs.
func sameFigures(a, b *sim.Result) string {
	tol := 1e-9 * b.Step
	near := func(x, y float64) bool { return math.Abs(x-y) <= tol }
	switch {
	case !near(a.Step, b.Step):
		return "step"
	case a.MicroBatches != b.MicroBatches:
		return "micro-batches"
	case a.TransferBytes != b.TransferBytes || a.CollectiveBytes != b.CollectiveBytes:
		return "bytes moved"
	case math.Abs(a.Bubble-b.Bubble) > 1e-9:
		return "bubble"
	}
	for i := range b.Start {
		if !near(a.Start[i], b.Start[i]) || !near(a.End[i], b.End[i]) {
			return "op start or end"
		}
	}
	for d := range b.Busy {
		if !near(a.Busy[d], b.Busy[d]) || a.PeakMemory[d] != b.PeakMemory[d] || a.ResidentMemory[d] != b.ResidentMemory[d] {
			return "device busy time or memory"
		}
	}
	for i, x := range b.Stages {
		y := a.Stages[i]
		if !near(x.Start, y.Start) || !near(x.End, y.End) || !near(x.Compute, y.Compute) || !near(x.Update, y.Update) ||
			!near(x.Send, y.Send) || !near(x.AllReduce, y.AllReduce) || !near(x.TensorSync, y.TensorSync) || !near(x.TensorSyncExposed, y.TensorSyncExposed) ||
			x.AllReduceBytes != y.AllReduceBytes || x.TensorSyncBytes != y.TensorSyncBytes || x.PeakMemory != y.PeakMemory || x.AliveMicroBatches != y.AliveMicroBatches {
			return "stage figures"
		}
	}
	return ""
}
