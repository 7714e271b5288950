package placer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/sim"
)

// fitRounds bounds how many times a list placer places again with
// lowered capacities before it gives up.
const fitRounds = 4

// listPlacer is a list scheduler as a Placer: it schedules the problem
// on a listState, and placeFitting checks the placement with the judge.
type listPlacer func(ctx context.Context, s *listState) (sim.Placement, error)

func (l listPlacer) Place(ctx context.Context, p *Problem) (sim.Placement, error) {
	return placed(l.PlaceJudged(ctx, p))
}

func (l listPlacer) PlaceJudged(ctx context.Context, p *Problem) (sim.Placement, *sim.Result, error) {
	return placeFitting(p, func(s *listState) (sim.Placement, error) { return l(ctx, s) })
}

// placeFitting runs a list scheduler, place, on problem p until the
// judge finds its placement within every device's memory, so a list
// placer never returns a placement the simulator rejects. The
// scheduler's bookkeeping follows the simulator's memory rules on its
// predicted times (see listState.schedule), but the simulator starts
// each device's ops as their inputs arrive, which can run them earlier
// or in another order and raise a peak. When a device's simulated peak
// passes its memory by some overshoot, place runs again, from scratch,
// with that device's capacity taken as the overshoot below the lower of
// the capacity it had and the peak it predicted there (so overshoots add
// up over rounds); the first placement that fits is returned. After
// fitRounds such rounds, or when place finds no room under the lowered
// capacities, the error is an *InfeasibleError that says so.
//
// It returns the simulator's result for the placement too.
func placeFitting(p *Problem, place func(*listState) (sim.Placement, error)) (sim.Placement, *sim.Result, error) {
	devs := p.Costs.Cluster.Devices
	capacity := make([]int64, len(devs))
	for d := range devs {
		capacity[d] = devs[d].Memory
	}
	for round := 0; ; round++ {
		s, err := newListState(p, capacity)
		if err != nil {
			return sim.Placement{}, nil, err
		}
		pl, err := place(s)
		if err != nil {
			if inf := (*InfeasibleError)(nil); errors.As(err, &inf) && round > 0 {
				inf.Detail += "; " + lowered(p, capacity)
			}
			return sim.Placement{}, nil, err
		}
		// The predicted peaks are all that is left to use of the
		// schedule's state: taken before simulating, the state is
		// garbage while the simulator runs.
		predicted := make([]int64, len(devs))
		for d := range predicted {
			predicted[d] = s.mem[d].peak(0, math.Inf(1))
		}
		res, err := sim.Run(p.Costs, p.Adj, p.Order, &sim.Plan{Placement: pl, Record: p.Record})
		if err != nil {
			return sim.Placement{}, nil, err
		}
		worst, over := -1, int64(0)
		for d, peak := range res.PeakMemory {
			if o := peak - devs[d].Memory; o > 0 {
				// Below the predicted peak too: lowering only the
				// capacity may leave every decision, and the plan, as
				// they were.
				capacity[d] = min(capacity[d], predicted[d]) - o
				if o > over {
					worst, over = d, o
				}
			}
		}
		if worst < 0 {
			return pl, res, nil
		}
		if round == fitRounds {
			return sim.Placement{}, nil, Infeasible(p, fmt.Sprintf("placed %d times, the simulator still found %s over its memory: it peaks at %s, which holds %s",
				fitRounds+1, devs[worst].Name, cluster.FormatBytes(res.PeakMemory[worst]), cluster.FormatBytes(devs[worst].Memory)))
		}
	}
}

// lowered says which devices placeFitting took as smaller than they are.
func lowered(p *Problem, capacity []int64) string {
	var each []string
	for d, dev := range p.Costs.Cluster.Devices {
		if capacity[d] < dev.Memory {
			each = append(each, fmt.Sprintf("%s as %s of %s", dev.Name, cluster.FormatBytes(capacity[d]), cluster.FormatBytes(dev.Memory)))
		}
	}
	return "placed again with less memory where the simulator found a device over it (" + strings.Join(each, ", ") + ")"
}
