package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/opplace/opplace/internal/progress"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/strategy"
)

// Comparison is every strategy's outcome on one model and cluster.
type Comparison struct {
	Model string `json:"model"`
	Mode  string `json:"mode"`
	// Precision is the step's numeric precision, when one was asked for.
	Precision string `json:"precision,omitempty"`
	// Runtime is the runtime the step was planned for, when one was named.
	Runtime string           `json:"runtime,omitempty"`
	Cluster string           `json:"cluster"`
	Ops     int              `json:"ops"`
	Groups  string           `json:"groups"`
	Batch   int64            `json:"batch,omitempty"`
	Devices []ComparedDevice `json:"devices"`
	// LowerBoundMS is the bound every fitting plan of the space is held
	// to (see strategy.SpaceBound), LowerBoundKind the part that binds;
	// rows carry their family's own (without the parts that count memory
	// for a plan that does not fit).
	LowerBoundMS   float64           `json:"lower_bound_ms"`
	LowerBoundKind string            `json:"lower_bound_kind,omitempty"`
	Strategies     []StrategyOutcome `json:"strategies"`
	// Rules are the user's rules every row was held to, each as
	// "spelling (source)".
	Rules    []string `json:"rules,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	outcomes []strategy.Outcome
}

// ComparedDevice names a device and its memory.
type ComparedDevice struct {
	Name        string `json:"name"`
	MemoryBytes int64  `json:"memory_bytes"`
}

// StrategyOutcome is one row of a comparison.
type StrategyOutcome struct {
	Strategy        string  `json:"strategy"`
	Family          string  `json:"family"`
	PredictedStepMS float64 `json:"predicted_step_ms"`
	// ThroughputSamplesPerS is the batch over the step.
	ThroughputSamplesPerS float64 `json:"throughput_samples_per_s,omitempty"`
	// EstimatedStepMS is the strategy's own analytic prediction, when it
	// has one (the partitioners').
	EstimatedStepMS float64 `json:"estimated_step_ms,omitempty"`
	// Gap is predicted / LowerBoundMS - 1, the bound of the row's family
	// (strategy.SpaceBound): the critical path and the work for a
	// placement; the work and the critical path over the batch otherwise.
	Gap              float64  `json:"gap"`
	LowerBoundMS     float64  `json:"lower_bound_ms,omitempty"`
	LowerBoundKind   string   `json:"lower_bound_kind,omitempty"`
	Fits             bool     `json:"fits"`
	Shape            string   `json:"shape,omitempty"`
	PeakMemoryBytes  []int64  `json:"peak_memory_bytes"`
	CrossDeviceBytes int64    `json:"cross_device_bytes"`
	AllReduceBytes   int64    `json:"all_reduce_bytes,omitempty"`
	SolveMS          float64  `json:"solve_ms"`
	Error            string   `json:"error,omitempty"`
	Notes            []string `json:"notes,omitempty"`
}

// Outcomes returns the full outcome of every strategy, in the order run.
func (c *Comparison) Outcomes() []strategy.Outcome { return c.outcomes }

// CompareOptions says what to compare.
type CompareOptions struct {
	Options
	// Strategies to run, in order; nil means every registered strategy.
	Strategies []string
}

// Compare runs the stages up to placement, then every strategy, and
// tabulates the outcomes. A strategy's failure is a row, not an error.
func Compare(ctx context.Context, opts CompareOptions) (*Comparison, error) {
	names := slices.Clone(opts.Strategies)
	if names == nil {
		// The given placement is a row when a placement file is given,
		// the given configuration when one is.
		for _, n := range Strategies() {
			switch {
			case n == strategy.GivenStrategy && opts.Placement == "" && opts.PlacementFile == nil:
			case n == strategy.ParallelStrategy && opts.Options.Strategies.Parallel == nil:
			default:
				names = append(names, n)
			}
		}
	}
	for i, n := range names {
		r, err := resolveStrategy(n)
		if err != nil || r == Auto {
			return nil, &InputError{fmt.Errorf("unknown strategy %q: use one of %v", n, Strategies())}
		}
		names[i] = r
	}
	r, cfg, err := prepare(ctx, opts.Options, opts.Placement != "" || opts.PlacementFile != nil || slices.Contains(names, strategy.GivenStrategy))
	if err != nil {
		return nil, err
	}
	c := &Comparison{
		Model: opts.ModelPath, Mode: opts.Mode, Precision: string(r.precision), Runtime: runtimeName(opts.Options), Cluster: r.cluster.Name, Ops: len(r.problem.Graph.Ops),
		Batch: r.problem.Batch, Warnings: r.model.Warnings,
	}
	if r.rules != nil {
		for _, b := range r.rules.res.Bindings {
			c.Rules = append(c.Rules, b.Rule.String()+" ("+b.Rule.Source+")")
		}
	}
	space := strategy.SpaceBound(r.problem, "")
	c.LowerBoundMS, c.LowerBoundKind = plan.MS(space.Seconds()), space.Kind()
	if gs, err := placer.Group(r.problem.Problem); err == nil {
		c.Groups = gs.String()
	}
	for _, d := range r.cluster.Devices {
		c.Devices = append(c.Devices, ComparedDevice{d.Name, d.Memory})
	}
	task := progress.From(ctx).Start("compare", int64(len(names)))
	defer task.Done()
	for _, name := range names {
		s, err := strategy.New(name, cfg)
		if err != nil {
			return nil, err
		}
		o := strategy.Evaluate(ctx, r.problem, name, s)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		c.outcomes = append(c.outcomes, o)
		fb := strategy.SpaceBound(r.problem, o.Family)
		if o.Sim != nil && !o.Fits {
			fb = fb.Unfitting() // the bounds that count memory hold for plans that fit
		}
		bound := fb.Seconds()
		row := StrategyOutcome{Strategy: name, Family: o.Family, Fits: o.Fits, SolveMS: plan.MS(o.Solve.Seconds()), Notes: o.Notes,
			LowerBoundMS: plan.MS(bound), LowerBoundKind: fb.Kind()}
		if o.Err != nil {
			row.Error = o.Err.Error()
		}
		if o.Sim != nil {
			row.PredictedStepMS = plan.MS(o.Sim.Step)
			row.ThroughputSamplesPerS = throughput(r.problem.Batch, o.Sim.Step)
			row.PeakMemoryBytes = o.Sim.PeakMemory
			row.Shape = shape(o.Plan, o.Sim, len(r.cluster.Devices))
			row.CrossDeviceBytes, row.AllReduceBytes = o.Sim.TransferBytes, o.Sim.CollectiveBytes
			if bound > 0 {
				row.Gap = plan.Fraction(o.Sim.Step/bound - 1)
			}
		}
		if o.Estimate > 0 {
			row.EstimatedStepMS = plan.MS(o.Estimate)
		}
		c.Strategies = append(c.Strategies, row)
		task.Add(1)
	}
	figures := map[string]float64{"lower bound (ms)": c.LowerBoundMS}
	for _, row := range c.Strategies {
		figures["predicted step of "+row.Strategy+" (ms)"] = row.PredictedStepMS
		figures["estimate of "+row.Strategy+" (ms)"] = row.EstimatedStepMS
		figures["gap of "+row.Strategy] = row.Gap
		figures["throughput of "+row.Strategy+" (samples/s)"] = row.ThroughputSamplesPerS
	}
	if err := checkFinite(r, figures); err != nil {
		return nil, err
	}
	return c, nil
}

// prepare runs the stages before placement and returns their state and
// the strategies' configuration.
func prepare(ctx context.Context, opts Options, given bool) (*run, strategy.Config, error) {
	r := &run{opts: opts.withDefaults(), wantGiven: given}
	for _, st := range stages {
		if st.name == "place" {
			break
		}
		if err := r.runStage(ctx, st); err != nil {
			return nil, strategy.Config{}, err
		}
	}
	cfg, err := r.config()
	return r, cfg, err
}

// Prepare imports, costs and bounds a model as Run does, and returns the
// problem every strategy receives and their configuration, for programs
// that search the plan space themselves (benchmarks, other front ends).
func Prepare(ctx context.Context, opts Options) (*strategy.Problem, strategy.Config, error) {
	r, cfg, err := prepare(ctx, opts, opts.Placement != "" || opts.PlacementFile != nil || opts.Strategy == strategy.GivenStrategy)
	if err != nil {
		return nil, cfg, err
	}
	return r.problem, cfg, nil
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
		return nil, errors.New("no strategy found a plan that fits")
	}
	return best, nil
}

// Failure is the error compare exits with when no strategy fits: every
// strategy's reason combined (an *placer.InfeasibleError when memory is
// why).
func (c *Comparison) Failure() error {
	var fails []placer.Failure
	for _, o := range c.outcomes {
		if o.Err != nil && !errors.Is(o.Err, strategy.ErrNotApplicable) {
			fails = append(fails, placer.Failure{Strategy: o.Strategy, Err: o.Err})
		}
	}
	if len(fails) == 0 {
		return errors.New("no strategy found a plan that fits")
	}
	return placer.CombineFailures(slices.Clip(fails))
}
