package tf

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/importopt"
	"github.com/opplace/opplace/internal/shapes"
)

// TensorFlow 1 control flow. A while loop is a frame: Enter nodes bring
// values in, Merge joins each loop variable's initial value with the one
// NextIteration feeds back, LoopCond decides, Switch routes a variable to
// the body (output 1) or to Exit (output 0). The loop is imported flat:
// the NextIteration → Merge back edge is dropped, so the graph is a DAG
// holding one copy of the body, and every op of the frame costs its work
// times the trip count (times the enclosing frames'). A cond is a Switch
// on a predicate that is not a LoopCond: its ops on the side not taken
// stay in the graph at no cost, as an ONNX If costs only one branch.

func init() {
	register(&opDef{shape: inferPass(true)}, "Enter", "RefEnter")
	register(&opDef{shape: inferPass(false)}, "Exit", "RefExit", "NextIteration", "RefNextIteration", "LoopCond")
	register(&opDef{shape: inferSwitch}, "Switch", "RefSwitch")
	register(&opDef{shape: inferMerge}, "Merge", "RefMerge")
	register(&opDef{shape: inferTensorArray}, "TensorArrayV3", "TensorArrayReadV3", "TensorArrayWriteV3",
		"TensorArrayScatterV3", "TensorArrayGatherV3", "TensorArraySizeV3")
}

// isNextIteration reports whether op feeds a value back to a loop's Merge.
func isNextIteration(op string) bool { return op == "NextIteration" || op == "RefNextIteration" }

func isMerge(op string) bool  { return op == "Merge" || op == "RefMerge" }
func isSwitch(op string) bool { return op == "Switch" || op == "RefSwitch" }

// inferPass gives output 0 input 0's shape; keep also passes its
// contents (an Enter brings a loop-invariant constant into the frame,
// where a loop limit is read; an Exit's value is the last iteration's).
func inferPass(keep bool) func(n *node) error {
	return func(n *node) error {
		x := n.input(0)
		if x == nil {
			return fmt.Errorf("input 0 is missing")
		}
		v := &value{dtype: x.dtype, shape: shapes.Clone(x.shape), ranked: x.ranked, count: x.count}
		if keep && x.hasInts() {
			v.ints = shapes.Clone(x.ints)
		}
		if n.op == "LoopCond" {
			v.dtype = graph.Bool
		}
		return n.setValue(0, v)
	}
}

// inferSwitch routes input 0 to both outputs: inference shapes the side
// taken and the side not taken alike.
func inferSwitch(n *node) error {
	x := n.input(0)
	if x == nil {
		return fmt.Errorf("input 0 is missing")
	}
	for i := 0; i < 2; i++ {
		v := &value{dtype: x.dtype, shape: shapes.Clone(x.shape), ranked: x.ranked, count: x.count, ints: x.ints}
		if err := n.setValue(i, v); err != nil {
			return err
		}
	}
	return nil
}

// inferMerge shapes output 0 as what its inputs agree on (a loop Merge
// has only its initial value, the back edge being dropped) and output 1,
// the index of the input taken, as an int32 scalar. Contents are never
// kept: a loop variable changes every iteration.
func inferMerge(n *node) error {
	var cands []*value
	for _, v := range n.in {
		if v != nil && v.ranked {
			cands = append(cands, v)
		}
	}
	out := unknown(n.dt())
	if len(cands) == len(n.in) && len(cands) > 0 {
		c := common(cands)
		out = &value{dtype: n.dt(), shape: c.shape, ranked: c.ranked, count: c.count}
	}
	if err := n.setValue(0, out); err != nil {
		return err
	}
	return n.set(1, graph.Int32, []int64{})
}

