package strategy

import (
	"fmt"
	"slices"

	"github.com/opplace/opplace/sim"
)

// ParseSharding reads the sharding a user allows replicated stages:
// "auto" (or "") lets each strategy offer its ZeRO variants, "none",
// "zero1" or "zero2" allow only that level.
func ParseSharding(s string) (string, error) {
	if s == "" || s == "auto" {
		return "", nil
	}
	if _, err := sim.ParseSharding(s); err != nil {
		return "", fmt.Errorf("unknown sharding %q: use auto, none, zero1 or zero2", s)
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
	if z == sim.ZeRO2 {
		return "replicated stages shard optimizer state and gradients over their replicas (ZeRO-2)"
	}
	return "replicated stages shard optimizer state over their replicas (ZeRO-1)"
}
