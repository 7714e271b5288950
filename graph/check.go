package graph

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
)

// Invariant names a property of a Graph that every pass may rely on and
// Check verifies.
type Invariant string

// The invariants Check verifies, in the order it verifies them.
const (
	// InvRange: every op, tensor and control-dependency id a graph holds
	// indexes its slices (a tensor's producer may be NoOp).
	InvRange Invariant = "ids in range"
	// InvKind: enumerations hold known values (tensor kinds, phases,
	// element types), ops write activations only, work is not negative.
	InvKind Invariant = "known kinds"
	// InvShape: a known shape has no negative dimension and its element
	// count fits an int64.
	InvShape Invariant = "shapes"
	// InvDuplicate: no tensor has two writers (two ops, or one op
	// listing it twice).
	InvDuplicate Invariant = "one writer per tensor"
	// InvSymmetry: an op lists a tensor as an output exactly when the
	// tensor names it as its producer, and reads a tensor as many times
	// as the tensor lists it among its consumers.
	InvSymmetry Invariant = "producer/consumer symmetry"
	// InvName: op names are unique, tensor names are unique, and the
	// name index (OpByName, TensorByName), when built, maps each name to
	// its holder.
	InvName Invariant = "unique names"
	// InvAcyclic: data and control edges form a DAG, as TopoOrder reads
	// them (an op reading its own output or waiting on itself is no
	// edge there).
	InvAcyclic Invariant = "acyclic"
	// InvCoarse: a Coarse's maps agree with its two graphs (see
	// Coarse.Check).
	InvCoarse Invariant = "coarse map"
)

// CheckError is an invariant a graph breaks: a bug in the pass that
// built or rewrote it, not a property of the user's model.
type CheckError struct {
	Graph     string
	Invariant Invariant
	// Op and Tensor name the op and the tensor involved, "" for none.
	Op, Tensor string
	// Detail says what is wrong.
	Detail string
}

func (e *CheckError) Error() string {
	where := fmt.Sprintf("graph %q", e.Graph)
	if e.Op != "" {
		where += fmt.Sprintf(": op %q", e.Op)
	}
	if e.Op == "" && e.Tensor != "" {
		where += fmt.Sprintf(": tensor %q", e.Tensor)
	}
	return fmt.Sprintf("%s: %s (invariant: %s)", where, e.Detail, e.Invariant)
}

// Check verifies the invariants of g every pass relies on (see the Inv
// constants): ids in range, known kinds, shapes, one writer per tensor,
// producer/consumer symmetry, unique names and an index that agrees, and
// no cycle. It returns the first broken one, in id order, as a
// *CheckError naming the op (or tensor) and the invariant; nil when g
// holds them all. It does not look into control-flow bodies (AttrGraph
// attributes), which may read the enclosing graph's tensors.
//
// Check costs O(ops + edges·log edges) and builds the name index if it
// was left unbuilt; it must not run while another goroutine reads g.
func Check(g *Graph) error {
	c := checker{g: g}
	for _, step := range []func() *CheckError{c.ranges, c.tensors, c.ops, c.producers, c.consumers, c.names, c.acyclic} {
		if err := step(); err != nil {
			err.Graph = g.Name
			return err
		}
	}
	return nil
}

type checker struct{ g *Graph }

func (c checker) opName(id OpID) string {
	if id >= 0 && int(id) < len(c.g.Ops) {
		return c.g.Ops[id].Name
	}
	return fmt.Sprintf("#%d", id)
}

func (c checker) tensorName(id TensorID) string {
	if id >= 0 && int(id) < len(c.g.Tensors) {
		return c.g.Tensors[id].Name
	}
	return fmt.Sprintf("#%d", id)
}

func (c checker) opErr(inv Invariant, op OpID, tensor TensorID, format string, args ...any) *CheckError {
	e := &CheckError{Invariant: inv, Op: c.opName(op), Detail: fmt.Sprintf(format, args...)}
	if tensor >= 0 {
		e.Tensor = c.tensorName(tensor)
	}
	return e
}

func (c checker) tensorErr(inv Invariant, t TensorID, format string, args ...any) *CheckError {
	return &CheckError{Invariant: inv, Tensor: c.tensorName(t), Detail: fmt.Sprintf(format, args...)}
}