// inferTensorArray shapes the TensorArray ops tf.map_fn and dynamic RNNs
// use: an element's shape comes from the array's element_shape attribute
// or, in file order, from what was scattered or written into it.
func inferTensorArray(n *node) error {
	switch n.op {
	case "TensorArrayV3":
		if err := n.set(0, graph.String, []int64{2}); err != nil { // the handle
			return err
		}
		return n.set(1, graph.Float32, []int64{})
	case "TensorArrayWriteV3", "TensorArrayScatterV3":
		if v := n.input(2); v != nil && n.ta != nil {
			elem := v
			if n.op == "TensorArrayScatterV3" {
				elem = &value{dtype: v.dtype}
				if v.ranked && len(v.shape) > 0 {
					elem = &value{dtype: v.dtype, shape: shapes.Clone(v.shape[1:]), ranked: true}
				}
			}
			if m, ok := meet(n.ta.elem, elem); ok {
				n.ta.elem = m
			}
		}
		return n.set(0, graph.Float32, []int64{})
	case "TensorArraySizeV3":
		if n.ta != nil && n.ta.size >= 0 {
			return n.setInts(0, graph.Int32, []int64{}, []int64{n.ta.size})
		}
		return n.set(0, graph.Int32, []int64{})
	}
	dt := n.attrType("dtype")
	elem := unknown(dt)
	if n.ta != nil && n.ta.elem != nil {
		elem = &value{dtype: dt, shape: shapes.Clone(n.ta.elem.shape), ranked: n.ta.elem.ranked}
	}
	if dims, ranked := shapeOf(n.attr("element_shape").GetShape()); ranked && n.attr("element_shape") != nil {
		if m, ok := meet(elem, &value{dtype: dt, shape: dims, ranked: true}); ok {
			elem = m
		}
	}
	if n.op == "TensorArrayReadV3" {
		return n.setValue(0, elem)
	}
	// TensorArrayGatherV3: one element per index.
	idx := n.input(1)
	if idx == nil || !idx.ranked || len(idx.shape) != 1 || !elem.ranked {
		return n.setValue(0, unknown(dt))
	}
	return n.setValue(0, &value{dtype: dt, shape: append([]int64{idx.shape[0]}, elem.shape...), ranked: true})
}

// tensorArray is what inference knows of one TensorArrayV3 during a pass.
type tensorArray struct {
	elem *value
	// size is the array's size when constant, else -1.
	size int64
}

func isTensorArray(op string) bool {
	switch op {
	case "TensorArrayV3", "TensorArrayReadV3", "TensorArrayWriteV3", "TensorArrayScatterV3", "TensorArrayGatherV3", "TensorArraySizeV3":
		return true
	}
	return false
}

// array is the TensorArray TensorArray op i works on, created in arrays
// (one inference pass's) when first seen; nil when its handle cannot be
// traced to its TensorArrayV3.
func (c *converter) array(arrays map[int]*tensorArray, i int) *tensorArray {
	src := i
	if c.nodes[i].def.GetOp() != "TensorArrayV3" {
		if len(c.nodes[i].ins) == 0 {
			return nil
		}
		if src = c.arraySource(c.nodes[i].ins[0]); src < 0 {
			return nil
		}
	}
	ta := arrays[src]
	if ta == nil {
		ta = &tensorArray{size: -1}
		if tn := &c.nodes[src]; len(tn.ins) > 0 {
			if n, ok := c.scalar(tn.ins[0]); ok && n >= 0 {
				ta.size = n
			}
		}
		arrays[src] = ta
	}
	return ta
}

// arraySource follows a TensorArray handle back through Enter, Identity
// and Switch to the TensorArrayV3 node creating it, -1 when it is not one.
func (c *converter) arraySource(r ref) int {
	for k := 0; k < len(c.nodes); k++ {
		op := c.nodes[r.node].def.GetOp()
		switch {
		case op == "TensorArrayV3":
			return r.node
		case op == "Enter" || op == "RefEnter" || op == "Identity" || isSwitch(op):
			if len(c.nodes[r.node].ins) == 0 {
				return -1
			}
			r = c.nodes[r.node].ins[0]
		default:
			return -1
		}
	}
	return -1
}

// frame is one while loop's frame.
type frame struct {
	name   string
	parent int
	// loopCond is the frame's LoopCond node, -1 until found.
	loopCond int
}

// loopInfo is how control flow scales each node's work.
type loopInfo struct {
	// scale multiplies node i's work (trip counts of its frames; 0 for a
	// cond branch not taken); nil when the graph has no control flow.
	scale     []int64
	estimated []bool
}

