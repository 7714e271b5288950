package strategy

import (
	"errors"
	"fmt"
	"sync"

	"github.com/opplace/opplace/partition"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
)

// finestOnce holds a problem's placer.Finest, worked out at the first
// asking.
type finestOnce struct {
	once sync.Once
	f    *placer.Finest
}

// Finest is the finest division of the step's memory any plan of the
// space makes, where the memory bound that proves a model does not fit is
// taken (placer.InfeasibleAt), so that the proof holds for every plan:
//
//   - a share of the batch (an activation, a graph input, a per-micro-batch
//     op's scratch) at one sample of the batch per micro-batch, further
//     split over every device: the pipelines' replicas each take a share of
//     a micro-batch (replicas × micro-batches may exceed the batch), and a
//     tensor-parallel group splits what a replica holds, so a plan divides
//     it by at most batch × devices; when the batch is unknown, by any
//     count;
//   - a tensor outside the micro-batches (a parameter, a weight's
//     low-precision copy) over the largest tensor-parallel group;
//   - optimizer state over every device (ZeRO over the replicas within
//     the tensor group's split);
//   - a weight gradient that may share its parameter's buffer at nothing.
//
// Recomputation changes what is stashed between the passes, not what an
// op holds while it runs, so the bound holds for recomputing plans too.
func (p *Problem) Finest() *placer.Finest {
	if p.finest == nil {
		return p.finestNow()
	}
	p.finest.once.Do(func() { p.finest.f = p.finestNow() })
	return p.finest.f
}

func (p *Problem) finestNow() *placer.Finest {
	nd := p.Costs.NumDevices()
	sm := p.simulator
	if sm == nil {
		sm = sim.New(p.Costs, p.Adj, p.Order)
	}
	f := &placer.Finest{Scales: sm.Scales(), Tensor: maxTensorDegree(p), Shard: nd}
	if p.Batch > 0 {
		f.Samples = p.Batch * int64(nd)
		f.Words = fmt.Sprintf("at one sample of the batch of %d per micro-batch", p.Batch)
		if nd > 1 {
			f.Words += fmt.Sprintf(" split over up to %d devices", nd)
		}
	} else {
		f.Words = "at micro-batches as small as a plan may cut them (the batch is unknown)"
	}
	if f.Tensor > 1 {
		f.Words += fmt.Sprintf(", ops over tensor-parallel groups of %d", f.Tensor)
	}
	return f
}

// Infeasible turns a strategy's memory failure into the problem's
// *placer.InfeasibleError with the memory bound of the whole space
// (Problem.Finest): a placer's error, whose bound holds for placements
// only, or a partitioner's *partition.InfeasibleError. So every
// strategy's failure reads and exits alike, and "the model does not fit
// the cluster" is said only where no plan of the space can fit. Other
// errors are returned as they are.
func Infeasible(p *Problem, err error) error {
	var pinf *partition.InfeasibleError
	if errors.As(err, &pinf) {
		under := ""
		if pinf.Rules {
			under = " under the rules"
		}
		return placer.InfeasibleAt(p.Problem, fmt.Sprintf("pipeline partitioner %s: no split fits in device memory%s: %s", pinf.Partitioner, under, pinf.Detail), p.Finest())
	}
	var inf *placer.InfeasibleError
	if errors.As(err, &inf) {
		e := placer.InfeasibleAt(p.Problem, inf.Detail, p.Finest())
		e.Strategy, e.Alternative = inf.Strategy, inf.Alternative
		return e
	}
	return err
}

// failed is strategy name's failure err as Evaluate reports it: a memory
// failure with the space's bound (Infeasible), naming the strategy.
func failed(p *Problem, name string, err error) error {
	err = Infeasible(p, err)
	var inf *placer.InfeasibleError
	if errors.As(err, &inf) && inf.Strategy == "" {
		e := *inf
		e.Strategy = name
		return &e
	}
	return err
}