// ranges checks every id first: the later steps index by them.
func (c checker) ranges() *CheckError {
	g := c.g
	nOps, nTensors := OpID(len(g.Ops)), TensorID(len(g.Tensors))
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if t.Producer != NoOp && (t.Producer < 0 || t.Producer >= nOps) {
			return c.tensorErr(InvRange, TensorID(i), "producer id %d is out of range (%d ops)", t.Producer, nOps)
		}
		for _, o := range t.Consumers {
			if o < 0 || o >= nOps {
				return c.tensorErr(InvRange, TensorID(i), "consumer id %d is out of range (%d ops)", o, nOps)
			}
		}
	}
	for i := range g.Ops {
		op := &g.Ops[i]
		for _, lists := range [...]struct {
			what string
			ids  []TensorID
		}{{"input", op.Inputs}, {"output", op.Outputs}} {
			for _, t := range lists.ids {
				if t < 0 || t >= nTensors {
					return c.opErr(InvRange, OpID(i), -1, "%s tensor id %d is out of range (%d tensors)", lists.what, t, nTensors)
				}
			}
		}
		for _, d := range op.ControlDeps {
			if d < 0 || d >= nOps {
				return c.opErr(InvRange, OpID(i), -1, "control dependency id %d is out of range (%d ops)", d, nOps)
			}
		}
	}
	for _, lists := range [...]struct {
		what string
		ids  []TensorID
	}{{"input", g.Inputs}, {"output", g.Outputs}} {
		for _, t := range lists.ids {
			if t < 0 || t >= nTensors {
				return &CheckError{Invariant: InvRange, Detail: fmt.Sprintf("graph %s tensor id %d is out of range (%d tensors)", lists.what, t, nTensors)}
			}
		}
	}
	return nil
}

// tensors checks each tensor's kind, element type and shape.
func (c checker) tensors() *CheckError {
	for i := range c.g.Tensors {
		t := &c.g.Tensors[i]
		if int(t.Kind) >= len(kindNames) {
			return c.tensorErr(InvKind, TensorID(i), "unknown kind %d", t.Kind)
		}
		if int(t.DType) >= len(dtypeInfo) {
			return c.tensorErr(InvKind, TensorID(i), "unknown element type %d", t.DType)
		}
		if !t.ShapeKnown {
			continue
		}
		n := uint64(1)
		for axis, d := range t.Shape {
			if d < 0 {
				return c.tensorErr(InvShape, TensorID(i), "axis %d of shape %v is negative", axis, t.Shape)
			}
			hi, lo := bits.Mul64(n, uint64(d))
			if hi != 0 || lo > 1<<63-1 {
				return c.tensorErr(InvShape, TensorID(i), "shape %v has more elements than an int64 counts", t.Shape)
			}
			n = lo
		}
	}
	return nil
}

// ops checks each op's phase, work and outputs' kinds.
func (c checker) ops() *CheckError {
	g := c.g
	for i := range g.Ops {
		op := &g.Ops[i]
		if int(op.Phase) >= len(phaseNames) {
			return c.opErr(InvKind, OpID(i), -1, "unknown phase %d", op.Phase)
		}
		if w := op.Work; w.FLOPs < 0 || w.MACs < 0 || w.TempBytes < 0 {
			return c.opErr(InvKind, OpID(i), -1, "negative work (%d FLOPs, %d MACs, %d temporary bytes)", w.FLOPs, w.MACs, w.TempBytes)
		}
		for _, t := range op.Outputs {
			if k := g.Tensors[t].Kind; k != Activation {
				return c.opErr(InvKind, OpID(i), t, "writes %q, a %s: an op writes activations only", g.Tensors[t].Name, k)
			}
		}
	}
	return nil
}

// producers checks that each op's outputs name it as their producer and
// each produced tensor is among its producer's outputs once.
func (c checker) producers() *CheckError {
	g := c.g
	for i := range g.Ops {
		outs := g.Ops[i].Outputs
		for k, t := range outs {
			if slices.Contains(outs[:k], t) {
				return c.opErr(InvDuplicate, OpID(i), t, "lists output %q twice", g.Tensors[t].Name)
			}
			switch p := g.Tensors[t].Producer; {
			case p == OpID(i):
			case p == NoOp:
				return c.opErr(InvSymmetry, OpID(i), t, "lists output %q, whose producer is none", g.Tensors[t].Name)
			case slices.Contains(g.Ops[p].Outputs, t):
				return c.opErr(InvDuplicate, OpID(i), t, "writes %q, which op %q writes too", g.Tensors[t].Name, g.Ops[p].Name)
			default:
				return c.opErr(InvSymmetry, OpID(i), t, "lists output %q, whose producer is op %q", g.Tensors[t].Name, g.Ops[p].Name)
			}
		}
	}
	for i := range g.Tensors {
		if p := g.Tensors[i].Producer; p != NoOp && !slices.Contains(g.Ops[p].Outputs, TensorID(i)) {
			return c.opErr(InvSymmetry, p, TensorID(i), "is the producer tensor %q names, but does not list it as an output", g.Tensors[i].Name)
		}
	}
	return nil
}

