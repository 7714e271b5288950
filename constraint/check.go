package constraint

import (
	"fmt"
	"slices"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
)

// Checker checks plans against the rules. Plans may be of another graph
// than the one the rules were resolved on (a fused one): Of maps each
// resolved op to the op of the planned graph that runs it.
type Checker struct {
	r *Resolved
	// of maps a resolved op to its planned op; nil: the same graph.
	of []graph.OpID
	// cut is each resolved op's piece under the cut rules, nil for none.
	cut []string
}

// Checker checks plans of a graph whose op of[op] runs resolved op op (of
// nil: plans of the resolved graph itself); cut is each op's piece under
// the cut rules (CutKeys), nil when they set none.
func (r *Resolved) Checker(of []graph.OpID, cut []string) *Checker {
	return &Checker{r: r, of: of, cut: cut}
}

// Violation is a plan breaking a hard rule.
type Violation struct {
	Rule string
	Msg  string
}

func (v *Violation) Error() string { return "breaks " + v.Rule + ": " + v.Msg }

// placed is where a plan runs each op: every device, over the replicas of
// its stage, and its stage.
type placed struct {
	pl     *sim.Plan
	stages []sim.Stage
	// slot[d] is the stage and position in the stage's first replica of
	// device d.
	slot [][2]int
	of   []graph.OpID
}

func (c *Checker) place(pl *sim.Plan) *placed {
	nd := len(c.r.Cluster.Devices)
	p := &placed{pl: pl, stages: pl.StageDevices(nd), slot: make([][2]int, nd), of: c.of}
	for s, st := range p.stages {
		for i, d := range st.Replicas[0] {
			p.slot[d] = [2]int{s, i}
		}
	}
	return p
}

// op is the planned op of resolved op x.
func (p *placed) op(x graph.OpID) graph.OpID {
	if p.of == nil {
		return x
	}
	return p.of[x]
}

// devices appends the devices that run resolved op x to buf.
func (p *placed) devices(x graph.OpID, buf []int) []int {
	op := p.op(x)
	d := p.pl.Device[op]
	if p.pl.Stages == nil {
		return append(buf, d)
	}
	s := p.slot[d]
	for _, rep := range p.stages[s[0]].Replicas {
		buf = append(buf, rep[s[1]])
	}
	return buf
}

// stage is the stage of resolved op x.
func (p *placed) stage(x graph.OpID) int {
	if p.pl.OpStage == nil {
		return 0
	}
	return p.pl.OpStage[p.op(x)]
}

// Check returns the first hard rule pl breaks, as a *Violation, or nil.
// Memory rules (reserve) are kept by the cluster Resolve made: a plan
// that fits its devices keeps them.
func (c *Checker) Check(pl *sim.Plan) error {
	p := c.place(pl)
	g, cl := c.r.Graph, c.r.Cluster
	var buf []int
	for _, b := range c.r.Bindings {
		rule := b.Rule
		switch rule.Kind {
		case Pin, Avoid:
			for _, op := range b.Ops {
				buf = p.devices(op, buf[:0])
				for _, d := range buf {
					if slices.Contains(b.Devices, d) != (rule.Kind == Pin) {
						return &Violation{rule.Describe(), fmt.Sprintf("op %q runs on %s", g.Ops[op].Name, cl.Devices[d].Name)}
					}
				}
			}
		case Colocate:
			first := p.devices(b.Ops[0], nil)
			for _, op := range b.Ops[1:] {
				buf = p.devices(op, buf[:0])
				if !slices.Equal(buf, first) {
					return &Violation{rule.Describe(), fmt.Sprintf("op %q runs on %s, op %q on %s", g.Ops[b.Ops[0]].Name, c.names(first), g.Ops[op].Name, c.names(buf))}
				}
			}
		case Separate:
			owner := make([]int, len(cl.Devices)) // group+1 on each device
			who := make([]graph.OpID, len(cl.Devices))
			for k, ops := range b.Groups {
				for _, op := range ops {
					buf = p.devices(op, buf[:0])
					for _, d := range buf {
						switch owner[d] {
						case 0:
							owner[d], who[d] = k+1, op
						case k + 1:
						default:
							return &Violation{rule.Describe(), fmt.Sprintf("op %q (group %d) and op %q (group %d) both run on %s", g.Ops[who[d]].Name, owner[d], g.Ops[op].Name, k+1, cl.Devices[d].Name)}
						}
					}
				}
			}
		}
	}
	if c.cut != nil && pl.NumStages() > 1 {
		stageOf := map[string]int{}
		first := map[string]graph.OpID{}
		for i, k := range c.cut {
			if k == "" {
				continue
			}
			op := graph.OpID(i)
			s := p.stage(op)
			if prev, ok := stageOf[k]; !ok {
				stageOf[k], first[k] = s, op
			} else if prev != s {
				return &Violation{c.cutRules(), fmt.Sprintf("op %q is in stage %d and op %q, of the same piece %s, in stage %d", g.Ops[first[k]].Name, prev, g.Ops[i].Name, k, s)}
			}
		}
	}
	return nil
}

// Penalty is what the prefer rules add to pl's objective, in seconds:
// each rule's weight (milliseconds) for every op it selects that runs
// against it.
func (c *Checker) Penalty(pl *sim.Plan) float64 {
	var ms float64
	for _, n := range c.Against(pl) {
		ms += float64(n.Ops) * n.Rule.Weight
	}
	return ms / 1000
}

// Against counts, per prefer rule, the ops pl runs against it.
type Against struct {
	Rule *Rule
	Ops  int
}

// Against lists the prefer rules pl runs ops against, in rule order.
func (c *Checker) Against(pl *sim.Plan) []Against {
	var out []Against
	var p *placed
	var buf []int
	for _, b := range c.r.Bindings {
		if b.Rule.Kind != Prefer {
			continue
		}
		if p == nil {
			p = c.place(pl)
		}
		n := 0
		for _, op := range b.Ops {
			buf = p.devices(op, buf[:0])
			for _, d := range buf {
				if slices.Contains(b.Devices, d) == b.Rule.Not {
					n++
					break
				}
			}
		}
		if n > 0 {
			out = append(out, Against{b.Rule, n})
		}
	}
	return out
}

func (c *Checker) names(devs []int) string {
	var s []string
	for _, d := range devs {
		s = append(s, c.r.Cluster.Devices[d].Name)
	}
	return strings.Join(s, ", ")
}

func (c *Checker) cutRules() string {
	var names []string
	for _, b := range c.r.Bindings {
		if b.Rule.Kind == Cut {
			names = append(names, b.Rule.Describe())
		}
	}
	return strings.Join(names, "; ")
}

// Prefers reports whether the set has soft rules.
func (r *Resolved) Prefers() bool {
	for i := range r.Set.Rules {
		if r.Set.Rules[i].Kind == Prefer {
			return true
		}
	}
	return false
}

// DevicesOf lists the devices pl runs any of ops on, ascending.
func (c *Checker) DevicesOf(pl *sim.Plan, ops []graph.OpID) []int {
	p := c.place(pl)
	used := make([]bool, len(c.r.Cluster.Devices))
	var buf []int
	for _, op := range ops {
		for _, d := range p.devices(op, buf[:0]) {
			used[d] = true
		}
	}
	var out []int
	for d, u := range used {
		if u {
			out = append(out, d)
		}
	}
	return out
}
