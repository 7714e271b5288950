package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/opplace/opplace/partition"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/strategy"
)

// PipelineStrategy is shorthand for the default partitioner's strategy,
// strategy.PipelinePrefix + strategy.DefaultPartitioner.
const PipelineStrategy = "pipeline"

// resolveStrategy expands the "pipeline" shorthand and checks the name.
func resolveStrategy(name string) (string, error) {
	if name == PipelineStrategy {
		name = strategy.PipelinePrefix + strategy.DefaultPartitioner
	}
	if name != Auto && !slices.Contains(strategy.Names(), name) {
		return "", &InputError{fmt.Errorf("unknown strategy %q: use auto, pipeline or one of %v", name, strategy.Names())}
	}
	return name, nil
}

// ParseMicroBatches reads a micro-batch count: a positive count, or
// "auto" (0) for the best count under memory.
func ParseMicroBatches(s string) (int, error) {
	if s == "" || s == "auto" {
		return 0, nil
	}
	m, err := strconv.Atoi(s)
	if err != nil || m <= 0 {
		return 0, fmt.Errorf("micro-batches %q: want a positive count or auto", s)
	}
	return m, nil
}

// config is the strategies' configuration with the pipeline options of
// Options applied.
func (r *run) config() (strategy.Config, error) {
	cfg := r.opts.Strategies
	po := &cfg.Pipeline
	if r.opts.Schedule != "" {
		po.Schedule = partition.Schedule(r.opts.Schedule)
	}
	if r.opts.Objective != "" {
		po.Objective = partition.Objective(r.opts.Objective)
	}
	if r.opts.MicroBatches > 0 {
		po.MicroBatches = r.opts.MicroBatches
	}
	if batch := r.problem.Batch; po.MicroBatches > 0 && batch > 0 && int64(po.MicroBatches) > batch {
		return cfg, &InputError{fmt.Errorf("%d micro-batches: the batch is %d, so a micro-batch would hold less than one sample", po.MicroBatches, batch)}
	}
	if err := po.Validate(); err != nil {
		return cfg, &InputError{err}
	}
	return cfg, nil
}

// place runs the chosen strategy, or for Auto the search over the whole
// plan space, and keeps the fitting plan with the shortest simulated step.
func place(ctx context.Context, r *run) error {
	name, err := resolveStrategy(r.opts.Strategy)
	if err != nil {
		return err
	}
	cfg, err := r.config()
	if err != nil {
		return err
	}
	if name == Auto {
		outs, best, err := strategy.Search(ctx, r.problem, cfg, nil)
		r.outcomes = outs
		if err != nil {
			return err
		}
		if r.opts.Choose != nil {
			if best, err = r.choose(ctx, cfg, best); err != nil {
				return err
			}
		}
		r.keep(best, Auto+":"+r.outcomes[best].Strategy)
		return nil
	}
	s, err := strategy.New(name, cfg)
	if err != nil {
		return &InputError{err}
	}
	o := strategy.Evaluate(ctx, r.problem, name, recording{s})
	if o.Err == nil {
		o = strategy.Refine(r.problem, cfg, o)
	}
	r.outcomes = []strategy.Outcome{o}
	if o.Err != nil {
		var pe *strategy.PlacementError
		if errors.Is(o.Err, strategy.ErrNotApplicable) || errors.As(o.Err, &pe) {
			return &InputError{o.Err}
		}
		var inf *placer.InfeasibleError
		if errors.As(o.Err, &inf) || o.Sim == nil {
			return strategy.Explain(ctx, r.problem, cfg, name, o.Err)
		}
		return o.Err
	}
	r.keep(0, name)
	return nil
}

// recording has a strategy's plans simulated with their timeline
// recorded, as the plan needs it: one strategy proposes a plan or a few,
// so recording them while they are judged is cheaper than simulating the
// kept one again (assemble's recordTimeline), which on a graph of a
// million ops took as long as the placement. Auto judges dozens of plans
// and records only the one it keeps.
type recording struct{ strategy.Strategy }

func (s recording) Propose(ctx context.Context, p *strategy.Problem) ([]strategy.Proposal, error) {
	if !p.Record {
		p.Record = true // the list placers' judged placement
		defer func() { p.Record = false }()
	}
	props, err := s.Strategy.Propose(ctx, p)
	for i := range props {
		if pl := props[i].Plan; pl != nil && props[i].Sim == nil && !pl.Record {
			c := *pl
			c.Record = true
			props[i].Plan = &c
		}
	}
	return props, err
}

// Notes are the wrapped strategy's notes, if it keeps any.
func (s recording) Notes() []string {
	if n, ok := s.Strategy.(placer.Noter); ok {
		return n.Notes()
	}
	return nil
}

func (r *run) keep(i int, name string) {
	o := r.outcomes[i]
	r.chosen, r.strategy, r.placed, r.sim = i, name, o.Plan, o.Sim
}