// consumers checks that every (tensor, op) read appears as often in the
// op's inputs as in the tensor's consumers: each tensor's readers, found
// from the ops' inputs in op order, must be its consumers sorted.
func (c checker) consumers() *CheckError {
	g := c.g
	start := make([]int32, len(g.Tensors)+1)
	for i := range g.Ops {
		for _, t := range g.Ops[i].Inputs {
			start[t+1]++
		}
	}
	for t := range g.Tensors {
		start[t+1] += start[t]
	}
	readers := make([]OpID, start[len(g.Tensors)])
	fill := slices.Clone(start[:len(g.Tensors)])
	for i := range g.Ops {
		for _, t := range g.Ops[i].Inputs {
			readers[fill[t]] = OpID(i)
			fill[t]++
		}
	}
	for t := range g.Tensors {
		want, got := readers[start[t]:start[t+1]], g.Tensors[t].Consumers
		if slices.Equal(want, got) {
			continue // the list as AddOp builds it
		}
		if !slices.IsSorted(got) {
			got = slices.Sorted(slices.Values(got))
			if slices.Equal(want, got) {
				continue
			}
		}
		k := 0
		for k < len(want) && k < len(got) && want[k] == got[k] {
			k++
		}
		op := OpID(0)
		switch {
		case k == len(got):
			op = want[k]
		case k == len(want):
			op = got[k]
		default:
			op = min(want[k], got[k])
		}
		count := func(s []OpID) int {
			lo, _ := slices.BinarySearch(s, op)
			hi, _ := slices.BinarySearch(s, op+1)
			return hi - lo
		}
		return c.opErr(InvSymmetry, op, TensorID(t), "reads %q %s but the tensor lists it as a consumer %s",
			g.Tensors[t].Name, times(count(want)), times(count(got)))
	}
	return nil
}