// hasControlFlow reports whether any node is a control-flow primitive.
func (c *converter) hasControlFlow() bool {
	for i := range c.nodes {
		switch op := c.nodes[i].def.GetOp(); {
		case op == "Enter", op == "RefEnter", op == "Exit", op == "RefExit", op == "LoopCond", isSwitch(op), isMerge(op):
			return true
		}
	}
	return false
}

// controlFlow finds the loop frames and conds, their trip counts and the
// branches taken, once shapes and values are known.
func (c *converter) controlFlow() (loopInfo, error) {
	if !c.hasControlFlow() {
		return loopInfo{}, nil
	}
	frames := []frame{{name: "", parent: -1, loopCond: -1}}
	byName := map[string]int{}
	of := make([]int, len(c.nodes))
	depth := func(f int) int {
		d := 0
		for ; f > 0 && d <= len(frames); f = frames[f].parent {
			d++
		}
		return d
	}
	// within reports whether frame f is k or nested in it.
	within := func(f, k int) bool {
		for d := 0; f > 0 && d <= len(frames); f, d = frames[f].parent, d+1 {
			if f == k {
				return true
			}
		}
		return false
	}
	for _, i := range c.order {
		tn := &c.nodes[i]
		op := tn.def.GetOp()
		f := 0
		for _, r := range tn.ins {
			if depth(of[r.node]) > depth(f) {
				f = of[r.node]
			}
		}
		for _, s := range tn.ctrl {
			if depth(of[s]) > depth(f) {
				f = of[s]
			}
		}
		switch op {
		case "Enter", "RefEnter":
			// Frame names are unique in a graph. An Enter of a nested loop
			// may read a constant of the root frame (TF.js drops the control
			// input that keeps it in the outer body), so the frame's parent
			// is the deepest frame any of its Enters reads from.
			name := string(tn.def.GetAttr()["frame_name"].GetS())
			k, ok := byName[name]
			if !ok {
				k = len(frames)
				frames = append(frames, frame{name: name, parent: f, loopCond: -1})
				byName[name] = k
			} else if f != k && depth(f) > depth(frames[k].parent) && !within(f, k) {
				frames[k].parent = f
			}
			f = k
		case "Exit", "RefExit":
			if f == 0 {
				return loopInfo{}, fmt.Errorf("node %s leaves a while loop it is not in (no Enter precedes it)", label(tn.def))
			}
			f = frames[f].parent
		case "LoopCond":
			frames[f].loopCond = i
		}
		of[i] = f
	}
	info := loopInfo{scale: make([]int64, len(c.nodes)), estimated: make([]bool, len(c.nodes))}
	own := make([]int64, len(frames)) // each frame's own trip count
	ownEst := make([]bool, len(frames))
	own[0] = 1
	var dynamic []string
	var huge []string // frames whose counted trips are too many to plan for
	var hugeTrips int64
	for f := 1; f < len(frames); f++ {
		fr := &frames[f]
		var n int64 = -1
		if fr.loopCond >= 0 && len(c.nodes[fr.loopCond].ins) > 0 {
			n = c.tripCount(c.nodes[fr.loopCond].ins[0], 0)
		}
		if n >= math.MaxInt32 {
			// A limit of INT32_MAX or more is a "run until the
			// condition fails" sentinel, as ONNX Loops' M is.
			if len(huge) == 0 {
				hugeTrips = n
			}
			huge = append(huge, fr.name)
			n = -1
		} else if n < 0 {
			dynamic = append(dynamic, fr.name)
		}
		if n < 0 {
			n = c.opts.Import.LoopTrips
			if n <= 0 {
				n, ownEst[f] = 1, true
			}
		}
		own[f] = n
	}
	// A frame runs its own trips per iteration of each enclosing frame.
	trips := make([]int64, len(frames))
	est := make([]bool, len(frames))
	for f := range frames {
		trips[f] = 1
		for g, d := f, 0; g >= 0 && d <= len(frames); g, d = frames[g].parent, d+1 {
			trips[f] = shapes.MulSat(trips[f], own[g])
			est[f] = est[f] || ownEst[g]
		}
	}
	for i := range c.nodes {
		info.scale[i], info.estimated[i] = trips[of[i]], est[of[i]]
	}
	if len(dynamic)+len(huge) > 0 {
		var why []string
		if len(dynamic) > 0 {
			why = append(why, fmt.Sprintf("%d while loop(s) have no constant trip count (first: frame %q)", len(dynamic), dynamic[0]))
		}
		if len(huge) > 0 {
			why = append(why, fmt.Sprintf("%d while loop(s) have a constant trip count too large to plan for (first: frame %q, %d trips, at least 2^31-1: a run-until-the-condition-fails sentinel, not a count)", len(huge), huge[0], hugeTrips))
		}
		msg := strings.Join(why, "; ") + ": "
		if t := c.opts.Import.LoopTrips; t > 0 {
			msg += fmt.Sprintf("counted as %d iterations (%s)", t, c.opts.Import.Knobs.LoopTrips(strconv.FormatInt(t, 10)))
		} else {
			msg += "one iteration counted (cost estimated); set the count with " + c.opts.Import.Knobs.LoopTrips("N")
		}
		c.warn("loop-trips", msg)
	}
	c.condBranches(info.scale)
	return info, nil
}

