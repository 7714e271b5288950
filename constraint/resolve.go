package constraint

import (
	"encoding/binary"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
)

// Resolved is a Set bound to one graph and cluster: which ops and devices
// each rule names, and what that leaves every op. Device indices are those
// of Cluster, the cluster plans are made on: the given one restricted by
// the limit rules, with the reserved memory taken off every device.
type Resolved struct {
	Set     *Set
	Graph   *graph.Graph
	Cluster *cluster.Cluster
	// Bindings are, per rule of Set, the ops and devices it binds.
	Bindings []Binding
	// Allowed is each op's devices under the pin and avoid rules, nil when
	// there are none.
	Allowed *graph.DeviceSets
	// Apart is, per separate rule (in Set order), each op's group or -1.
	Apart []Apart
	// Reserved is, per device of Cluster, the memory the reserve rules keep
	// free (already taken off the device's memory).
	Reserved []int64
	// Cut is each op's piece for pipeline stages under the cut rules
	// (ops with one non-empty key share a stage), nil without cut rules.
	Cut []string
	// Removed names the devices of the given cluster the limit rules took
	// out, in cluster order.
	Removed []string

	colocated [][]graph.OpID
}

// Binding is what one rule binds.
type Binding struct {
	Rule *Rule
	// Ops are the ops the rule selects (for separate, every group's),
	// ascending.
	Ops []graph.OpID
	// Groups (separate) are the ops of each group, ascending.
	Groups [][]graph.OpID
	// Devices are the devices the rule's target names (pin, avoid,
	// reserve, prefer), ascending, in Cluster's indices.
	Devices []int
}

// Apart is one separate rule resolved: Group[op] is op's group, -1 for
// ops in none.
type Apart struct {
	Rule  string
	Group []int8
}

// InputError is a rule that cannot be resolved: a selector that selects no
// op, a target that names no device, a malformed pattern.
type InputError struct {
	Rule string
	Msg  string
}

func (e *InputError) Error() string { return e.Rule + ": " + e.Msg }

// ConflictError is a set of rules that no plan can meet: Rules name them.
type ConflictError struct {
	Rules []string
	Msg   string
}

func (e *ConflictError) Error() string {
	return "the rules cannot all hold: " + e.Msg + " (" + strings.Join(e.Rules, "; ") + ")"
}

// Describe names a rule for messages: its spelling and where it was
// written.
func (r *Rule) Describe() string {
	if r.Source == "" {
		return "rule " + quote(r.String())
	}
	return fmt.Sprintf("rule %s (%s)", quote(r.String()), r.Source)
}

func quote(s string) string { return "`" + s + "`" }

// Resolve binds set to graph g (the training step when training: phase
// selectors need its backward and update ops) and cluster c. It fails
// with an *InputError for a rule that binds nothing or names what the
// cluster lacks, and with a *ConflictError when the rules contradict each
// other or leave ops no device that can hold them. It does not change g:
// ApplyColocation does.
func Resolve(set *Set, g *graph.Graph, c *cluster.Cluster) (*Resolved, error) {
	r := &Resolved{Set: set, Graph: g, Bindings: make([]Binding, len(set.Rules))}
	for i := range set.Rules {
		r.Bindings[i].Rule = &set.Rules[i]
	}
	// Ops first: every selector must select something.
	for i := range set.Rules {
		rule, b := &set.Rules[i], &r.Bindings[i]
		var err error
		switch rule.Kind {
		case Pin, Avoid, Colocate, Prefer:
			b.Ops, err = selectOps(g, rule, rule.Ops)
		case Separate:
			for _, grp := range rule.Groups {
				ops, err := selectOps(g, rule, grp)
				if err != nil {
					return nil, err
				}
				b.Groups = append(b.Groups, ops)
				b.Ops = append(b.Ops, ops...)
			}
			slices.Sort(b.Ops)
		}
		if err != nil {
			return nil, err
		}
	}
	var err error
	if r.Cluster, r.Removed, err = r.limit(c); err != nil {
		return nil, err
	}
	for i := range set.Rules {
		rule, b := &set.Rules[i], &r.Bindings[i]
		switch rule.Kind {
		case Pin, Avoid, Reserve, Prefer:
			if b.Devices, err = r.targetDevices(c, rule, rule.Target); err != nil {
				return nil, err
			}
		}
	}
	if err := r.reserve(); err != nil {
		return nil, err
	}
	if err := r.allowed(); err != nil {
		return nil, err
	}
	if err := r.separate(); err != nil {
		return nil, err
	}
	r.colocate()
	if err := r.checkClasses(); err != nil {
		return nil, err
	}
	if err := r.checkMemory(); err != nil {
		return nil, err
	}
	r.Cut = r.cutKeys()
	return r, nil
}

