package graph

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Fuser builds a fusion of a graph: a Grouping of its ops into fused
// kernels, merged one pair of groups at a time. It keeps the quotient
// graph (one node per group, an edge where any member of one group feeds
// any member of another) and a topological order of it, and refuses a
// merge that would make the quotient cyclic or join ops under different
// Colocate keys or Device pins, or ops no one device type can run (see
// DeviceSets). Fusion passes decide what to merge; the Fuser guarantees
// that whatever they merge stays schedulable and placeable.
//
// Group IDs are the Grouping's representatives (a group's smallest op
// ID).
type Fuser struct {
	g      *Graph
	groups *Grouping
	// succ and pred are the quotient edges of each live representative,
	// sorted ascending.
	succ, pred [][]OpID
	// order is a topological order of the live groups, with tombstones
	// (-1) where merged groups were; pos is each group's index in it. A
	// tombstone stays one, so skip[i] points at or before the first live
	// index from i on (a union-find over the positions, compressed as it
	// is read): a scan of the order skips any run of tombstones at once.
	order []OpID
	pos   []int32
	skip  []int32
	// members lists each live group's ops, in no particular order (a
	// merge appends the smaller list to the larger, so a long chain does
	// not copy its group once per op); anchors and opaque count its
	// anchor ops (Conv, MatMul, ...) and its ops no pass may fuse
	// vertically; keyOp is its smallest op with a Colocate key (NoOp:
	// none), whose key is the group's.
	members         [][]OpID
	anchors, opaque []int32
	keyOp           []OpID
	// stamp and gen mark DFS visits without clearing an array per merge.
	stamp []uint32
	gen   uint32
	// softKey joins soft colocation keys whose groups were fused: a
	// union-find from key to key, settled onto the ops by settle.
	softKey map[string]string
	// runs is each live representative's DeviceSets bits (the
	// intersection of its members'), words per group; words is 0 when
	// fusion is unrestricted.
	runs  []uint64
	words int
	// keys is each op's DeviceSets key (nil: none); a group's is its
	// representative's, since only equal keys merge.
	keys []int32
}

// DeviceSets gives each op the set of device types that can run it, for
// fusion to respect: a fused kernel runs on one device, so its ops must
// have a device type in common. Op i's set is the bits
// Bits[i*Words:(i+1)*Words], bit k for the k-th device type of the
// caller's numbering; an op with an empty set joins no group.
type DeviceSets struct {
	Words int
	Bits  []uint64
	// Keys, when set, is a key per op: ops with different keys never
	// fuse, even where their sets meet (the user's rules bind them
	// differently: a fused kernel would carry one op's rule onto the
	// other).
	Keys []int32
}

// NewDeviceSets is the sets of n ops over k devices (or types), all
// empty.
func NewDeviceSets(n, k int) *DeviceSets {
	w := (k + 63) / 64
	return &DeviceSets{Words: w, Bits: make([]uint64, n*w)}
}

// Has reports whether op's set holds device k.
func (s *DeviceSets) Has(op OpID, k int) bool {
	return s.Bits[int(op)*s.Words+k/64]&(1<<(k%64)) != 0
}

// Add puts device k into op's set.
func (s *DeviceSets) Add(op OpID, k int) { s.Bits[int(op)*s.Words+k/64] |= 1 << (k % 64) }

// Distinct numbers the distinct sets: sets[of[op]] is op's set, the
// sets in order of the first op holding each.
func (s *DeviceSets) Distinct() (sets [][]uint64, of []int32) {
	n := 0
	if s.Words > 0 {
		n = len(s.Bits) / s.Words
	}
	of = make([]int32, n)
	index := map[string]int32{}
	var key []byte
	for op := range of {
		row := s.Bits[op*s.Words : (op+1)*s.Words]
		key = key[:0]
		for _, x := range row {
			key = binary.LittleEndian.AppendUint64(key, x)
		}
		k, ok := index[string(key)]
		if !ok {
			k = int32(len(sets))
			index[string(key)] = k
			sets = append(sets, row)
		}
		of[op] = k
	}
	return sets, of
}