// through follows Identity nodes back to the tensor they copy.
func (c *converter) through(r ref) ref {
	for k := 0; k < len(c.nodes); k++ {
		tn := &c.nodes[r.node]
		if op := tn.def.GetOp(); (op != "Identity" && op != "Snapshot") || len(tn.ins) == 0 {
			return r
		}
		r = tn.ins[0]
	}
	return r
}

// tripCount is the number of iterations a loop condition allows when it
// is a counter compared with a constant limit (i < n, i <= n, n > i,
// n >= i; the counter starting at a constant and stepping by one), the
// smallest of a LogicalAnd's counted sides (tf.map_fn and
// maximum_iterations), -1 when unknown.
func (c *converter) tripCount(r ref, depth int) int64 {
	r = c.through(r)
	tn := &c.nodes[r.node]
	if depth > 8 || r.out != 0 || len(tn.ins) < 2 {
		return -1
	}
	a, b := tn.ins[0], tn.ins[1]
	switch tn.def.GetOp() {
	case "LogicalAnd":
		x, y := c.tripCount(a, depth+1), c.tripCount(b, depth+1)
		switch {
		case x < 0:
			return y
		case y < 0:
			return x
		}
		return min(x, y)
	case "Less":
		return c.counted(a, b, false)
	case "LessEqual":
		return c.counted(a, b, true)
	case "Greater":
		return c.counted(b, a, false)
	case "GreaterEqual":
		return c.counted(b, a, true)
	}
	return -1
}

// counted is the trip count of `counter < limit` (or <=), -1 unless
// counter is a loop Merge whose initial value and positive step are
// constants and limit is a constant.
func (c *converter) counted(counter, limit ref, inclusive bool) int64 {
	lim, ok := c.scalar(limit)
	if !ok {
		return -1
	}
	m := c.through(counter)
	mn := &c.nodes[m.node]
	if !isMerge(mn.def.GetOp()) || m.out != 0 || len(mn.ins) != 1 || len(mn.back) != 1 {
		return -1
	}
	init, ok := c.scalar(mn.ins[0])
	if !ok {
		return -1
	}
	next := &c.nodes[mn.back[0]]
	if len(next.ins) == 0 {
		return -1
	}
	add := c.through(next.ins[0])
	an := &c.nodes[add.node]
	if op := an.def.GetOp(); (op != "Add" && op != "AddV2") || len(an.ins) != 2 {
		return -1
	}
	var step int64
	switch {
	case c.isCounter(an.ins[0], m.node):
		step, ok = c.scalar(an.ins[1])
	case c.isCounter(an.ins[1], m.node):
		step, ok = c.scalar(an.ins[0])
	default:
		ok = false
	}
	if !ok || step <= 0 {
		return -1
	}
	if lim <= init && !(inclusive && lim == init) {
		return 0
	}
	// lim > init (or equal, inclusive): the span may pass int64, and is
	// then too large to count anyway.
	span := lim - init
	if inclusive {
		span++
	}
	if span <= 0 {
		return math.MaxInt64
	}
	return span/step + min(span%step, 1)
}