// selectOps is the ops any of sels selects, ascending; none is an error.
func selectOps(g *graph.Graph, rule *Rule, sels []Selector) ([]graph.OpID, error) {
	var ops []graph.OpID
	for _, s := range sels {
		match, err := matcher(s)
		if err != nil {
			return nil, &InputError{rule.Describe(), err.Error()}
		}
		n := 0
		for i := range g.Ops {
			if match(&g.Ops[i]) {
				ops = append(ops, graph.OpID(i))
				n++
			}
		}
		if n == 0 {
			return nil, &InputError{rule.Describe(), fmt.Sprintf("selector %s selects no op of graph %q%s", quote(s.String()), g.Name, nameHint(g, s))}
		}
	}
	slices.Sort(ops)
	return slices.Compact(ops), nil
}

// nameHint shows what op names look like, for a name or module selector
// that matched nothing.
func nameHint(g *graph.Graph, s Selector) string {
	if s.By != SelectName && s.By != SelectModule && s.By != SelectRegex || len(g.Ops) == 0 {
		return ""
	}
	mid := g.Ops[len(g.Ops)/2].Name
	return fmt.Sprintf("; op names look like %q (name: patterns use path.Match, where * stops at /; module: takes a path prefix)", mid)
}

// matcher compiles a selector.
func matcher(s Selector) (func(*graph.Op) bool, error) {
	switch s.By {
	case SelectName, "":
		if _, err := path.Match(s.Pattern, ""); err != nil {
			return nil, fmt.Errorf("malformed name pattern %q: %v", s.Pattern, err)
		}
		return func(o *graph.Op) bool { ok, _ := path.Match(s.Pattern, o.Name); return ok }, nil
	case SelectRegex:
		re, err := regexp.Compile(s.Pattern)
		if err != nil {
			return nil, fmt.Errorf("malformed regular expression %q: %v", s.Pattern, err)
		}
		return func(o *graph.Op) bool { return re.MatchString(o.Name) }, nil
	case SelectType:
		return func(o *graph.Op) bool { return o.Type == s.Pattern }, nil
	case SelectModule:
		prefix := s.Pattern
		if !strings.HasSuffix(prefix, "/") {
			prefix += "/"
		}
		return func(o *graph.Op) bool { return strings.HasPrefix(o.Name, prefix) }, nil
	case SelectPhase:
		for _, ph := range []graph.Phase{graph.Forward, graph.Backward, graph.Update} {
			if ph.String() == s.Pattern {
				return func(o *graph.Op) bool { return o.Phase == ph }, nil
			}
		}
		return nil, fmt.Errorf("unknown phase %q: use forward, backward or update", s.Pattern)
	}
	return nil, fmt.Errorf("unknown selector kind %q: use name:, re:, type:, module: or phase:", s.By)
}

// targetDevices resolves t on the planning cluster; given is the cluster
// before the limit rules, so a target they removed reads as such.
func (r *Resolved) targetDevices(given *cluster.Cluster, rule *Rule, t Target) ([]int, error) {
	devs := matchDevices(r.Cluster, t)
	if len(devs) > 0 {
		return devs, nil
	}
	if len(matchDevices(given, t)) > 0 {
		if rule.Kind == Pin {
			return nil, &ConflictError{[]string{rule.Describe(), r.limitRules()}, fmt.Sprintf("%s names only devices the limit rules leave out", quote(t.String()))}
		}
		return nil, nil // avoiding or reserving what is not used anyway
	}
	return nil, &InputError{rule.Describe(), fmt.Sprintf("target %s names no device of cluster %q (%s)", quote(t.String()), given.Name, clusterNames(given, t))}
}

// matchDevices is the devices of c a target names, ascending.
func matchDevices(c *cluster.Cluster, t Target) []int {
	var devs []int
	for d := range c.Devices {
		dev := &c.Devices[d]
		var ok bool
		switch t.By {
		case TargetAll:
			ok = true
		case TargetType:
			ok = dev.Type.Name == t.Name
		case TargetHost:
			ok = c.Hosts[dev.Host].Name == t.Name
		default:
			ok = dev.Name == t.Name
		}
		if ok {
			devs = append(devs, d)
		}
	}
	return devs
}