// Remove takes device k out of op's set.
func (s *DeviceSets) Remove(op OpID, k int) { s.Bits[int(op)*s.Words+k/64] &^= 1 << (k % 64) }

// SoftColocatePrefix starts a Colocate key that a pass derived rather
// than the model required: the training step keeps each op with its
// gradient under such a key. Fusion may join two soft groups (the fused
// kernel's gradients then stay together too), but never a group the model
// constrained.
const SoftColocatePrefix = "~"

// IsSoftColocate reports whether key was derived by a pass.
func IsSoftColocate(key string) bool { return strings.HasPrefix(key, SoftColocatePrefix) }

// NewFuser starts a fusion of g with every op in its own group. It fails
// only on a cyclic graph.
func NewFuser(g *Graph, adj *Adjacency) (*Fuser, error) { return newFuser(g, adj, nil) }

func newFuser(g *Graph, adj *Adjacency, runs *DeviceSets) (*Fuser, error) {
	order, err := g.TopoOrder(adj)
	if err != nil {
		return nil, err
	}
	n := len(g.Ops)
	f := &Fuser{
		g: g, groups: NewGrouping(n),
		succ: make([][]OpID, n), pred: make([][]OpID, n),
		order: order, pos: make([]int32, n), skip: make([]int32, n+1), stamp: make([]uint32, n),
		members: make([][]OpID, n), anchors: make([]int32, n), opaque: make([]int32, n),
		keyOp: make([]OpID, n), softKey: map[string]string{},
	}
	for i, op := range order {
		f.pos[op] = int32(i)
	}
	for i := range f.skip {
		f.skip[i] = int32(i)
	}
	if runs != nil && runs.Words > 0 {
		if len(runs.Bits) != n*runs.Words {
			return nil, fmt.Errorf("fusion: device sets for %d ops of %d words, have %d words", n, runs.Words, len(runs.Bits))
		}
		f.runs, f.words = slices.Clone(runs.Bits), runs.Words
	}
	if runs != nil && runs.Keys != nil {
		if len(runs.Keys) != n {
			return nil, fmt.Errorf("fusion: rule keys for %d ops, have %d", n, len(runs.Keys))
		}
		f.keys = runs.Keys
	}
	for i := range g.Ops {
		f.succ[i] = slices.Clone(adj.Succs(OpID(i)))
		f.pred[i] = slices.Clone(adj.Preds(OpID(i)))
		f.members[i] = []OpID{OpID(i)}
		f.keyOp[i] = NoOp
		if g.Ops[i].Colocate != "" {
			f.keyOp[i] = OpID(i)
		}
		if IsAnchorOp(g.Ops[i].Type) {
			f.anchors[i] = 1
		}
		if !fusible(g.Ops[i].Type) {
			f.opaque[i] = 1
		}
	}
	return f, nil
}

// Graph is the graph being fused.
func (f *Fuser) Graph() *Graph { return f.g }

// Grouping is the fusion so far.
func (f *Fuser) Grouping() *Grouping { return f.groups }

// Find is the group of op.
func (f *Fuser) Find(op OpID) OpID { return f.groups.Find(op) }

// Succs lists the groups group feeds, ascending. The slice must not be
// modified and is invalidated by Merge.
func (f *Fuser) Succs(group OpID) []OpID { return f.succ[f.groups.Find(group)] }

// Preds lists the groups feeding group, ascending. The slice must not be
// modified and is invalidated by Merge.
func (f *Fuser) Preds(group OpID) []OpID { return f.pred[f.groups.Find(group)] }

// Anchors is the number of anchor ops (IsAnchorOp) in op's group.
func (f *Fuser) Anchors(op OpID) int { return int(f.anchors[f.groups.Find(op)]) }

// Opaque is the number of ops in op's group that vertical fusion may not
// merge (neither anchor, elementwise nor view ops).
func (f *Fuser) Opaque(op OpID) int { return int(f.opaque[f.groups.Find(op)]) }

// Members lists the ops of op's group, ascending. The slice must not be
// modified and is invalidated by Merge.
func (f *Fuser) Members(op OpID) []OpID {
	ms := f.members[f.groups.Find(op)]
	slices.Sort(ms) // kept unordered while merging
	return ms
}

