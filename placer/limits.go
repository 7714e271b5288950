package placer

import (
	"fmt"

	"github.com/opplace/opplace/graph"
)

// limits are the hard rules every placer obeys besides memory: an op
// pinned by Op.Device runs there, an op never runs on a device type that
// cannot run it (+Inf time), and ops sharing an Op.Colocate key share a
// device. Ops are gathered into colocation classes (singletons for
// ungrouped ops); each class has the devices all its members allow.
type limits struct {
	// class is each op's colocation class.
	class []int32
	// allowed lists each class's devices, ascending.
	allowed [][]int
}

// newLimits derives the classes and their devices; an error names an op
// no device can take.
func newLimits(p *Problem) (*limits, error) {
	g, t := p.Graph, p.Costs
	n, nd := len(g.Ops), t.NumDevices()
	pins, err := p.pinned()
	if err != nil {
		return nil, err
	}
	coloc := graph.ColocationGroups(g)
	l := &limits{class: make([]int32, n)}
	// rootClass[r] is the class of the group whose root op is r, or -1.
	rootClass := make([]int32, n)
	for i := range rootClass {
		rootClass[i] = -1
	}
	all := make([]int, nd)
	for d := range all {
		all[d] = d
	}
	for i := 0; i < n; i++ {
		op := graph.OpID(i)
		r := coloc.Find(op)
		c := rootClass[r]
		if c < 0 {
			c = int32(len(l.allowed))
			rootClass[r] = c
			l.allowed = append(l.allowed, all)
		}
		l.class[i] = c
		// Narrow the class's devices to those op allows; most ops allow
		// every device their class has, so look before allocating.
		prev := l.allowed[c]
		allows := func(d int) bool { return (pins[i] < 0 || pins[i] == d) && t.CanRun(op, d) }
		narrow := false
		for _, d := range prev {
			if !allows(d) {
				narrow = true
				break
			}
		}
		if !narrow {
			continue
		}
		var keep []int
		for _, d := range prev {
			if allows(d) {
				keep = append(keep, d)
			}
		}
		if len(keep) == 0 {
			return nil, l.noDevice(p, op, pins)
		}
		l.allowed[c] = keep
	}
	return l, nil
}

// noDevice explains why no device can take op's class.
func (l *limits) noDevice(p *Problem, op graph.OpID, pins []int) error {
	g, c := p.Graph, p.Costs.Cluster
	name := g.Ops[op].Name
	runs := 0
	for d := range c.Devices {
		if p.Costs.CanRun(op, d) {
			runs++
		}
	}
	switch {
	case runs == 0:
		return Infeasible(p, fmt.Sprintf("op %q (%s) cannot run on any device type of the cluster (its time is infinite on all of them); add a device type that runs it", name, g.Ops[op].Type))
	case pins[op] >= 0 && !p.Costs.CanRun(op, pins[op]):
		return fmt.Errorf("op %q is pinned to %s, whose device type cannot run it; pin it elsewhere or drop the pin", name, c.Devices[pins[op]].Name)
	default:
		return fmt.Errorf("op %q is colocated (group %q) with ops that no common device can run or that are pinned elsewhere; fix the pins or the colocation group", name, g.Ops[op].Colocate)
	}
}

// devices is the devices op may use.
func (l *limits) devices(op graph.OpID) []int { return l.allowed[l.class[op]] }

// allows reports whether op may run on device d.
func (l *limits) allows(op graph.OpID, d int) bool {
	for _, a := range l.allowed[l.class[op]] {
		if a == d {
			return true
		}
	}
	return false
}
