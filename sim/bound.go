package sim

import (
	"github.com/opplace/opplace/graph"
)

// ComputeBound is a lower bound on the step Run finds for plan p,
// without running it: the busiest device's compute, each op's runs
// timed as Run times them (its share of the micro-batch, of a
// tensor-parallel split and of a ZeRO update, and the launch every run
// pays), with transfers, collectives, syncs, recomputation and idle time
// left out, which only lengthen the step. It costs one pass over the
// ops, where Run costs one per micro-batch and more: a search can skip
// simulating a plan whose bound is no shorter than a plan it has.
func (sm *Simulator) ComputeBound(p *Plan) (float64, error) {
	t := sm.t
	g := t.Graph
	nd := t.NumDevices()
	opStage, stages, err := p.normalise(g, nd)
	if err != nil {
		return 0, err
	}
	f := sm.facts()
	M := p.microBatches()
	tp := tensorDegree(stages, nd)
	busy := make([]float64, nd)
	for op := range g.Ops {
		d := p.Device[op]
		run := runTime(f, t, p.Split, graph.OpID(op), d, tp[d], &stages[opStage[op]], M)
		if f.perMB[op] {
			run *= float64(M)
		}
		busy[d] += run
	}
	var most float64
	for _, b := range busy {
		most = max(most, b)
	}
	return most, nil
}