// isCounter reports whether r is loop Merge m's value inside the body:
// m itself, or the body side of the Switch on it, through Identities.
func (c *converter) isCounter(r ref, m int) bool {
	r = c.through(r)
	if r.node == m {
		return true
	}
	tn := &c.nodes[r.node]
	return isSwitch(tn.def.GetOp()) && r.out == 1 && len(tn.ins) > 0 && c.through(tn.ins[0]).node == m
}

// scalar is r's value when it is a known one-element integer tensor.
func (c *converter) scalar(r ref) (int64, bool) {
	v := c.vals[r.node][r.out]
	if v == nil || !v.hasInts() || len(v.ints) != 1 {
		return 0, false
	}
	return v.ints[0], true
}

// branch is one side of a cond: the predicate tensor and the side.
type branch struct {
	pred ref
	side bool
}

// condBranches finds the cond Switches (those whose predicate is not a
// LoopCond), tags every node with the branches it lies in, and zeroes
// the scale of the nodes on each cond's side not taken: the predicate's
// value when constant, else the side Options.IfBranch names, by default
// the one with more FLOPs.
func (c *converter) condBranches(scale []int64) {
	tags := make([][]branch, len(c.nodes))
	outTags := func(r ref) []branch {
		t := tags[r.node]
		tn := &c.nodes[r.node]
		if isSwitch(tn.def.GetOp()) && len(tn.ins) > 1 && r.out < 2 {
			p := c.through(tn.ins[1])
			if c.nodes[p.node].def.GetOp() != "LoopCond" {
				t = append(slices.Clone(t), branch{p, r.out == 1})
			}
		}
		return t
	}
	var preds []ref
	for _, i := range c.order {
		tn := &c.nodes[i]
		var t []branch
		add := func(bs []branch) {
			for _, b := range bs {
				if !slices.Contains(t, b) {
					t = append(t, b)
				}
			}
		}
		for _, r := range tn.ins {
			add(outTags(r))
		}
		for _, s := range tn.ctrl {
			add(tags[s])
		}
		if isMerge(tn.def.GetOp()) {
			// A cond's Merge joins both sides of its predicate: past it,
			// neither side applies.
			t = slices.DeleteFunc(t, func(b branch) bool { return slices.Contains(t, branch{b.pred, !b.side}) })
		}
		if isSwitch(tn.def.GetOp()) && len(tn.ins) > 1 {
			if p := c.through(tn.ins[1]); c.nodes[p.node].def.GetOp() != "LoopCond" && !slices.Contains(preds, p) {
				preds = append(preds, p)
			}
		}
		tags[i] = t
	}
	flops := map[branch]int64{}
	for i := range c.nodes {
		for _, b := range tags[i] {
			flops[b] = shapes.AddSat(flops[b], shapes.MulSat(c.works[i].FLOPs, scale[i]))
		}
	}
	var dynamic []string
	dropped := map[branch]bool{}
	for _, p := range preds {
		take := flops[branch{p, true}] >= flops[branch{p, false}]
		if v, ok := c.scalar(p); ok {
			take = v != 0
		} else {
			dynamic = append(dynamic, tensorName(c.nodes[p.node].def.GetName(), p.out))
			switch c.opts.Import.IfBranch {
			case importopt.IfThen:
				take = true
			case importopt.IfElse:
				take = false
			}
		}
		dropped[branch{p, !take}] = true
	}
	for i := range c.nodes {
		if slices.ContainsFunc(tags[i], func(b branch) bool { return dropped[b] }) {
			scale[i] = 0
		}
	}
	if len(dynamic) > 0 {
		k := c.opts.Import.Knobs
		what := fmt.Sprintf("the branch with more FLOPs (%s)", k.IfBranch(importopt.IfMax))
		if b := c.opts.Import.IfBranch; b == importopt.IfThen || b == importopt.IfElse {
			what = fmt.Sprintf("the %s branch (%s)", b, k.IfBranch(b))
		}
		c.warn("if-branch", fmt.Sprintf("%d cond(s) have a predicate that is not a constant (first: %q): costed as %s; choose with %s",
			len(dynamic), dynamic[0], what, k.IfBranch(importopt.IfThen+"|"+importopt.IfElse+"|"+importopt.IfMax)))
	}
}
