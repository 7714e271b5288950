package partition

import (
	"strings"

	"github.com/opplace/opplace/graph"
)

// ModuleCutTolerance is how much worse the module-aligned split may be
// in the simulator than the split at op boundaries, by the objective the
// partitioners minimise (the slowest stage's time in the step, or the
// step under the latency objective; as a fraction of the latter), before
// the pipeline strategies cut at op boundaries instead. A stage boundary inside a block is one a training
// script cannot hand to torch.distributed.pipelining or DeepSpeed, so
// it is worth a few per cent: BERT-base's module-aligned pipelines take
// 5.9% (4xV100) and 8.2% (8xA100-2host) longer, GPT-2 XL's 3%, and
// Inception-V3's on hetero 19%, which falls back.
const ModuleCutTolerance = 0.10

// ModuleKeys is graph.ModuleKeys: each forward op's module, the piece
// pipeline stages cut around.
func ModuleKeys(g *graph.Graph) []string { return graph.ModuleKeys(g) }

// moduleCount is the number of distinct non-empty keys.
func moduleCount(keys []string) int {
	seen := map[string]bool{}
	for _, k := range keys {
		if k != "" {
			seen[k] = true
		}
	}
	return len(seen)
}

// modulePath is the module path of an op name: everything up to its last
// '/' ("/blocks/blocks.6/attn/" for "/blocks/blocks.6/attn/MatMul"), or
// "" for a name without one.
func modulePath(name string) string {
	i := strings.LastIndexByte(name, '/')
	if i <= 0 {
		return ""
	}
	return name[:i+1]
}

// Split is where a stage starts and ends, in the terms a training
// framework's pipeline takes: its first and last ops that compute
// (bookkeeping ops skipped), the module path its ops share, and the
// modules (at the level the stages are cut at) it starts and ends with.
type Split struct {
	FirstOp, LastOp         string
	ModulePrefix            string
	FirstModule, LastModule string
}

// StageSplit is the Split of a stage's forward ops (in plan order; its
// other ops when it has none), given the graph's ModuleKeys. ModulePrefix
// is the longest module path shared by the ops whose names carry one
// ("/" when they share only the root), empty when none does.
func StageSplit(g *graph.Graph, ops []graph.OpID, keys []string) Split {
	var s Split
	if len(ops) == 0 {
		return s
	}
	real := make([]graph.OpID, 0, len(ops))
	var named []string
	for _, op := range ops {
		if !g.IsBookkeeping(op) {
			real = append(real, op)
		}
		if name := g.Ops[op].Name; modulePath(name) != "" {
			named = append(named, name)
		}
	}
	if len(real) == 0 {
		real = ops
	}
	first, last := real[0], real[len(real)-1]
	s.FirstOp, s.LastOp = g.Ops[first].Name, g.Ops[last].Name
	if len(named) > 0 {
		s.ModulePrefix = modulePrefix(named)
		if s.ModulePrefix == "" {
			s.ModulePrefix = "/"
		}
	}
	module := func(op graph.OpID) string {
		if keys != nil && keys[op] != "" {
			return keys[op]
		}
		return modulePath(g.Ops[op].Name)
	}
	s.FirstModule, s.LastModule = module(first), module(last)
	return s
}

// CoarseModuleKeys is ModuleKeys of a coarse graph's fine ops, carried
// to the coarse ops (CoarseKeys).
func CoarseModuleKeys(c *graph.Coarse) []string { return CoarseKeys(c, ModuleKeys(c.Fine)) }

// CoarseKeys carries a key per fine op to the coarse ops: a coarse op
// takes the one non-empty key of its members, or "" when they have none
// or several.
func CoarseKeys(c *graph.Coarse, fine []string) []string {
	keys := make([]string, len(c.Graph.Ops))
	for k, members := range c.Members {
		key, mixed := "", false
		for _, m := range members {
			switch f := fine[m]; {
			case f == "" || f == key:
			case key == "":
				key = f
			default:
				mixed = true
			}
		}
		if !mixed {
			keys[k] = key
		}
	}
	return keys
}
