package strategy

import (
	"context"
	"fmt"
	"strings"

	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
)

// Every placer is a strategy of the placement family: one stage, one
// replica, the whole batch at once, ops spread over the devices.
func init() {
	for _, name := range placer.Names() {
		pl, _ := placer.New(name)
		if _, ok := pl.(placer.WarmStarted); ok {
			Register(name, FamilyPlacement, placer.Summary(name)+"; starts from the best placement before it in auto, or of "+strings.Join(LocalSeeds, ", ")+" on its own",
				func(cfg Config) Strategy { return &warmPlacement{placement{name: name, cfg: cfg.Placer}} })
			continue
		}
		Register(name, FamilyPlacement, placer.Summary(name), func(cfg Config) Strategy {
			return &placement{name: name, cfg: cfg.Placer}
		})
	}
}

type placement struct {
	name string
	cfg  placer.Config
	pl   placer.Placer
}

// newPlacer makes a configured placer by name.
func newPlacer(name string, cfg placer.Config) (placer.Placer, error) {
	pl, err := placer.New(name)
	if err != nil {
		return nil, err
	}
	if c, ok := pl.(placer.Configurable); ok {
		c.Configure(cfg)
	}
	return pl, nil
}

func (s *placement) Propose(ctx context.Context, p *Problem) ([]Proposal, error) {
	return s.propose(ctx, p, nil)
}

// propose places p, from start's placement where the placer can start
// from one and start is not nil.
func (s *placement) propose(ctx context.Context, p *Problem, start *Outcome) ([]Proposal, error) {
	pl, err := newPlacer(s.name, s.cfg)
	if err != nil {
		return nil, err
	}
	s.pl = pl
	var notes []string
	if w, ok := pl.(placer.WarmStarted); ok && start != nil {
		w.WarmStart(start.Plan.Placement)
		notes = append(notes, fmt.Sprintf("started from %s's placement (%.3f ms)", start.Strategy, start.Sim.Step*1e3))
	}
	// A list placer simulated its placement already, to check it fits:
	// the judge takes that result instead of simulating it again.
	var placed sim.Placement
	var res *sim.Result
	if j, ok := pl.(placer.Judged); ok {
		placed, res, err = j.PlaceJudged(ctx, p.Problem)
	} else {
		placed, err = pl.Place(ctx, p.Problem)
	}
	if err != nil {
		return nil, err
	}
	return []Proposal{{Plan: &sim.Plan{Placement: placed}, Sim: res, Notes: notes}}, nil
}

// warmPlacement is a placer that starts from another's placement (ilp),
// as a Seeded strategy: in auto it starts from the fastest placement of
// the strategies before it; on its own, from the best of LocalSeeds.
type warmPlacement struct{ placement }

func (s *warmPlacement) Propose(ctx context.Context, p *Problem) ([]Proposal, error) {
	seeds, err := runSeeds(ctx, p, s.cfg)
	if err != nil {
		return nil, err
	}
	return s.ProposeFrom(ctx, p, seeds)
}

func (s *warmPlacement) ProposeFrom(ctx context.Context, p *Problem, before []Outcome) ([]Proposal, error) {
	start, _ := bestPlacement(before)
	return s.propose(ctx, p, start)
}

// Notes passes on what the placer reported (a solver's status).
func (s *placement) Notes() []string {
	if n, ok := s.pl.(placer.Noter); ok {
		return n.Notes()
	}
	return nil
}
