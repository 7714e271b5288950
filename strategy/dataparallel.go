package strategy

import (
	"context"
	"fmt"
	"math"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/partition"
	"github.com/opplace/opplace/sim"
)

func init() {
	Register("dp", FamilyDataParallel, "data parallelism: the whole model on each of r devices of one type, each on 1/r of the batch, gradients all-reduced in DDP buckets during the backward pass; gradient accumulation (micro-batches) when a replica's activations do not fit", func(cfg Config) Strategy {
		return dataParallel{levels: cfg.levels(sim.NoSharding, sim.ZeRO1, sim.ZeRO2, sim.ZeRO3), given: cfg.Sharding != "", recompute: cfg.Recompute}
	})
}

type dataParallel struct {
	// levels are the ZeRO levels offered, plain DDP first; given says
	// the user named the level (see replicaLevels).
	levels []sim.Sharding
	given  bool
	// recompute is Config.Recompute.
	recompute string
}

// Propose offers, for each class of interchangeable devices that runs
// every op, the model replicated on all of them, then on halves of them
// (fewer replicas communicate less; not once their share of the work
// alone takes longer than a plan that fits), each with 1, 2, 4 ...
// micro-batches of gradient accumulation up to what the batch allows and
// up to the first count that fits (or that shows a replica's resident
// state alone overflowing, which no count mends), and each at every ZeRO
// level of the strategy (DDP, ZeRO-1, ZeRO-2: sharding optimizer state
// and gradients saves memory and update time and costs an all-gather of
// the updated weights; ZeRO-3, within a host unless the user asks for it
// (replicaLevels): weights sharded too, gathered per module and pass):
// the judge keeps the fastest that fits.
func (dp dataParallel) Propose(_ context.Context, p *Problem) ([]Proposal, error) {
	if err := pinned(p, "dp"); err != nil {
		return nil, err
	}
	if len(p.Apart) > 0 {
		// Every replica runs every op: two groups always share devices.
		return nil, fmt.Errorf("dp: %w: every replica runs every op, so it breaks %s", ErrNotApplicable, p.Apart[0].Rule)
	}
	var out []Proposal
	var why noReplicas
	// best is the shortest step of a plan that fits so far: r replicas
	// each run every op on 1/r of the batch, so they take at least the
	// ops' whole-batch time over r (micro-batches only add launches), and
	// fewer replicas than a plan that beats that are not simulated.
	best := math.Inf(1)
	for _, cl := range p.Costs.Classes() {
		if len(cl) < 2 {
			continue
		}
		if op, ok := firstUnrunnable(p.Costs, cl[0]); !ok {
			why.cannotRun(cl[0], op)
			continue
		}
		work := 0.0
		for op := range p.Graph.Ops {
			work += p.Costs.OpTime(graph.OpID(op), cl[0])
		}
		for r := len(cl); r >= 2; r /= 2 {
			if work/float64(r) >= best {
				break
			}
			if p.Batch > 0 && int64(r) > p.Batch {
				why.batch(r)
				continue
			}
			if p.Batch > 0 && p.Batch%int64(r) != 0 {
				why.split(r)
				continue
			}
			groups := make([][]int, r)
			for i, d := range cl[:r] {
				groups[i] = []int{d}
			}
			for _, z := range levelsFor(p, replicaLevels(dp.levels, dp.given, p.Costs.Cluster, groups)) {
				for _, m := range accumulationSteps(p.Batch, r) {
					// More micro-batches only save activation memory:
					// each op pays its launch once more per micro-batch
					// and the all-reduce overlaps a shorter last
					// backward pass, so once a count fits, larger ones
					// are not simulated (each costs as much as the graph
					// times the count).
					pl := replicate(p, cl[:r], m)
					pl.Stages[0].Sharding = z
					pl.Stages[0].Recompute = dp.recompute == RecomputeAll && training(p.Graph)
					res, err := p.Simulate(pl)
					pr := Proposal{Plan: pl, Sim: res}
					pr.Notes = zeroNotes(z, p.Costs.Cluster, groups)
					if pl.Stages[0].Recompute {
						pr.Notes = append(pr.Notes, recomputeNote)
					}
					out = append(out, pr)
					if err == nil && p.Fits(res) {
						best = min(best, res.Step)
						break
					}
					if err == nil && residentOverflows(p, res) {
						break // more micro-batches cannot make it fit
					}
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, why.err("dp", p.Costs, p.Batch, "no two devices of one type")
	}
	if dp.recompute == "" {
		out = recomputeVariants(p, out, "", p.Simulate)
	}
	return out, nil
}

// accumulationSteps are the micro-batch counts dp tries on r replicas,
// fewest first: each splits a replica's share of the batch into whole
// samples, down to one sample per micro-batch (partition.MicroBatchCounts
// of the share); 1 to 8 when the batch is unknown.
func accumulationSteps(batch int64, r int) []int {
	if batch <= 0 {
		return partition.MicroBatchCounts(0, 8)
	}
	share := batch / int64(r)
	return partition.MicroBatchCounts(share, int(min(share, 1<<30)))
}

// replicate is the plan running every op on devs[0], replicated on each
// of devs, with m micro-batches of gradient accumulation.
func replicate(p *Problem, devs []int, m int) *sim.Plan {
	n := len(p.Graph.Ops)
	pl := &sim.Plan{Placement: sim.Placement{Device: make([]int, n)}, MicroBatches: m}
	for i := range pl.Device {
		pl.Device[i] = devs[0]
	}
	st := sim.Stage{}
	for _, d := range devs {
		st.Replicas = append(st.Replicas, []int{d})
	}
	pl.Stages = []sim.Stage{st}
	return pl
}
