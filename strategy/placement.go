package strategy

import (
	"context"

	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
)

// Every placer is a strategy of the placement family: one stage, one
// replica, the whole batch at once, ops spread over the devices.
func init() {
	for _, name := range placer.Names() {
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
	pl, err := newPlacer(s.name, s.cfg)
	if err != nil {
		return nil, err
	}
	s.pl = pl
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
	return []Proposal{{Plan: &sim.Plan{Placement: placed}, Sim: res}}, nil
}

// Notes passes on what the placer reported (a solver's status).
func (s *placement) Notes() []string {
	if n, ok := s.pl.(placer.Noter); ok {
		return n.Notes()
	}
	return nil
}
