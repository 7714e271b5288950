package graph

// MaxModuleShare is the largest share of a graph's forward ops (its
// bookkeeping ops left out) that one module may hold and still be a
// single piece the stages cut around; a larger module with sub-modules is
// cut around its sub-modules instead.
const MaxModuleShare = 1.0 / 8

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
func ModuleKeys(g *Graph) []string {
	n := len(g.Ops)
	keys := make([]string, n)
	depth := make([]int, n)
	cuts := make([][]int, n)
	var total float64
	weight := make([]float64, n)
	for i := range g.Ops {
		op := &g.Ops[i]
		if op.Phase != Forward {
			continue
		}
		cuts[i] = slashes(op.Name)
		if len(cuts[i]) > 0 {
			depth[i] = 1
		}
		if !g.IsBookkeeping(OpID(i)) {
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