func times(n int) string {
	switch n {
	case 0:
		return "never"
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return fmt.Sprintf("%d times", n)
}

// names checks that op and tensor names are unique and that the name
// index, when built, maps each name to its holder.
func (c checker) names() *CheckError {
	g := c.g
	indexed := g.opByName != nil || g.pending != nil
	g.index()
	opErr := func(i int, detail string, args ...any) *CheckError {
		return c.opErr(InvName, OpID(i), -1, detail, args...)
	}
	tensorErr := func(i int, detail string, args ...any) *CheckError {
		return c.tensorErr(InvName, TensorID(i), detail, args...)
	}
	if err := checkNames(len(g.Ops), func(i int) string { return g.Ops[i].Name }, g.opByName, indexed, "op", opErr); err != nil {
		return err
	}
	indexed = g.tensorByName != nil || g.pending != nil
	return checkNames(len(g.Tensors), func(i int) string { return g.Tensors[i].Name }, g.tensorByName, indexed, "tensor", tensorErr)
}

// checkNames checks the n names name gives are unique and, when indexed,
// that index maps each to its holder and holds no other.
func checkNames[ID ~int32](n int, name func(int) string, index map[string]ID, indexed bool, what string, fail func(int, string, ...any) *CheckError) *CheckError {
	if !indexed {
		index = make(map[string]ID, n)
		for i := 0; i < n; i++ {
			if j, dup := index[name(i)]; dup {
				return fail(i, "the name is also %s %d's", what, j)
			}
			index[name(i)] = ID(i)
		}
		return nil
	}
	for i := 0; i < n; i++ {
		j, ok := index[name(i)]
		switch {
		case !ok:
			return fail(i, "the name is missing from the %s name index", what)
		case int(j) == i:
		case j >= 0 && int(j) < n && name(int(j)) == name(i):
			return fail(i, "the name is also %s %d's", what, j)
		default:
			return fail(i, "the %s name index maps the name to %s %d", what, what, j)
		}
	}
	if len(index) != n {
		return &CheckError{Invariant: InvName, Detail: fmt.Sprintf("the %s name index holds %d names for %d %ss: a pass renamed or removed some without updating it", what, len(index), n, what)}
	}
	return nil
}

// acyclic checks the data and control edges form a DAG: Kahn's
// algorithm straight on the tensors' consumer lists and the control
// dependencies, with a plain queue (the order does not matter here), and
// on a cycle TopoOrder to name it.
func (c checker) acyclic() *CheckError {
	g := c.g
	n := len(g.Ops)
	indeg := make([]int32, n)
	// Control successors in compressed form: ctrl[ctrlStart[d]:ctrlStart[d+1]]
	// wait on op d.
	ctrlStart := make([]int32, n+1)
	for i := range g.Ops {
		for _, t := range g.Ops[i].Inputs {
			if p := g.Tensors[t].Producer; p != NoOp && p != OpID(i) {
				indeg[i]++
			}
		}
		for _, d := range g.Ops[i].ControlDeps {
			if d != OpID(i) {
				indeg[i]++
				ctrlStart[d+1]++
			}
		}
	}
	for i := 0; i < n; i++ {
		ctrlStart[i+1] += ctrlStart[i]
	}
	ctrl := make([]OpID, ctrlStart[n])
	fill := slices.Clone(ctrlStart[:n])
	for i := range g.Ops {
		for _, d := range g.Ops[i].ControlDeps {
			if d != OpID(i) {
				ctrl[fill[d]] = OpID(i)
				fill[d]++
			}
		}
	}
	queue := make([]OpID, 0, n)
	for i := range indeg {
		if indeg[i] == 0 {
			queue = append(queue, OpID(i))
		}
	}
	for k := 0; k < len(queue); k++ {
		v := queue[k]
		release := func(s OpID) {
			if indeg[s]--; indeg[s] == 0 {
				queue = append(queue, s)
			}
		}
		for _, t := range g.Ops[v].Outputs {
			for _, s := range g.Tensors[t].Consumers {
				if s != v {
					release(s)
				}
			}
		}
		for _, s := range ctrl[ctrlStart[v]:ctrlStart[v+1]] {
			release(s)
		}
	}
	if len(queue) == n {
		return nil
	}
	_, err := g.TopoOrder(g.BuildAdjacency())
	var cyc *CycleError
	if !errors.As(err, &cyc) {
		// Unreachable: both read the same edges.
		return &CheckError{Invariant: InvAcyclic, Detail: fmt.Sprintf("%d ops are on or behind a cycle, which TopoOrder does not find", n-len(queue))}
	}
	return &CheckError{Invariant: InvAcyclic, Op: cyc.Ops[0], Detail: err.Error()}
}

// Check verifies c's coarse graph (Check) and the maps between its two
// graphs: every fine op in exactly one group, GroupOf and Members
// inverse, Members ascending, each coarse op with its members' Colocate
// key and Device pin, and the two graphs' tensors the same (names,
// element types, shapes and kinds, under the same IDs). It does not
// re-check the fine graph.
func (c *Coarse) Check() error {
	if err := Check(c.Graph); err != nil {
		return err
	}
	fail := func(op OpID, format string, args ...any) error {
		e := &CheckError{Graph: c.Graph.Name, Invariant: InvCoarse, Detail: fmt.Sprintf(format, args...)}
		if op >= 0 {
			e.Op = c.Graph.Ops[op].Name
		}
		return e
	}
	if len(c.Members) != len(c.Graph.Ops) || len(c.GroupOf) != len(c.Fine.Ops) {
		return fail(-1, "%d groups for %d coarse ops, %d group ids for %d fine ops", len(c.Members), len(c.Graph.Ops), len(c.GroupOf), len(c.Fine.Ops))
	}
	seen := 0
	for k, members := range c.Members {
		op := &c.Graph.Ops[k]
		if len(members) == 0 {
			return fail(OpID(k), "groups no fine op")
		}
		if !slices.IsSorted(members) {
			return fail(OpID(k), "lists its members out of order")
		}
		for _, m := range members {
			if m < 0 || int(m) >= len(c.Fine.Ops) || c.GroupOf[m] != OpID(k) {
				return fail(OpID(k), "lists member id %d, whose group is not this op", m)
			}
			if f := &c.Fine.Ops[m]; f.Colocate != op.Colocate || f.Device != op.Device {
				return fail(OpID(k), "has colocation %q and device %q, its member %q colocation %q and device %q", op.Colocate, op.Device, f.Name, f.Colocate, f.Device)
			}
		}
		seen += len(members)
	}
	if seen != len(c.Fine.Ops) {
		return fail(-1, "the groups hold %d fine ops of %d", seen, len(c.Fine.Ops))
	}
	if len(c.Graph.Tensors) != len(c.Fine.Tensors) {
		return fail(-1, "the coarse graph has %d tensors, the fine graph %d", len(c.Graph.Tensors), len(c.Fine.Tensors))
	}
	for i := range c.Graph.Tensors {
		t, f := &c.Graph.Tensors[i], &c.Fine.Tensors[i]
		if t.Name != f.Name || t.DType != f.DType || t.Kind != f.Kind || t.ShapeKnown != f.ShapeKnown || !slices.Equal(t.Shape, f.Shape) {
			e := fail(-1, "tensor id %d is %q (%s %s %s) in the coarse graph, %q (%s %s %s) in the fine graph",
				i, t.Name, t.Kind, t.DType, t.ShapeString(), f.Name, f.Kind, f.DType, f.ShapeString())
			e.(*CheckError).Tensor = t.Name
			return e
		}
	}
	return nil
}