// clusterNames lists what a target of t's kind could name in c.
func clusterNames(c *cluster.Cluster, t Target) string {
	var names []string
	for d := range c.Devices {
		var n string
		switch t.By {
		case TargetType:
			n = "type:" + c.Devices[d].Type.Name
		case TargetHost:
			n = "host:" + c.Hosts[c.Devices[d].Host].Name
		default:
			n = c.Devices[d].Name
		}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if len(names) > 8 {
		names = append(names[:8], fmt.Sprintf("and %d more", len(names)-8))
	}
	return "it has " + strings.Join(names, ", ")
}

// limit is the cluster the limit rules leave: only the devices every
// "only" rule names, then at most the smallest device count, keeping the
// fastest devices (peak fp32 FLOP/s, then memory, then cluster order).
func (r *Resolved) limit(c *cluster.Cluster) (*cluster.Cluster, []string, error) {
	keep := make([]bool, len(c.Devices))
	for d := range keep {
		keep[d] = true
	}
	most := len(c.Devices)
	limited := false
	for i := range r.Set.Rules {
		rule := &r.Set.Rules[i]
		if rule.Kind != Limit {
			continue
		}
		limited = true
		if rule.MaxDevices > 0 {
			most = min(most, rule.MaxDevices)
		}
		if len(rule.Only) > 0 {
			named := make([]bool, len(c.Devices))
			for _, t := range rule.Only {
				devs := matchDevices(c, t)
				if len(devs) == 0 {
					return nil, nil, &InputError{rule.Describe(), fmt.Sprintf("target %s names no device of cluster %q (%s)", quote(t.String()), c.Name, clusterNames(c, t))}
				}
				for _, d := range devs {
					named[d] = true
				}
			}
			for d := range keep {
				keep[d] = keep[d] && named[d]
			}
		}
	}
	if !limited {
		return c, nil, nil
	}
	var devs []int
	for d, k := range keep {
		if k {
			devs = append(devs, d)
		}
	}
	if len(devs) == 0 {
		return nil, nil, &ConflictError{[]string{r.limitRules()}, "no device is in every limit rule's list"}
	}
	if len(devs) > most {
		rank := slices.Clone(devs)
		slices.SortStableFunc(rank, func(a, b int) int {
			fa, fb := c.Devices[a].Type.FLOPS(graph.Float32), c.Devices[b].Type.FLOPS(graph.Float32)
			switch {
			case fa != fb:
				if fa > fb {
					return -1
				}
				return 1
			case c.Devices[a].Memory != c.Devices[b].Memory:
				if c.Devices[a].Memory > c.Devices[b].Memory {
					return -1
				}
				return 1
			}
			return a - b
		})
		devs = rank[:most]
		slices.Sort(devs)
	}
	var removed []string
	for d := range c.Devices {
		if !slices.Contains(devs, d) {
			removed = append(removed, c.Devices[d].Name)
		}
	}
	return c.Sub(devs), removed, nil
}

// limitRules names the limit rules, for conflicts.
func (r *Resolved) limitRules() string {
	var names []string
	for i := range r.Set.Rules {
		if r.Set.Rules[i].Kind == Limit {
			names = append(names, r.Set.Rules[i].Describe())
		}
	}
	return strings.Join(names, "; ")
}

// reserve takes each device's largest reservation off its memory.
func (r *Resolved) reserve() error {
	c := r.Cluster
	r.Reserved = make([]int64, len(c.Devices))
	any := false
	for _, b := range r.Bindings {
		rule := b.Rule
		if rule.Kind != Reserve {
			continue
		}
		for _, d := range b.Devices {
			amount := rule.Bytes
			if rule.Fraction > 0 {
				amount = int64(rule.Fraction * float64(c.Devices[d].Memory))
			}
			if amount >= c.Devices[d].Memory {
				return &ConflictError{[]string{rule.Describe()}, fmt.Sprintf("it reserves %s of %s, which holds %s", cluster.FormatBytes(amount), c.Devices[d].Name, cluster.FormatBytes(c.Devices[d].Memory))}
			}
			r.Reserved[d] = max(r.Reserved[d], amount)
			any = true
		}
	}
	if !any {
		return nil
	}
	all := make([]int, len(c.Devices))
	for d := range all {
		all[d] = d
	}
	sub := c.Sub(all)
	for d := range sub.Devices {
		sub.Devices[d].Memory -= r.Reserved[d]
	}
	r.Cluster = sub
	return nil
}

// allowed narrows each op's devices by the pin and avoid rules.
func (r *Resolved) allowed() error {
	g, nd := r.Graph, len(r.Cluster.Devices)
	var sets *graph.DeviceSets
	// why[op] is the last rule that narrowed op, for conflicts.
	why := map[graph.OpID][]string{}
	for _, b := range r.Bindings {
		if b.Rule.Kind != Pin && b.Rule.Kind != Avoid {
			continue
		}
		if sets == nil {
			sets = graph.NewDeviceSets(len(g.Ops), nd)
			for op := range g.Ops {
				for d := 0; d < nd; d++ {
					sets.Add(graph.OpID(op), d)
				}
			}
		}
		for _, op := range b.Ops {
			for d := 0; d < nd; d++ {
				if slices.Contains(b.Devices, d) == (b.Rule.Kind == Avoid) {
					sets.Remove(op, d)
				}
			}
			why[op] = append(why[op], b.Rule.Describe())
			if empty(sets, op, nd) {
				return &ConflictError{why[op], fmt.Sprintf("they leave op %q no device", g.Ops[op].Name)}
			}
		}
	}
	r.Allowed = sets
	return nil
}

func empty(s *graph.DeviceSets, op graph.OpID, nd int) bool {
	for d := 0; d < nd; d++ {
		if s.Has(op, d) {
			return false
		}
	}
	return true
}

// separate gives every op its group in each separate rule.
func (r *Resolved) separate() error {
	g := r.Graph
	for _, b := range r.Bindings {
		if b.Rule.Kind != Separate {
			continue
		}
		if len(b.Groups) > 64 {
			return &InputError{b.Rule.Describe(), "a separate rule takes at most 64 groups"}
		}
		a := Apart{Rule: b.Rule.Describe(), Group: make([]int8, len(g.Ops))}
		for i := range a.Group {
			a.Group[i] = -1
		}
		for k, ops := range b.Groups {
			for _, op := range ops {
				if x := a.Group[op]; x >= 0 && int(x) != k {
					return &ConflictError{[]string{b.Rule.Describe()}, fmt.Sprintf("op %q is in group %d and group %d, which must not share a device", g.Ops[op].Name, x+1, k+1)}
				}
				a.Group[op] = int8(k)
			}
		}
		r.Apart = append(r.Apart, a)
	}
	return nil
}

// colocate records the ops each colocate rule ties; ApplyColocation ties
// them in the graph.
func (r *Resolved) colocate() {
	for _, b := range r.Bindings {
		if b.Rule.Kind == Colocate {
			r.colocated = append(r.colocated, b.Ops)
		}
	}
}

// ApplyColocation gives the ops of every colocate rule, and every op
// already colocated with one of them, one Colocate key, so every strategy
// keeps them on one device. It changes the Resolve'd graph.
func (r *Resolved) ApplyColocation() {
	g := r.Graph
	for k, ops := range r.colocated {
		key := fmt.Sprintf("rule:colocate:%d", k)
		old := map[string]bool{}
		for _, op := range ops {
			if c := g.Ops[op].Colocate; c != "" {
				old[c] = true
			}
			g.Ops[op].Colocate = key
		}
		if len(old) == 0 {
			continue
		}
		for i := range g.Ops {
			if old[g.Ops[i].Colocate] {
				g.Ops[i].Colocate = key
			}
		}
	}
}

// classes are the ops that must share a device: the graph's colocation
// groups joined by the colocate rules.
func (r *Resolved) classes() *graph.Grouping {
	gr := graph.ColocationGroups(r.Graph)
	for _, ops := range r.colocated {
		for _, op := range ops[1:] {
			gr.Union(ops[0], op)
		}
	}
	return gr
}

// checkClasses finds ops that must share a device but whose rules leave
// them none in common, or put them in different groups of a separate rule.
func (r *Resolved) checkClasses() error {
	if r.Allowed == nil && len(r.Apart) == 0 {
		return nil
	}
	g, nd := r.Graph, len(r.Cluster.Devices)
	gr := r.classes()
	w := (nd + 63) / 64
	n := len(g.Ops)
	// first[root] is the first op of each class seen (-1: none yet), common
	// its devices so far.
	first := make([]graph.OpID, n)
	for i := range first {
		first[i] = -1
	}
	var common []uint64
	if r.Allowed != nil {
		common = make([]uint64, n*w)
	}
	for i := range g.Ops {
		op := graph.OpID(i)
		root := gr.Find(op)
		if r.Allowed == nil {
			continue
		}
		row := r.Allowed.Bits[i*w : (i+1)*w]
		cur := common[int(root)*w : (int(root)+1)*w]
		if first[root] < 0 {
			first[root] = op
			copy(cur, row)
			continue
		}
		for k := range cur {
			cur[k] &= row[k]
		}
		if allZero(cur) {
			return &ConflictError{r.rulesOn(first[root], op), fmt.Sprintf("op %q and op %q must share a device (colocated: the model, the training step or a colocate rule), and the rules leave them none in common", g.Ops[first[root]].Name, g.Ops[op].Name)}
		}
	}
	for _, a := range r.Apart {
		grp := map[graph.OpID]int8{}
		who := map[graph.OpID]graph.OpID{}
		for i, x := range a.Group {
			if x < 0 {
				continue
			}
			root := gr.Find(graph.OpID(i))
			if y, ok := grp[root]; !ok {
				grp[root], who[root] = x, graph.OpID(i)
			} else if y != x {
				return &ConflictError{[]string{a.Rule}, fmt.Sprintf("op %q and op %q are in different groups, but must share a device (colocated: the model, the training step, which keeps a gradient with its forward op, or a colocate rule)", g.Ops[who[root]].Name, g.Ops[i].Name)}
			}
		}
	}
	return nil
}

func allZero(w []uint64) bool {
	for _, x := range w {
		if x != 0 {
			return false
		}
	}
	return true
}

// rulesOn names the pin and avoid rules binding ops a or b.
func (r *Resolved) rulesOn(a, b graph.OpID) []string {
	var names []string
	for _, bd := range r.Bindings {
		if bd.Rule.Kind != Pin && bd.Rule.Kind != Avoid {
			continue
		}
		if _, ok := slices.BinarySearch(bd.Ops, a); ok {
			names = append(names, bd.Rule.Describe())
		} else if _, ok := slices.BinarySearch(bd.Ops, b); ok {
			names = append(names, bd.Rule.Describe())
		}
	}
	return names
}

// checkMemory finds a set of devices that the pin rules (with avoid and
// reserve) force more parameters onto than the devices hold: the
// parameters and constants of every op whose devices all lie in the set
// must fit there, whatever the plan.
func (r *Resolved) checkMemory() error {
	if r.Allowed == nil {
		return nil
	}
	g, c, nd := r.Graph, r.Cluster, len(r.Cluster.Devices)
	w := r.Allowed.Words
	type set struct {
		row   []uint64
		bytes int64
		op    graph.OpID
	}
	rows, of := r.Allowed.Distinct()
	sets := make([]*set, len(rows))
	counted := make([]bool, len(g.Tensors))
	for i := range g.Ops {
		row := rows[of[i]]
		if full(row, nd) {
			continue
		}
		k := of[i]
		if sets[k] == nil {
			sets[k] = &set{row: row, op: graph.OpID(i)}
		}
		for _, in := range g.Ops[i].Inputs {
			if t := &g.Tensors[in]; t.Kind.IsResident() && !counted[in] {
				counted[in] = true
				sets[k].bytes += t.Bytes()
			}
		}
	}
	// An op kept to devices none of which holds its working set (inputs,
	// outputs, scratch) at once.
	for i := range g.Ops {
		row := r.Allowed.Bits[i*w : (i+1)*w]
		if full(row, nd) {
			continue
		}
		var ws, largest int64
		var reserved int64
		var at string
		for _, in := range g.Ops[i].Inputs {
			ws += g.Tensors[in].Bytes()
		}
		for _, o := range g.Ops[i].Outputs {
			ws += g.Tensors[o].Bytes()
		}
		ws += g.Ops[i].Work.TempBytes
		for d := 0; d < nd; d++ {
			if row[d/64]&(1<<(d%64)) != 0 && c.Devices[d].Memory > largest {
				largest, reserved, at = c.Devices[d].Memory, r.Reserved[d], c.Devices[d].Name
			}
		}
		if ws > largest {
			op := graph.OpID(i)
			rules := r.rulesOn(op, op)
			msg := fmt.Sprintf("they leave op %q at most %s (on %s), and it needs %s at once (its inputs, outputs and scratch)", g.Ops[i].Name, cluster.FormatBytes(largest), at, cluster.FormatBytes(ws))
			if reserved > 0 {
				msg += fmt.Sprintf(" once %s is reserved there", cluster.FormatBytes(reserved))
				rules = append(rules, r.reserveRules()...)
			}
			return &ConflictError{rules, msg}
		}
	}
	// Only the sets some op is kept to, in order of their first op.
	sets = slices.DeleteFunc(sets, func(s *set) bool { return s == nil })
	for _, s := range sets {
		var need int64
		for _, o := range sets {
			if subset(o.row, s.row) {
				need += o.bytes
			}
		}
		var have, reserved int64
		var names []string
		for d := 0; d < nd; d++ {
			if s.row[d/64]&(1<<(d%64)) != 0 {
				have += c.Devices[d].Memory
				reserved += r.Reserved[d]
				names = append(names, c.Devices[d].Name)
			}
		}
		if need > have {
			rules := r.rulesOn(s.op, s.op)
			msg := fmt.Sprintf("they keep %s of parameters and constants (op %q's and every op's kept to the same devices) on %s, which hold %s",
				cluster.FormatBytes(need), g.Ops[s.op].Name, strings.Join(names, ", "), cluster.FormatBytes(have))
			if reserved > 0 {
				msg += fmt.Sprintf(" once %s is reserved", cluster.FormatBytes(reserved))
				rules = append(rules, r.reserveRules()...)
			}
			return &ConflictError{rules, msg}
		}
	}
	return nil
}

func full(row []uint64, nd int) bool {
	for d := 0; d < nd; d++ {
		if row[d/64]&(1<<(d%64)) == 0 {
			return false
		}
	}
	return true
}

// subset reports whether a is a subset of b.
func subset(a, b []uint64) bool {
	for k := range a {
		if a[k]&^b[k] != 0 {
			return false
		}
	}
	return true
}

// FusionKeys is a key per op such that ops the rules bind differently
// (other allowed devices, other separate groups, other cut pieces) have
// different keys: fusion never merges them, since a fused kernel runs on
// one device and in one stage. cut is CutKeys' result (nil: none). Nil
// when the rules bind no op differently from another.
func (r *Resolved) FusionKeys(cut []string) []int32 {
	if r.Allowed == nil && len(r.Apart) == 0 && cut == nil {
		return nil
	}
	g := r.Graph
	keys := make([]int32, len(g.Ops))
	index := map[string]int32{}
	var allowed []int32 // each op's allowed set, numbered
	if r.Allowed != nil {
		_, allowed = r.Allowed.Distinct()
	}
	var b []byte
	for i := range g.Ops {
		b = b[:0]
		if allowed != nil {
			b = binary.LittleEndian.AppendUint32(b, uint32(allowed[i]))
		}
		for _, a := range r.Apart {
			b = append(b, byte(a.Group[i]))
		}
		if cut != nil {
			b = append(b, cut[i]...)
		}
		k, ok := index[string(b)]
		if !ok {
			k = int32(len(index))
			index[string(b)] = k
		}
		keys[i] = k
	}
	return keys
}

// OnGraph is the allowed devices and separate groups of the n ops of a
// graph whose op of[x] runs resolved op x (a fused graph whose fusion kept
// FusionKeys apart, so every member of a fused op is bound alike).
func (r *Resolved) OnGraph(n int, of []graph.OpID) (*graph.DeviceSets, []Apart) {
	if of == nil {
		return r.Allowed, r.Apart
	}
	var allowed *graph.DeviceSets
	if r.Allowed != nil {
		w := r.Allowed.Words
		allowed = &graph.DeviceSets{Words: w, Bits: make([]uint64, n*w)}
		for x, op := range of {
			copy(allowed.Bits[int(op)*w:(int(op)+1)*w], r.Allowed.Bits[x*w:(x+1)*w])
		}
	}
	var apart []Apart
	for _, a := range r.Apart {
		m := Apart{Rule: a.Rule, Group: make([]int8, n)}
		for i := range m.Group {
			m.Group[i] = -1
		}
		for x, op := range of {
			if a.Group[x] >= 0 {
				m.Group[op] = a.Group[x]
			}
		}
		apart = append(apart, m)
	}
	return allowed, apart
}

// reserveRules names the reserve rules, for conflicts.
func (r *Resolved) reserveRules() []string {
	var names []string
	for _, b := range r.Bindings {
		if b.Rule.Kind == Reserve {
			names = append(names, b.Rule.Describe())
		}
	}
	return names
}
