package placer

import (
	"fmt"
	"math/bits"

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
	// apart[k][c] is class c's group in separate rule k (Problem.Apart),
	// -1 for none; nil without such rules. key[c] numbers class c's groups
	// over every rule, so classes kept apart differently have different
	// keys (nil without such rules).
	apart [][]int8
	key   []int32
}

// apartKey is op's key among the separate rules' groups: ops with
// different keys are bound differently, and placers that merge ops into
// units keep them in different units. 0 without such rules.
func (l *limits) apartKey(op graph.OpID) int32 {
	if l.key == nil {
		return 0
	}
	return l.key[l.class[op]]
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
	if err := l.groupsApart(p); err != nil {
		return nil, err
	}
	return l, nil
}

// groupsApart gives each class its group in every separate rule; a class
// whose ops fall in two groups of one rule is an error, since colocated
// ops share a device.
func (l *limits) groupsApart(p *Problem) error {
	if len(p.Apart) == 0 {
		return nil
	}
	g := p.Graph
	l.apart = make([][]int8, len(p.Apart))
	for k, a := range p.Apart {
		grp := make([]int8, len(l.allowed))
		first := make([]graph.OpID, len(l.allowed))
		for c := range grp {
			grp[c] = -1
		}
		for i, x := range a.Group {
			if x < 0 {
				continue
			}
			c := l.class[i]
			switch {
			case grp[c] < 0:
				grp[c], first[c] = x, graph.OpID(i)
			case grp[c] != x:
				return fmt.Errorf("%s: op %q and op %q are in different groups but must share a device (colocated: %q); drop one from its group or the colocation",
					a.Rule, g.Ops[first[c]].Name, g.Ops[i].Name, g.Ops[i].Colocate)
			}
		}
		l.apart[k] = grp
	}
	l.key = make([]int32, len(l.allowed))
	ids := map[string]int32{}
	sig := make([]byte, len(l.apart))
	for c := range l.key {
		for k := range l.apart {
			sig[k] = byte(l.apart[k][c])
		}
		id, ok := ids[string(sig)]
		if !ok {
			id = int32(len(ids))
			ids[string(sig)] = id
		}
		l.key[c] = id
	}
	return nil
}

// apartHosts tracks, per separate rule and device, the groups placed
// there so far, for placers that place one class at a time.
type apartHosts struct {
	l *limits
	// mask[k][d] has bit x set when group x of rule k is on device d;
	// groups[k] has a bit for every group of rule k some op is in;
	// usable[k][x][d] says whether some op of group x may run on d.
	mask   [][]uint64
	groups []uint64
	usable [][][]bool
}

func newApartHosts(l *limits, nd int) *apartHosts {
	if l.apart == nil {
		return nil
	}
	h := &apartHosts{l: l, mask: make([][]uint64, len(l.apart)), groups: make([]uint64, len(l.apart)), usable: make([][][]bool, len(l.apart))}
	for k, grp := range l.apart {
		h.mask[k] = make([]uint64, nd)
		h.usable[k] = make([][]bool, 64)
		// A group's usable devices are those every class of it may use
		// (its pieces without gradients, say, may go where the rest may
		// not), or any of them when no device takes all.
		all := make([][]int, 64)
		any := make([][]bool, 64)
		for c, x := range grp {
			if x < 0 {
				continue
			}
			h.groups[k] |= 1 << uint(x)
			if any[x] == nil {
				any[x], all[x] = make([]bool, nd), make([]int, nd)
			}
			for _, d := range l.allowed[c] {
				any[x][d] = true
				all[x][d]++
			}
		}
		classes := make([]int, 64)
		for _, x := range grp {
			if x >= 0 {
				classes[x]++
			}
		}
		for x := range any {
			if any[x] == nil {
				continue
			}
			u := make([]bool, nd)
			found := false
			for d := range u {
				u[d] = all[x][d] == classes[x]
				found = found || u[d]
			}
			if !found {
				u = any[x]
			}
			h.usable[k][x] = u
		}
	}
	return h
}

// clash reports whether placing op on d would put it beside an op of
// another group of some separate rule, or take the last device free of
// the rule's groups that a group not yet placed needs: a list placer
// that spread the first group over every device would leave the others
// none. A nil tracker never clashes.
func (h *apartHosts) clash(op graph.OpID, d int) bool {
	if h == nil {
		return false
	}
	c := h.l.class[op]
	for k, grp := range h.l.apart {
		x := grp[c]
		if x < 0 {
			continue
		}
		mask := h.mask[k]
		bit := uint64(1) << uint(x)
		if mask[d]&^bit != 0 {
			return true
		}
		if mask[d]&bit != 0 {
			continue // x is there already
		}
		// Groups with no op yet on a device all of them may use wait for
		// one.
		var homed uint64
		for e, m := range mask {
			for w := m; w != 0; w &= w - 1 {
				if y := bits.TrailingZeros64(w); h.usable[k][y][e] {
					homed |= 1 << uint(y)
				}
			}
		}
		if waiting := h.groups[k] &^ homed &^ bit; waiting != 0 && !h.roomAfter(k, d, waiting) {
			return true
		}
	}
	return false
}

// roomAfter reports whether, with device d taken, the groups of rule k
// in waiting (none of whose ops is yet on a device the whole group may
// use) each still have a free device they may use, and together as many
// as there are of them.
func (h *apartHosts) roomAfter(k, d int, waiting uint64) bool {
	mask := h.mask[k]
	union := 0
	for e, m := range mask {
		if m != 0 || e == d {
			continue
		}
		usable := false
		for w := waiting; w != 0; w &= w - 1 {
			if h.usable[k][bits.TrailingZeros64(w)][e] {
				usable = true
				break
			}
		}
		if usable {
			union++
		}
	}
	if union < bits.OnesCount64(waiting) {
		return false
	}
	for w := waiting; w != 0; w &= w - 1 {
		y := bits.TrailingZeros64(w)
		ok := false
		for e, m := range mask {
			if m == 0 && e != d && h.usable[k][y][e] {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// host records op on d.
func (h *apartHosts) host(op graph.OpID, d int) {
	if h == nil {
		return
	}
	c := h.l.class[op]
	for k, grp := range h.l.apart {
		if x := grp[c]; x >= 0 {
			h.mask[k][d] |= 1 << uint(x)
		}
	}
}

// apartOK reports whether a whole placement keeps every separate rule.
func (l *limits) apartOK(dev []int, nd int) bool {
	h := newApartHosts(l, nd)
	if h == nil {
		return true
	}
	for op, d := range dev {
		if h.clash(graph.OpID(op), d) {
			return false
		}
		h.host(graph.OpID(op), d)
	}
	return true
}

// noApart is the error of a placer that does not honour separate rules,
// so that it never returns a placement breaking one.
func noApart(p *Problem, placer string) error {
	if len(p.Apart) == 0 {
		return nil
	}
	return fmt.Errorf("%s does not place under separate rules (%s); m-etf, heft, m-sct, m-topo, expert, ilp and local do", placer, p.Apart[0].Rule)
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
