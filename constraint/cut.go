package constraint

import (
	"path"
	"strings"

	"github.com/opplace/opplace/graph"
)

// cutKeys gives every forward op the piece the "cut at" rules put it in:
// the module it is in whose path a pattern matches, or, for an op in none
// (ops between blocks, a final norm or head), the piece of the forward op
// before it in topological order; ops before any such module form the
// first piece. Stages then start only where a matching module starts.
// Backward and update ops get "": the training step keeps them with their
// forward ops. Nil when no rule cuts at modules.
func (r *Resolved) cutKeys() []string {
	var at []string
	for i := range r.Set.Rules {
		if rule := &r.Set.Rules[i]; rule.Kind == Cut && rule.CutAt != "" {
			at = append(at, strings.TrimSuffix(rule.CutAt, "/"))
		}
	}
	if len(at) == 0 {
		return nil
	}
	g := r.Graph
	order, err := g.TopoOrder(g.BuildAdjacency())
	if err != nil {
		return nil // the import rejected cycles already
	}
	keys := make([]string, len(g.Ops))
	prev := "(before the first cut)"
	for _, op := range order {
		o := &g.Ops[op]
		if o.Phase != graph.Forward {
			continue
		}
		if k := matchingModule(o.Name, at); k != "" {
			prev = k
		}
		keys[op] = prev
	}
	return keys
}

// matchingModule is the outermost module path of name (with its trailing
// '/') that one of the patterns matches, or "".
func matchingModule(name string, patterns []string) string {
	for i := 1; i < len(name); i++ {
		if name[i] != '/' {
			continue
		}
		for _, p := range patterns {
			if ok, _ := path.Match(p, name[:i]); ok {
				return name[:i+1]
			}
		}
	}
	return ""
}

// CutKeys is the piece of every op the pipeline stages cut between under
// the cut rules, nil when there are none: the "cut at" pieces, or base()
// (the default module pieces) when no rule cuts at modules, with every
// op inside a "not inside" module joined into that module's piece unless
// its piece already holds the whole module.
func (r *Resolved) CutKeys(base func() []string) []string {
	var inside []string
	for i := range r.Set.Rules {
		if rule := &r.Set.Rules[i]; rule.Kind == Cut && rule.NotInside != "" {
			p := rule.NotInside
			if !strings.HasSuffix(p, "/") {
				p += "/"
			}
			inside = append(inside, p)
		}
	}
	if r.Cut == nil && len(inside) == 0 {
		return nil
	}
	keys := r.Cut
	if keys == nil {
		keys = base()
	}
	keys = append([]string(nil), keys...)
	g := r.Graph
	for _, p := range inside {
		// A piece that holds the whole module already keeps it whole.
		var under []int
		whole := true
		for i := range g.Ops {
			if g.Ops[i].Phase == graph.Forward && strings.HasPrefix(g.Ops[i].Name, p) {
				under = append(under, i)
				k := keys[i]
				whole = whole && k != "" && k == keys[under[0]] && strings.HasPrefix(p, k)
			}
		}
		if whole {
			continue
		}
		for _, i := range under {
			keys[i] = "(inside)" + p
		}
	}
	return keys
}