// Order is the live groups in a topological order of the quotient graph.
func (f *Fuser) Order() []OpID {
	out := make([]OpID, 0, len(f.order))
	for _, r := range f.order {
		if r >= 0 {
			out = append(out, r)
		}
	}
	return out
}

// CanMerge reports whether the groups of a and b may become one: they are
// apart, their ops share Colocate key and Device pin, and no path between
// them passes through a third group (which would become a cycle).
func (f *Fuser) CanMerge(a, b OpID) bool {
	ra, rb := f.groups.Find(a), f.groups.Find(b)
	if ra == rb || !f.compatible(ra, rb) {
		return false
	}
	if f.pos[ra] > f.pos[rb] {
		ra, rb = rb, ra
	}
	_, ok := f.window(ra, rb)
	return ok
}

// compatible checks the placement constraints: a fused kernel runs on one
// device, so its ops must agree on where they may go. Every member of a
// group shares its representative's constraints. Soft keys (and no key)
// may meet another soft key: the groups then become one.
func (f *Fuser) compatible(ra, rb OpID) bool {
	x, y := &f.g.Ops[ra], &f.g.Ops[rb]
	if x.Device != y.Device || !f.shareDeviceType(ra, rb) || f.keys != nil && f.keys[ra] != f.keys[rb] {
		return false
	}
	kx, ky := f.key(f.groupKey(ra)), f.key(f.groupKey(rb))
	return kx == ky || f.softOrNone(kx) && f.softOrNone(ky)
}

// shareDeviceType reports whether some device type runs every op of both
// groups.
func (f *Fuser) shareDeviceType(ra, rb OpID) bool {
	if f.words == 0 {
		return true
	}
	a, b := f.runs[int(ra)*f.words:][:f.words], f.runs[int(rb)*f.words:][:f.words]
	for i := range a {
		if a[i]&b[i] != 0 {
			return true
		}
	}
	return false
}

func (f *Fuser) softOrNone(key string) bool { return key == "" || IsSoftColocate(key) }

// groupKey is the colocation key of a group: its first member's with a
// key, since a group may mix soft-keyed ops with unkeyed ones.
func (f *Fuser) groupKey(r OpID) string {
	if k := f.keyOp[r]; k != NoOp {
		return f.g.Ops[k].Colocate
	}
	return ""
}

// key resolves a soft key to the key of the group it was fused into,
// pointing every key on the way straight at it.
func (f *Fuser) key(k string) string {
	root := k
	for {
		next, ok := f.softKey[root]
		if !ok || next == root {
			break
		}
		root = next
	}
	for k != root {
		next := f.softKey[k]
		f.softKey[k] = root
		k = next
	}
	return root
}

// live is the first index of the order from i on that holds a live
// group, len(order) if none.
func (f *Fuser) live(i int32) int32 {
	for f.skip[i] != i {
		f.skip[i] = f.skip[f.skip[i]] // path halving
		i = f.skip[i]
	}
	return i
}

// bury makes index i of the order a tombstone.
func (f *Fuser) bury(i int32) {
	f.order[i], f.skip[i] = -1, i+1
}

// joinKeys records that the soft groups of keys a and b are now one.
func (f *Fuser) joinKeys(a, b string) {
	a, b = f.key(a), f.key(b)
	if a == b || a == "" || b == "" {
		return
	}
	if b < a {
		a, b = b, a
	}
	f.softKey[b] = a
}

// settle writes the joined soft keys back to the graph's ops, so every op
// of a fused kernel, and every gradient colocated with one, carries the
// same key. A group that joined unkeyed ops to one soft key (an inference
// graph's autocast cast and matmul, keyed together, fused with the
// unkeyed bias Add after them) joins no two keys but still needs its
// members written, so there is no shortcut when nothing was joined.
func (f *Fuser) settle() {
	for i := range f.g.Ops {
		op := &f.g.Ops[i]
		if IsSoftColocate(op.Colocate) {
			op.Colocate = f.key(op.Colocate)
		}
	}
	for r, ms := range f.members {
		if len(ms) < 2 || f.groups.Find(OpID(r)) != OpID(r) {
			continue
		}
		if k := f.key(f.groupKey(OpID(r))); IsSoftColocate(k) {
			for _, m := range ms {
				f.g.Ops[m].Colocate = k
			}
		}
	}
}

