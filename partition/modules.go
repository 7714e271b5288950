package partition

import (
	"strings"

	"github.com/opplace/opplace/graph"
)

// MaxModuleShare is the largest share of a graph's forward ops (its
// bookkeeping ops left out) that one module may hold and still be a
// single piece the stages cut around; a larger module with sub-modules is
// cut around its sub-modules instead.
const MaxModuleShare = 1.0 / 8

// ModuleCutTolerance is how much longer a step the module-aligned split
// may take in the simulator than the split at op boundaries (as a
// fraction of the latter) before the pipeline strategies cut at op
// boundaries instead. A stage boundary inside a block is one a training
// script cannot hand to torch.distributed.pipelining or DeepSpeed, so
// it is worth a few per cent: BERT-base's module-aligned pipelines take
// 5.9% (4xV100) and 8.2% (8xA100-2host) longer, GPT-2 XL's 3%, and
// Inception-V3's on hetero 19%, which falls back.
const ModuleCutTolerance = 0.10

// slashes are the positions of the '/' that end module path components
// of name, the root's leading '/' left out: "/blocks/blocks.6/attn/MatMul"
// has three (after "blocks", "blocks.6" and "attn"), "conv1/Conv2D" one.
func slashes(name string) []int {
	var s []int
	for i := 0; i < len(name); i++ {
		if name[i] == '/' && i > 0 {
			s = append(s, i)
		}
	}
	return s
}

// ModuleKeys gives every forward op of g the module the pipeline stages
// treat as one piece: "/blocks/blocks.6/" for "/blocks/blocks.6/attn/MatMul"
// in a GPT-2 export. It starts from the top-level modules (the first
// component of the op names' module paths) and replaces every module
// holding more than MaxModuleShare of the forward ops by its sub-modules,
// until none is left to replace: the stages then cut only between
// sibling modules (between /blocks/blocks.5/ and /blocks/blocks.6/),
// never inside one. An op directly inside a replaced module, an op whose
// name carries no module path, and every backward and update op (they
// follow their forward op's unit) get "". Keys depend only on op names,
// types and phases.
func ModuleKeys(g *graph.Graph) []string {
	n := len(g.Ops)
	keys := make([]string, n)
	depth := make([]int, n)
	cuts := make([][]int, n)
	var total float64
	weight := make([]float64, n)
	for i := range g.Ops {
		op := &g.Ops[i]
		if op.Phase != graph.Forward {
			continue
		}
		cuts[i] = slashes(op.Name)
		if len(cuts[i]) > 0 {
			depth[i] = 1
		}
		if !g.IsBookkeeping(graph.OpID(i)) {
			weight[i] = 1
			total++
		}
	}
	key := func(i int) string {
		if depth[i] == 0 {
			return ""
		}
		return g.Ops[i].Name[:cuts[i][depth[i]-1]+1]
	}
	for {
		share := map[string]float64{}
		deeper := map[string]bool{} // the module has ops in sub-modules
		for i := range keys {
			if k := key(i); k != "" {
				share[k] += weight[i]
				if len(cuts[i]) > depth[i] {
					deeper[k] = true
				}
			}
		}
		changed := false
		for i := range keys {
			k := key(i)
			if k == "" || !deeper[k] || share[k] <= MaxModuleShare*total {
				continue
			}
			if len(cuts[i]) > depth[i] {
				depth[i]++
			} else {
				depth[i] = 0
			}
			changed = true
		}
		if !changed {
			break
		}
	}
	for i := range keys {
		keys[i] = key(i)
	}
	return keys
}

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
