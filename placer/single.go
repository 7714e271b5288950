package placer

import (
	"context"
	"fmt"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
)

func init() {
	Register("single", "every op on the one device that runs the graph fastest and fits it", func() Placer { return single{} })
}

// single puts the whole graph on one device: the best device that fits.
// It is the baseline any split must beat; splitting pays only when memory
// forces it or the graph has parallel work worth the transfers. Ops that
// are pinned elsewhere, or that the device's type cannot run, go (with
// their colocation group) to the fastest device allowed to them.
type single struct{}

func (single) Place(ctx context.Context, p *Problem) (sim.Placement, error) {
	lim, err := newLimits(p)
	if err != nil {
		return sim.Placement{}, err
	}
	var best sim.Placement
	bestStep := -1.0
	var largestPeak int64
	apart := false // some device was left out for a separate rule
	for _, d := range deviceClasses(p.Costs) {
		if err := ctx.Err(); err != nil {
			return sim.Placement{}, err
		}
		pl := sim.Placement{Device: make([]int, len(p.Graph.Ops))}
		classDev := make([]int, len(lim.allowed))
		for c := range classDev {
			classDev[c] = -1
		}
		for i := range pl.Device {
			c := lim.class[i]
			if classDev[c] < 0 {
				classDev[c] = d
				if !lim.allows(graph.OpID(i), d) {
					classDev[c] = fastestAllowed(p, lim, graph.OpID(i))
				}
			}
			pl.Device[i] = classDev[c]
		}
		if !lim.apartOK(pl.Device, p.Costs.NumDevices()) {
			apart = true
			continue
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
	if bestStep < 0 && apart && largestPeak == 0 {
		return sim.Placement{}, fmt.Errorf("single: %w", noApart(p, "a single device"))
	}
	if bestStep < 0 {
		return sim.Placement{}, Infeasible(p, fmt.Sprintf("no single device holds the graph (it peaks at %s on one device)", cluster.FormatBytes(largestPeak)))
	}
	return best, nil
}

// fastestAllowed is the lowest-numbered of the devices op may use that
// runs it fastest.
func fastestAllowed(p *Problem, lim *limits, op graph.OpID) int {
	best := -1
	for _, d := range lim.devices(op) {
		if best < 0 || p.Costs.OpTime(op, d) < p.Costs.OpTime(op, best) {
			best = d
		}
	}
	return best
}
