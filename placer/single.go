package placer

import (
	"context"
	"fmt"

	"github.com/opplace/opplace/sim"
)

func init() {
	Register("single", "every op on the one device that runs the graph fastest and fits it", func() Placer { return single{} })
}

// single puts the whole graph on one device: the best device that fits.
// It is the baseline any split must beat; splitting pays only when memory
// forces it or the graph has parallel work worth the transfers.
type single struct{}

func (single) Place(ctx context.Context, p *Problem) (sim.Placement, error) {
	pins, err := p.pinned()
	if err != nil {
		return sim.Placement{}, err
	}
	var best sim.Placement
	bestStep := -1.0
	var largestPeak int64
	for _, d := range deviceClasses(p.Costs) {
		if err := ctx.Err(); err != nil {
			return sim.Placement{}, err
		}
		pl := sim.Placement{Device: make([]int, len(p.Graph.Ops))}
		for i := range pl.Device {
			pl.Device[i] = d
			if pins[i] >= 0 {
				pl.Device[i] = pins[i]
			}
		}
		res, err := p.Simulate(pl)
		if err != nil {
			return sim.Placement{}, err
		}
		largestPeak = max(largestPeak, res.PeakMemory[d])
		if !p.Fits(res) {
			continue
		}
		if bestStep < 0 || res.Step < bestStep {
			best, bestStep = pl, res.Step
		}
	}
	if bestStep < 0 {
		return sim.Placement{}, Infeasible(p, fmt.Sprintf("no single device holds the graph (it peaks at %s on one device)", FormatBytes(largestPeak)))
	}
	return best, nil
}