// window returns the groups strictly between x and y in the order that
// are reachable from x, and whether y is unreachable from x except by a
// direct edge. pos[x] < pos[y]; any path from x to y visits only groups
// ordered between them, so the search stays inside that window.
func (f *Fuser) window(x, y OpID) ([]OpID, bool) {
	f.gen++
	if f.gen == 0 { // wrapped: clear old marks
		clear(f.stamp)
		f.gen = 1
	}
	limit := f.pos[y]
	var reached []OpID
	stack := []OpID{}
	for _, s := range f.succ[x] {
		if s != y && f.pos[s] < limit && f.stamp[s] != f.gen {
			f.stamp[s] = f.gen
			stack = append(stack, s)
		}
	}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		reached = append(reached, v)
		for _, s := range f.succ[v] {
			if s == y {
				return nil, false
			}
			if f.pos[s] < limit && f.stamp[s] != f.gen {
				f.stamp[s] = f.gen
				stack = append(stack, s)
			}
		}
	}
	return reached, true
}

// Merge joins the groups of a and b if CanMerge allows it and reports
// whether it did.
func (f *Fuser) Merge(a, b OpID) bool {
	ra, rb := f.groups.Find(a), f.groups.Find(b)
	if ra == rb || !f.compatible(ra, rb) {
		return false
	}
	x, y := ra, rb
	if f.pos[x] > f.pos[y] {
		x, y = y, x
	}
	if _, ok := f.window(x, y); !ok {
		return false
	}
	f.joinKeys(f.groupKey(ra), f.groupKey(rb))
	// Reorder the window: groups between x and y that x reaches go after
	// the merged group, the rest before it. No group is both reached from
	// x and reaching y (that path was just ruled out), so y's
	// predecessors land before and x's successors after. They fill the
	// window's live indices in turn, x's first; y's, the last, becomes a
	// tombstone. The scan skips the window's tombstones, so it costs the
	// live groups between x and y, not the ops fused before.
	px, py := f.pos[x], f.pos[y]
	var before, after []OpID
	slots := []int32{px}
	for i := f.live(px + 1); i < py; i = f.live(i + 1) {
		v := f.order[i]
		slots = append(slots, i)
		if f.stamp[v] == f.gen {
			after = append(after, v)
		} else {
			before = append(before, v)
		}
	}
	f.groups.Union(x, y)
	r := f.groups.Find(x)
	gone := x
	if r == x {
		gone = y
	}
	k := 0
	for _, v := range before {
		f.order[slots[k]], f.pos[v] = v, slots[k]
		k++
	}
	f.order[slots[k]], f.pos[r] = r, slots[k]
	k++
	for _, v := range after {
		f.order[slots[k]], f.pos[v] = v, slots[k]
		k++
	}
	f.bury(py)

	// Quotient edges: the union of both groups' edges less the ones
	// between them, and every neighbour's reference to the vanished
	// representative renamed.
	succ := mergeSorted(f.succ[x], f.succ[y], x, y)
	pred := mergeSorted(f.pred[x], f.pred[y], x, y)
	for _, s := range f.succ[gone] {
		if s != r {
			f.pred[s] = rename(f.pred[s], gone, r)
		}
	}
	for _, p := range f.pred[gone] {
		if p != r {
			f.succ[p] = rename(f.succ[p], gone, r)
		}
	}
	f.succ[r], f.pred[r] = succ, pred
	f.succ[gone], f.pred[gone] = nil, nil
	if f.words > 0 {
		a, b := f.runs[int(x)*f.words:][:f.words], f.runs[int(y)*f.words:][:f.words]
		both := f.runs[int(r)*f.words:][:f.words]
		for i := range both {
			both[i] = a[i] & b[i]
		}
	}
	f.anchors[r] = f.anchors[x] + f.anchors[y]
	f.opaque[r] = f.opaque[x] + f.opaque[y]
	big, small := f.members[x], f.members[y]
	if len(big) < len(small) {
		big, small = small, big
	}
	f.members[r], f.members[gone] = append(big, small...), nil
	if kx, ky := f.keyOp[x], f.keyOp[y]; kx == NoOp || ky != NoOp && ky < kx {
		f.keyOp[r] = ky
	} else {
		f.keyOp[r] = kx
	}
	return true
}

