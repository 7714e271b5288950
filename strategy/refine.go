package strategy

import (
	"fmt"

	"github.com/opplace/opplace/sim"
)

// MaxFineMicroBatches bounds the finer micro-batch count Refine tries:
// the simulator runs every micro-batch, so a step of m micro-batches
// costs m times one's.
const MaxFineMicroBatches = 128

// Refine runs the pipeline plan an outcome kept at the finest
// micro-batch count its stages allow, up to MaxFineMicroBatches, when
// it was kept at the most micro-batches the partitioners try, and keeps
// it when that fits and is faster. The partitioners try at most 32
// counts (partition.Options.MaxMicroBatches), so at LLM batches a
// pipeline's micro-batches hold several samples and its bubble is
// larger than the runtimes' (Megatron-LM runs micro-batches of one or
// two samples); a 1F1B stage stashes no more micro-batches for more of
// them, each smaller. One simulation, of the kept plan only: proposing
// the finer count for every candidate costs a simulation of each, which
// on Llama 2 70B on 64 GPUs took the search from 17 s to 48 s.
//
// It leaves alone an outcome whose count was fixed (cfg's micro-batches,
// a configuration given with its micro-batch size, a given placement),
// one that does not fit, and plans of one stage (gradient accumulation
// has no bubble).
func Refine(p *Problem, cfg Config, o Outcome) Outcome {
	pl := o.Plan
	switch {
	case pl == nil || o.Sim == nil || !o.Fits || len(pl.Stages) < 2 || pl.MicroBatches < 1 || p.Batch <= 0:
		return o
	case cfg.Pipeline.MicroBatches > 0 || o.Strategy == GivenStrategy:
		return o
	case o.Strategy == ParallelStrategy && cfg.Parallel != nil && cfg.Parallel.MicroBatchSize > 0:
		return o
	}
	maxM := cfg.Pipeline.MaxMicroBatches
	if maxM <= 0 {
		maxM = 32
	}
	m := fineCount(p.Batch, pl)
	if pl.MicroBatches < maxM || m <= pl.MicroBatches {
		return o // the search stopped below its ceiling: it weighed finer counts
	}
	c := *pl
	c.MicroBatches, c.Record = m, true
	res, err := p.Simulate(&c)
	if err != nil || !p.Fits(res) {
		return o
	}
	penalty := 0.0
	if p.Rules != nil {
		if p.Rules.Check(&c) != nil {
			return o
		}
		penalty = p.Rules.Penalty(&c)
	}
	if res.Step+penalty >= o.Objective() {
		return o
	}
	o.Notes = append(o.Notes, fmt.Sprintf("the stages run at %d micro-batches, finer than the %d the partitioners try at most: %.3f ms against %.3f ms",
		m, maxM, res.Step*1e3, o.Sim.Step*1e3))
	o.Plan, o.Sim, o.Penalty = &c, res, penalty
	return o
}

// fineCount is the most micro-batches, up to MaxFineMicroBatches, that
// a plan's stages split the batch into with every replica a whole
// number of samples: the greatest divisor under the bound of every
// stage's share of the batch (0 when a stage's replicas do not split
// it).
func fineCount(batch int64, pl *sim.Plan) int {
	var g int64
	for _, st := range pl.Stages {
		r := int64(max(len(st.Replicas), 1))
		if batch%r != 0 {
			return 0
		}
		a, b := g, batch/r
		for b != 0 {
			a, b = b, a%b
		}
		g = a
	}
	for m := min(g, MaxFineMicroBatches); m > 1; m-- {
		if g%m == 0 {
			return int(m)
		}
	}
	return 1
}
