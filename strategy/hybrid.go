package strategy

import (
	"context"
	"fmt"

	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
)

// HybridPlacers are the placers a hybrid spreads each replica with.
var HybridPlacers = []string{"m-etf", "heft"}

func init() {
	for _, name := range HybridPlacers {
		Register("dp+"+name, FamilyHybrid, "data parallelism over replicas that each span k devices placed by "+name+": for models whose training step does not fit one device", func(cfg Config) Strategy {
			return hybrid{placer: name, cfg: cfg.Placer, levels: cfg.levels(sim.NoSharding, sim.ZeRO2), recompute: cfg.Recompute}
		})
	}
}

type hybrid struct {
	placer string
	cfg    placer.Config
	// levels are the ZeRO levels offered, plain DDP first.
	levels []sim.Sharding
	// recompute is Config.Recompute.
	recompute string
}

// Propose places the graph with the placer on groups of k = 2, 4 ...
// consecutive devices of one class (hosts first), k less than the class,
// and replicates that placement over the class's other groups of k. The
// placer sees the whole batch's costs on its k devices; the judge runs
// each replica's share, so the numbers are exact for the plan, though the
// placer optimised a proxy. Each goes to the judge with plain DDP and
// with ZeRO-2 (which in opplace's model saves at least ZeRO-1's memory
// and time, so ZeRO-1 is only offered when asked for).
func (h hybrid) Propose(ctx context.Context, p *Problem) ([]Proposal, error) {
	if err := pinned(p, "dp+"+h.placer); err != nil {
		return nil, err
	}
	var out []Proposal
	var firstErr error
	var why noReplicas
	for _, cl := range p.Costs.Classes() {
		for k := 2; k < len(cl); k *= 2 {
			r := len(cl) / k
			if r < 2 {
				continue
			}
			if p.Batch > 0 && int64(r) > p.Batch {
				why.batch(r)
				continue
			}
			if p.Batch > 0 && p.Batch%int64(r) != 0 {
				why.split(r)
				continue
			}
			pl, err := h.placeOn(ctx, p, cl[:k])
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			st := sim.Stage{}
			for i := 0; i < r; i++ {
				st.Replicas = append(st.Replicas, cl[i*k:(i+1)*k])
			}
			// Replicas name every device of the group; ones the placer
			// left empty idle.
			out = append(out, Proposal{Plan: &sim.Plan{Placement: pl, Stages: []sim.Stage{st}},
				Notes: []string{fmt.Sprintf("%d replicas of a %d-device %s placement", r, k, h.placer)}})
		}
	}
	if len(out) == 0 {
		if firstErr != nil {
			return nil, firstErr
		}
		return nil, why.err("dp+"+h.placer, p.Costs, p.Batch, "no device class has 4 or more devices")
	}
	return recomputeVariants(p, shardedVariants(out, levelsFor(p, h.levels)), h.recompute, p.Simulate), nil
}

// placeOn runs the placer on the sub-cluster of devs and maps its
// placement back to the cluster's device indices.
func (h hybrid) placeOn(ctx context.Context, p *Problem, devs []int) (sim.Placement, error) {
	sub := p.Costs.Cluster.Sub(devs)
	tab := p.Costs.Restrict(sub)
	prob := &placer.Problem{Graph: p.Graph, Adj: p.Adj, Order: p.Order, Costs: tab, Apart: p.Apart}
	pl, err := newPlacer(h.placer, h.cfg)
	if err != nil {
		return sim.Placement{}, err
	}
	placed, err := pl.Place(ctx, prob)
	if err != nil {
		return sim.Placement{}, err
	}
	for i, d := range placed.Device {
		placed.Device[i] = devs[d]
	}
	return placed, nil
}
