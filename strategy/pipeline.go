package strategy

import (
	"context"

	"github.com/opplace/opplace/partition"
	"github.com/opplace/opplace/sim"
)

// PipelinePrefix names the pipeline strategies: "pipeline:<partitioner>";
// "pipeline" alone is DefaultPartitioner.
const (
	PipelinePrefix     = "pipeline:"
	DefaultPartitioner = "exact"
)

// Every partitioner is a strategy of the pipeline family.
func init() {
	for _, name := range partition.Names() {
		Register(PipelinePrefix+name, FamilyPipeline, partition.Summary(name), func(cfg Config) Strategy {
			return pipelined{name: name, opts: cfg.Pipeline}
		})
	}
}

type pipelined struct {
	name string
	opts partition.Options
}

// Propose cuts the graph into stages with the partitioner, which picks
// the stages, their replicas and the micro-batch count by its analytic
// model; the same stages at half and twice that count (when the count is
// not fixed) go to the judge too, since the model and the simulator can
// disagree on where the bubble and the memory balance.
func (s pipelined) Propose(ctx context.Context, p *Problem) ([]Proposal, error) {
	part, err := partition.New(s.name)
	if err != nil {
		return nil, err
	}
	opts := s.opts
	if p.Batch > 0 && (opts.MaxMicroBatches == 0 || int64(opts.MaxMicroBatches) > p.Batch) {
		opts.MaxMicroBatches = int(min(p.Batch, 32))
	}
	prob, err := partition.NewProblem(p.Costs, opts)
	if err != nil {
		return nil, err
	}
	pp, err := part.Partition(ctx, prob)
	if err != nil {
		return nil, err
	}
	out := []Proposal{{Plan: pipelinePlan(p, pp, pp.MicroBatches), Estimate: pp.StepMs / 1e3, Pipeline: pp}}
	if opts.MicroBatches == 0 {
		maxM := opts.MaxMicroBatches
		if maxM == 0 {
			maxM = 32
		}
		for _, m := range []int{pp.MicroBatches / 2, pp.MicroBatches * 2} {
			if m >= 1 && m <= maxM && (p.Batch == 0 || int64(m) <= p.Batch) {
				out = append(out, Proposal{Plan: pipelinePlan(p, pp, m), Pipeline: pp})
			}
		}
	}
	return out, nil
}

// pipelinePlan is a partition as a point of the plan space: each stage's
// ops on its first replica, every replica one device.
func pipelinePlan(p *Problem, pp *partition.Plan, m int) *sim.Plan {
	n := len(p.Graph.Ops)
	pl := &sim.Plan{
		Placement:    sim.Placement{Device: make([]int, n)},
		OpStage:      pp.OpStage,
		MicroBatches: m,
		Schedule:     sim.Schedule(pp.Schedule),
	}
	for op, st := range pp.OpStage {
		pl.Device[op] = pp.Stages[st].DeviceIndex[0]
	}
	for _, st := range pp.Stages {
		var s sim.Stage
		for _, d := range st.DeviceIndex {
			s.Replicas = append(s.Replicas, []int{d})
		}
		pl.Stages = append(pl.Stages, s)
	}
	return pl
}
