package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/opplace/opplace/partition"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/sim"
)

// Outcome is one strategy's result on a problem.
type Outcome struct {
	Strategy  string
	Placement sim.Placement
	// Sim is the simulated step; nil when the strategy failed.
	Sim  *sim.Result
	Fits bool
	// Err is why the strategy failed or, for a placement that overflows a
	// device, an *placer.InfeasibleError saying where.
	Err error
	// Solve is the placer's own time (not deterministic).
	Solve time.Duration
	// Notes are what the placer reported (see placer.Noter).
	Notes []string
	// Pipeline is the partition a pipeline strategy chose.
	Pipeline *partition.Plan
}

// evaluate runs one placer on the problem and simulates its placement.
func evaluate(ctx context.Context, r *run, name string, pl placer.Placer) Outcome {
	o := Outcome{Strategy: name}
	begin := time.Now()
	placed, err := pl.Place(ctx, r.problem)
	o.Solve = time.Since(begin)
	if n, ok := pl.(placer.Noter); ok {
		o.Notes = n.Notes()
	}
	if err != nil {
		o.Err = err
		return o
	}
	res, err := r.problem.Simulate(placed)
	if err != nil {
		o.Err = err
		return o
	}
	o.Placement, o.Sim, o.Fits = placed, res, r.problem.Fits(res)
	if !o.Fits {
		o.Err = overflow(r, name, res)
	}
	return o
}

// Comparison is every strategy's outcome on one model and cluster.
type Comparison struct {
	Model        string            `json:"model"`
	Mode         string            `json:"mode"`
	Cluster      string            `json:"cluster"`
	Ops          int               `json:"ops"`
	Groups       string            `json:"groups"`
	Devices      []ComparedDevice  `json:"devices"`
	LowerBoundMS float64           `json:"lower_bound_ms"`
	Strategies   []StrategyOutcome `json:"strategies"`
	Warnings     []string          `json:"warnings,omitempty"`
	outcomes     []Outcome
}

// ComparedDevice names a device and its memory.
type ComparedDevice struct {
	Name        string `json:"name"`
	MemoryBytes int64  `json:"memory_bytes"`
}

// StrategyOutcome is one row of a comparison.
type StrategyOutcome struct {
	Strategy        string  `json:"strategy"`
	PredictedStepMS float64 `json:"predicted_step_ms"`
	// Gap is predicted / lower bound - 1. Pipeline strategies are held to
	// the work part of the bound only (pipelining overlaps the critical
	// path), given in their LowerBoundMS.
	Gap              float64  `json:"gap"`
	LowerBoundMS     float64  `json:"lower_bound_ms,omitempty"`
	Fits             bool     `json:"fits"`
	PeakMemoryBytes  []int64  `json:"peak_memory_bytes"`
	CrossDeviceBytes int64    `json:"cross_device_bytes"`
	SolveMS          float64  `json:"solve_ms"`
	Error            string   `json:"error,omitempty"`
	Notes            []string `json:"notes,omitempty"`
}

// Outcomes returns the full outcome of every strategy, in the order run.
func (c *Comparison) Outcomes() []Outcome { return c.outcomes }

// CompareOptions says what to compare.
type CompareOptions struct {
	Options
	// Strategies to run, in order; nil means every registered placer and
	// every pipeline partitioner.
	Strategies []string
	// New makes a placer by name; nil means placer.New. It lets callers
	// configure a placer (ilp's groups and time limit).
	New func(name string) (placer.Placer, error)
}

// Compare runs the stages up to placement, then every strategy, and
// tabulates the outcomes. A strategy's failure is a row, not an error.
func Compare(ctx context.Context, opts CompareOptions) (*Comparison, error) {
	names := opts.Strategies
	if names == nil {
		names = Strategies()
	}
	for _, n := range names {
		if !slices.Contains(Strategies(), n) {
			return nil, &InputError{fmt.Errorf("unknown strategy %q: use one of %v", n, Strategies())}
		}
	}
	newPlacer := opts.New
	if newPlacer == nil {
		newPlacer = placer.New
	}
	opts.Options = opts.withDefaults()
	r := &run{opts: opts.Options}
	for _, st := range stages {
		if st.name == "place" {
			break
		}
		if err := st.fn(ctx, r); err != nil {
			return nil, err
		}
	}
	c := &Comparison{
		Model: opts.ModelPath, Mode: opts.Mode, Cluster: r.cluster.Name, Ops: len(r.problem.Graph.Ops),
		LowerBoundMS: plan.MS(r.bound.Seconds()), Warnings: r.model.Warnings,
	}
	if gs, err := placer.Group(r.problem); err == nil {
		c.Groups = gs.String()
	}
	for _, d := range r.cluster.Devices {
		c.Devices = append(c.Devices, ComparedDevice{d.Name, d.Memory})
	}
	for _, name := range names {
		var o Outcome
		bound := r.bound
		if part, ok := pipelinePartitioner(name); ok {
			o, bound = evaluatePipeline(ctx, r, part), pipelineBound(r.bound)
		} else {
			pl, err := newPlacer(name)
			if err != nil {
				return nil, err
			}
			o = evaluate(ctx, r, name, pl)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		c.outcomes = append(c.outcomes, o)
		row := StrategyOutcome{Strategy: name, Fits: o.Fits, SolveMS: plan.MS(o.Solve.Seconds()), Notes: o.Notes}
		if o.Err != nil {
			row.Error = o.Err.Error()
		}
		if o.Sim != nil {
			row.PredictedStepMS = plan.MS(o.Sim.Step)
			row.PeakMemoryBytes = o.Sim.PeakMemory
			for _, t := range o.Sim.Transfers {
				row.CrossDeviceBytes += t.Bytes
			}
			if o.Pipeline != nil {
				row.CrossDeviceBytes = crossDeviceBytes(o.Pipeline)
				row.LowerBoundMS = plan.MS(bound.Seconds())
			}
			if lb := bound.Seconds(); lb > 0 {
				row.Gap = plan.Fraction(o.Sim.Step/lb - 1)
			}
		}
		c.Strategies = append(c.Strategies, row)
	}
	return c, nil
}

// Best is the fitting strategy with the shortest predicted step (the
// first in run order on a tie), or an error when none fits.
func (c *Comparison) Best() (*StrategyOutcome, error) {
	var best *StrategyOutcome
	for i := range c.Strategies {
		s := &c.Strategies[i]
		if s.Error == "" && s.Fits && (best == nil || s.PredictedStepMS < best.PredictedStepMS) {
			best = s
		}
	}
	if best == nil {
		return nil, errors.New("no strategy found a placement that fits")
	}
	return best, nil
}
