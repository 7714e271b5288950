package strategy

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
)

// ParseSharding reads the sharding a user allows replicated stages:
// "auto" (or "") lets each strategy offer its ZeRO variants, "none",
// "zero1", "zero2" or "zero3" allow only that level.
func ParseSharding(s string) (string, error) {
	if s == "" || s == "auto" {
		return "", nil
	}
	if _, err := sim.ParseSharding(s); err != nil {
		return "", fmt.Errorf("unknown sharding %q: use auto, none, zero1, zero2 or zero3", s)
	}
	return s, nil
}

// levels is the sharding levels a strategy offers its replicated stages:
// Config.Sharding's one level when it names one, else def.
func (c Config) levels(def ...sim.Sharding) []sim.Sharding {
	if c.Sharding == "" {
		return def
	}
	z, err := sim.ParseSharding(c.Sharding)
	if err != nil {
		return def
	}
	return []sim.Sharding{z}
}

// levelsFor is levels as offered on p's graph: a forward pass has no
// gradients or optimizer state to shard, so every level runs as plain
// DDP and only the first (plain DDP, by default) is offered rather than
// simulating the same plan once per level.
func levelsFor(p *Problem, levels []sim.Sharding) []sim.Sharding {
	if len(levels) > 1 && !training(p.Graph) {
		return levels[:1]
	}
	return levels
}

// replicaLevels is levels for replicas whose devices are groups: under
// auto sharding (not given: the user named no level), without ZeRO-3
// when the groups span hosts. ZeRO-3 gathers every weight over the data-parallel group for
// each pass of each micro-batch; across hosts the simulator prices those
// all-gathers at the network's ring bandwidth with the prefetch fully
// overlapped, and the one published measurement of ZeRO-3 at scale it was
// checked against ran far slower: Narayanan et al. (SC'21, Table 2),
// GPT 175B at batch 1536 on 384, 768 and 1,536 A100s of Selene, measured
// 144, 88 and 44 TFLOP/s per GPU where the simulator predicts 189, 186 and
// 169 (docs/plan-space.md#zero-3). So auto offers ZeRO-3 within a host
// only, where its gathers ride NVLink; --zero zero3 asks for it anywhere.
func replicaLevels(levels []sim.Sharding, given bool, cl *cluster.Cluster, groups [][]int) []sim.Sharding {
	if given || !slices.Contains(levels, sim.ZeRO3) || oneHost(cl, groups) {
		return levels
	}
	return slices.DeleteFunc(slices.Clone(levels), func(z sim.Sharding) bool { return z == sim.ZeRO3 })
}

// crossHostZeRO3 is the note on a ZeRO-3 plan whose replicas span hosts.
const crossHostZeRO3 = "ZeRO-3 across hosts: its all-gathers are predicted at the network's ring bandwidth, fully overlapped; the published ZeRO-3 runs at scale it was checked against ran 1.3-3.5x slower than predicted (docs/plan-space.md#zero-3): treat this step as optimistic"

// zeroNotes are the notes of a plan whose replicas, on groups, shard at
// level z.
func zeroNotes(z sim.Sharding, cl *cluster.Cluster, groups [][]int) []string {
	switch {
	case z == sim.NoSharding:
		return nil
	case z == sim.ZeRO3 && !oneHost(cl, groups):
		return []string{zeroNote(z), crossHostZeRO3}
	}
	return []string{zeroNote(z)}
}

// withZeRO3Hint is err, a failure to find a plan that fits, with a hint
// when ZeRO-3 data parallelism across hosts, which auto sharding does not
// offer (replicaLevels), fits: the plan a user may still want, named with
// its caveat. err as it is otherwise (a proof, a named level, inference,
// one host, or ZeRO-3 not fitting either).
func withZeRO3Hint(ctx context.Context, p *Problem, cfg Config, err error) error {
	var inf *placer.InfeasibleError
	if !errors.As(err, &inf) || inf.Proved || cfg.Sharding != "" || !training(p.Graph) || len(p.Costs.Cluster.Hosts) < 2 {
		return err
	}
	dp := dataParallel{levels: []sim.Sharding{sim.ZeRO3}, given: true, recompute: cfg.Recompute}
	o := Evaluate(ctx, p, "dp", dp)
	if o.Err != nil || !o.Fits {
		return err
	}
	e := *inf
	e.Hint = fmt.Sprintf("data parallelism with ZeRO-3 across hosts fits (%.0f ms predicted), which auto offers within a host only because its steps across hosts are optimistic (docs/plan-space.md#zero-3): plan it with strategy dp and sharding zero3", o.Sim.Step*1e3)
	return &e
}

// oneHost reports whether every device of groups is on one host.
func oneHost(c *cluster.Cluster, groups [][]int) bool {
	host := -1
	for _, g := range groups {
		for _, d := range g {
			if h := c.Devices[d].Host; host < 0 {
				host = h
			} else if h != host {
				return false
			}
		}
	}
	return true
}

// withSharding is a copy of pl whose replicated stages shard at level
// z, or nil when it has no replicated stage (the copy would be pl).
func withSharding(pl *sim.Plan, z sim.Sharding) *sim.Plan {
	if pl.Stages == nil || !slices.ContainsFunc(pl.Stages, func(st sim.Stage) bool { return len(st.Replicas) > 1 }) {
		return nil
	}
	cp := *pl
	cp.Stages = slices.Clone(pl.Stages)
	for i := range cp.Stages {
		if len(cp.Stages[i].Replicas) > 1 {
			cp.Stages[i].Sharding = z
		}
	}
	return &cp
}

// shardedVariants is props with each plan at every level of levels: a
// plan with no replicated stage once, unchanged; others once per level,
// in the order of levels.
func shardedVariants(props []Proposal, levels []sim.Sharding) []Proposal {
	var out []Proposal
	for _, pr := range props {
		if withSharding(pr.Plan, sim.NoSharding) == nil {
			out = append(out, pr)
			continue
		}
		for _, z := range levels {
			if z == sim.NoSharding {
				out = append(out, pr)
				continue
			}
			v := pr
			v.Plan, v.Sim = withSharding(pr.Plan, z), nil
			v.Notes = append(slices.Clone(pr.Notes), zeroNote(z))
			v.Estimate = 0 // the partitioner's model knows no sharding
			out = append(out, v)
		}
	}
	return out
}

func zeroNote(z sim.Sharding) string {
	if z == sim.ZeRO3 {
		return "replicated stages shard optimizer state, gradients and weights over their replicas, gathering each module's weights for its passes (ZeRO-3, FSDP FULL_SHARD)"
	}
	if z == sim.ZeRO2 {
		return "replicated stages shard optimizer state and gradients over their replicas (ZeRO-2)"
	}
	return "replicated stages shard optimizer state over their replicas (ZeRO-1)"
}