// mergeSorted unions two ascending lists, dropping x and y.
func mergeSorted(a, b []OpID, x, y OpID) []OpID {
	out := make([]OpID, 0, len(a)+len(b))
	for _, v := range a {
		if v != x && v != y {
			out = append(out, v)
		}
	}
	for _, v := range b {
		if v != x && v != y {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// rename replaces from by to in an ascending list, keeping it ascending
// and free of duplicates.
func rename(s []OpID, from, to OpID) []OpID {
	out := s[:0]
	for _, v := range s {
		if v != from {
			out = append(out, v)
		}
	}
	if i, found := slices.BinarySearch(out, to); !found {
		out = slices.Insert(out, i, to)
	}
	return out
}

// FusionPass is one named fusion rule. Run merges groups through the
// Fuser and returns how many merges it made (each merge removes one op
// from the fused graph).
type FusionPass struct {
	Name    string
	Summary string
	Run     func(f *Fuser) int
}

var (
	fusionMu     sync.RWMutex
	fusionPasses = map[string]FusionPass{}
	fusionModes  = map[string][]string{"none": nil}
)

// RegisterFusionPass adds a pass; a duplicate name panics (a programming
// error caught at init).
func RegisterFusionPass(p FusionPass) {
	fusionMu.Lock()
	defer fusionMu.Unlock()
	if _, dup := fusionPasses[p.Name]; dup {
		panic("graph: duplicate fusion pass " + p.Name)
	}
	fusionPasses[p.Name] = p
}

// RegisterFusionMode names a sequence of passes, run in order.
func RegisterFusionMode(name string, passes ...string) {
	fusionMu.Lock()
	defer fusionMu.Unlock()
	if _, dup := fusionModes[name]; dup {
		panic("graph: duplicate fusion mode " + name)
	}
	fusionModes[name] = passes
}

// FusionModes lists the registered modes, sorted.
func FusionModes() []string {
	fusionMu.RLock()
	defer fusionMu.RUnlock()
	names := make([]string, 0, len(fusionModes))
	for n := range fusionModes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// PassResult is what one pass did.
type PassResult struct {
	Pass   string
	Merged int
}

// Fusion is the outcome of a fusion mode on a graph.
type Fusion struct {
	Mode   string
	Groups *Grouping
	Passes []PassResult
}

// Merged is the total number of merges, the number of ops the fused graph
// has fewer than the original.
func (fu *Fusion) Merged() int {
	n := 0
	for _, p := range fu.Passes {
		n += p.Merged
	}
	return n
}

// Fuse runs the passes of a registered mode on g.
func Fuse(g *Graph, adj *Adjacency, mode string) (*Fusion, error) {
	return FuseOn(g, adj, mode, nil)
}

// FuseOn is Fuse restricted to groups whose ops share a device type that
// runs them all (runs; nil means every op runs everywhere).
func FuseOn(g *Graph, adj *Adjacency, mode string, runs *DeviceSets) (*Fusion, error) {
	fusionMu.RLock()
	names, ok := fusionModes[mode]
	passes := make([]FusionPass, len(names))
	for i, n := range names {
		passes[i], ok = fusionPasses[n], ok && fusionPasses[n].Run != nil
	}
	fusionMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("unknown fusion mode %q: use one of %s", mode, strings.Join(FusionModes(), ", "))
	}
	f, err := newFuser(g, adj, runs)
	if err != nil {
		return nil, err
	}
	fu := &Fusion{Mode: mode, Groups: f.groups}
	for _, p := range passes {
		fu.Passes = append(fu.Passes, PassResult{Pass: p.Name, Merged: p.Run(f)})
	}
	f.settle()
	return fu, nil
}
