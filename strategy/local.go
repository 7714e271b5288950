package strategy

import (
	"context"
	"errors"
	"fmt"

	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
)

func init() {
	Register("local", FamilyPlacement, "local search under the simulator from the best list placement (in auto: the best placement found before it)",
		func(cfg Config) Strategy { return &local{cfg: cfg.Placer} })
}

// LocalSeeds are the placers whose best placement local refines when it
// runs on its own; in auto it refines the best placement of the
// strategies before it instead.
var LocalSeeds = []string{"m-etf", "heft", "m-sct"}

// local is placer.Refine as a strategy: a list placer's greedy pass is a
// starting point, and moves between devices that the judge finds faster
// are kept while the work budget lasts.
type local struct {
	cfg placer.Config
}

// Seeded is a strategy that improves on the plans of the strategies run
// before it: Search runs it after them and hands it their outcomes, in
// order, instead of calling Propose.
type Seeded interface {
	Strategy
	ProposeFrom(ctx context.Context, p *Problem, before []Outcome) ([]Proposal, error)
}

// Propose runs the seed placers and refines the best placement that fits.
func (s *local) Propose(ctx context.Context, p *Problem) ([]Proposal, error) {
	if err := s.options().Check(len(p.Graph.Ops)); err != nil {
		return nil, notApplicable(err)
	}
	seeds, err := runSeeds(ctx, p, s.cfg)
	if err != nil {
		return nil, err
	}
	return s.ProposeFrom(ctx, p, seeds)
}

// runSeeds evaluates the LocalSeeds placers, for a strategy that starts
// from the best of them when it runs on its own.
func runSeeds(ctx context.Context, p *Problem, cfg placer.Config) ([]Outcome, error) {
	var seeds []Outcome
	for _, name := range LocalSeeds {
		st, err := New(name, Config{Placer: cfg})
		if err != nil {
			return nil, err
		}
		o := Evaluate(ctx, p, name, st)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		seeds = append(seeds, o)
	}
	return seeds, nil
}

// bestPlacement is the fastest fitting one-stage placement among before
// (the first on a tie), or nil, with the errors of those that failed.
func bestPlacement(before []Outcome) (*Outcome, []error) {
	var seed *Outcome
	var errs []error
	for i := range before {
		o := &before[i]
		if o.Err != nil {
			errs = append(errs, o.Err)
		}
		if o.Sim == nil || !o.Fits || o.Family != FamilyPlacement || !onePlacement(o.Plan) {
			continue
		}
		if seed == nil || o.Objective() < seed.Objective() {
			seed = o
		}
	}
	return seed, errs
}

// ProposeFrom refines the fastest fitting one-stage placement among
// before (the first on a tie).
func (s *local) ProposeFrom(ctx context.Context, p *Problem, before []Outcome) ([]Proposal, error) {
	seed, errs := bestPlacement(before)
	if seed == nil {
		if len(errs) > 0 {
			return nil, fmt.Errorf("local: no placement to start from: %w", errors.Join(errs...))
		}
		return nil, fmt.Errorf("local: %w: no placement to start from", ErrNotApplicable)
	}
	r, err := placer.Refine(ctx, p.Problem, seed.Plan.Placement, s.options())
	if err != nil {
		return nil, notApplicable(err)
	}
	return []Proposal{{Plan: &sim.Plan{Placement: r.Placement}, Sim: r.Sim, Notes: []string{r.Note(seed.Strategy)}}}, nil
}

// onePlacement reports whether a plan is an operator placement: one
// stage, one replica, the whole batch at once.
func onePlacement(p *sim.Plan) bool {
	return p != nil && shapeFamily(p) == FamilyPlacement && p.MicroBatches <= 1
}

func (s *local) options() placer.RefineOptions {
	return placer.RefineOptions{Work: s.cfg.RefineWork}
}

// notApplicable marks Refine's ErrTooLarge as not applicable, which a
// candidate table shows as such rather than as a failure.
func notApplicable(err error) error {
	if errors.Is(err, placer.ErrTooLarge) {
		return fmt.Errorf("local: %w: %w", ErrNotApplicable, err)
	}
	return err
}
