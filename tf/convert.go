package tf

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/importopt"
	"github.com/opplace/opplace/internal/shapes"
	attrpb "github.com/wamuir/graft/tensorflow/core/framework/attr_value_go_proto"
	graphpb "github.com/wamuir/graft/tensorflow/core/framework/graph_go_proto"
	nodepb "github.com/wamuir/graft/tensorflow/core/framework/node_def_go_proto"
)

// ref is one data input: output out of node node.
type ref struct{ node, out int }

// tfNode is a NodeDef with its inputs resolved.
type tfNode struct {
	def  *nodepb.NodeDef
	ins  []ref
	ctrl []int
	nout int
	// back lists, for a loop's Merge, the NextIteration nodes feeding it:
	// the back edges, kept out of ins so that the graph is a DAG.
	back []int
}

// maxPasses bounds the rounds of forward inference and backward shape
// recovery.
const maxPasses = 8

type converter struct {
	name string
	opts Options
	// batchBinds is set when Options.Import.Batch binds a placeholder's
	// leading dimension (or the file fixes it at that size); batchFixed
	// and batchFixedDims name the first placeholder whose leading size
	// the file fixes at another.
	batchBinds     bool
	batchFixed     string
	batchFixedDims []string
	// shapeHint, when not empty, says which Options.Import.Shapes entry
	// changed a size the file fixes: a node that then fails may be
	// failing on the option, not on the model.
	shapeHint string
	meta      *jsMeta
	nodes     []tfNode
	index     map[string]int
	order     []int
	// vals[node][output] is what inference knows of each tensor.
	vals [][]*value
	// declared holds, by tensor name, what is known of tensors beyond
	// forward inference: the signature's shapes, deductions from
	// consumers (backward.go) and assumptions (assumed). Rebuilt by
	// every infer run.
	declared map[string]*value
	// assumed holds the shapes settled by assumptions (assume.go); they
	// survive infer runs.
	assumed map[string]*value
	// learned names the tensors whose shapes backward deduction added
	// to; choices holds, by tensor name, alternatives deduction could not
	// decide between.
	learned map[string]bool
	choices map[string][]*value
	// strict makes a contradiction between forward inference and a
	// declared shape an error (while trying guesses).
	strict bool
	works  []graph.Work
	// consts caches the decoded Const values by node.
	consts []*value
	// guesses holds values chosen for scalar axis constants whose
	// contents the model does not carry (see guess.go); deducedAxes and
	// guessedAxes name them ("name=value") by how they were settled.
	guesses                  map[string]int64
	deducedAxes, guessedAxes []string
	// assumedSame and assumedReshape name the tensors shaped by each
	// assumption, for the warnings.
	assumedSame, assumedReshape []string
	warnings                    map[string]string
	params                      int64
	// passes counts forward inference passes, which settle's guesses
	// multiply (see settleBudget).
	passes int
	// settleEnd is the pass count at which settle stops guessing.
	settleEnd int
}

func newConverter(name string, opts Options, meta *jsMeta) *converter {
	if opts.Import.Knobs == nil {
		opts.Import.Knobs = importopt.Fields{Prefix: "Options.Import."} // messages name tf.Options' fields
	}
	return &converter{name: name, opts: opts, meta: meta, warnings: map[string]string{}, declared: map[string]*value{},
		assumed: map[string]*value{}, guesses: map[string]int64{}}
}

func (c *converter) warn(key, msg string) {
	if _, ok := c.warnings[key]; !ok {
		c.warnings[key] = msg
	}
}

func (c *converter) finishWarnings() []string {
	out := make([]string, 0, len(c.warnings))
	for _, w := range c.warnings {
		out = append(out, w)
	}
	sort.Strings(out)
	return out
}

// tensorName names output i of node: the node's name for output 0, as
// TensorFlow does, else "name:i".
func tensorName(node string, i int) string {
	if i == 0 {
		return node
	}
	return node + ":" + strconv.Itoa(i)
}

// isSource reports whether a node becomes a tensor rather than an op.
func isSource(op string) bool { return op == "Const" || op == "Placeholder" }

func label(nd *nodepb.NodeDef) string { return strconv.Quote(nd.GetName()) + " (" + nd.GetOp() + ")" }

func (c *converter) convert(gd *graphpb.GraphDef) (*graph.Graph, error) {
	if err := c.resolve(gd.GetNode()); err != nil {
		return nil, err
	}
	if err := c.topoSort(); err != nil {
		return nil, err
	}
	if c.meta != nil {
		if len(c.meta.missing) > 0 {
			c.warn("weights", fmt.Sprintf("weight file %s not found next to the model: the values of shape-feeding constants are unknown, so shapes they decide are recovered from the signature and from the ops consuming them where possible", strings.Join(c.meta.missing, ", ")))
		}
		for i, note := range c.meta.notes {
			c.warn("weights:"+strconv.Itoa(i), note)
		}
	}
	if err := c.infer(); err != nil {
		return nil, err
	}
	if err := c.settle(); err != nil {
		return nil, err
	}
	c.settleWarnings()
	loops, err := c.controlFlow()
	if err != nil {
		return nil, err
	}
	return c.build(loops)
}

// infer runs forward inference and backward deduction until nothing new
// is learned, starting from the signature's shapes and the assumptions
// made so far.
func (c *converter) infer() error {
	c.declared = make(map[string]*value, len(c.assumed)+4)
	c.learned = map[string]bool{}
	c.choices = map[string][]*value{}
	if c.meta != nil {
		for name, s := range c.meta.outputs {
			if v := c.bindSignature(s); v != nil {
				c.declared[name] = v
			}
		}
	}
	for name, v := range c.assumed {
		if m, ok := meet(c.declared[name], v); ok {
			c.declared[name] = m
		}
	}
	for pass := 0; ; pass++ {
		if err := c.inferAll(); err != nil {
			return err
		}
		if pass == maxPasses || !c.deduce() {
			return nil
		}
	}
}

// bindSignature turns a signature shape into a declared value, binding a
// dynamic leading dimension with --batch; other dynamic dimensions stay
// unknown.
func (c *converter) bindSignature(s []int64) *value {
	v := &value{shape: shapes.Clone(s), ranked: true}
	for i, d := range v.shape {
		if d < 0 {
			v.shape[i] = unknownDim
			if i == 0 && c.opts.Import.Batch > 0 {
				v.shape[i] = c.opts.Import.Batch
			}
		}
	}
	return v
}

// resolve indexes the nodes and parses their inputs.
func (c *converter) resolve(defs []*nodepb.NodeDef) error {
	c.index = make(map[string]int, len(defs))
	c.nodes = make([]tfNode, len(defs))
	for i, nd := range defs {
		switch {
		case nd.GetName() == "":
			return fmt.Errorf("node #%d (%s) has no name", i, nd.GetOp())
		case nd.GetOp() == "":
			return fmt.Errorf("node %q has no op type", nd.GetName())
		}
		if _, dup := c.index[nd.GetName()]; dup {
			return fmt.Errorf("node %q is defined twice", nd.GetName())
		}
		c.index[nd.GetName()] = i
		c.nodes[i].def = nd
	}
	for i := range c.nodes {
		n := &c.nodes[i]
		for _, in := range n.def.GetInput() {
			name, ctrl := strings.CutPrefix(in, "^")
			out := 0
			if !ctrl {
				if k := strings.LastIndexByte(name, ':'); k >= 0 {
					v, err := strconv.Atoi(name[k+1:])
					if err != nil || v < 0 {
						return fmt.Errorf("node %s: input %q is not NODE or NODE:INDEX", label(n.def), in)
					}
					name, out = name[:k], v
				}
			}
			src, ok := c.index[name]
			if !ok || name == "" {
				return fmt.Errorf("node %s: input %q names no node of the graph; the graph is incomplete (export or freeze it with all its dependencies)", label(n.def), in)
			}
			if ctrl {
				n.ctrl = append(n.ctrl, src)
				continue
			}
			if isMerge(n.def.GetOp()) && isNextIteration(defs[src].GetOp()) {
				n.back = append(n.back, src)
				continue
			}
			n.ins = append(n.ins, ref{src, out})
		}
	}
	// Output counts: what the op type says, or more if a consumer reads
	// further.
	for i := range c.nodes {
		c.nodes[i].nout = fixedOutputs(c.nodes[i].def, len(c.nodes[i].ins))
	}
	for i := range c.nodes {
		for _, r := range c.nodes[i].ins {
			src := &c.nodes[r.node]
			if r.out >= src.nout {
				if isSource(src.def.GetOp()) || r.out > 1<<16 {
					return fmt.Errorf("node %s reads output %d of %s, which has %d", label(c.nodes[i].def), r.out, label(src.def), src.nout)
				}
				src.nout = r.out + 1
			}
		}
	}
	return nil
}

// fixedOutputs is the number of outputs an op type produces.
func fixedOutputs(nd *nodepb.NodeDef, nin int) int {
	a := nd.GetAttr()
	switch nd.GetOp() {
	case "NoOp", "Assert", "SaveV2":
		return 0
	case "Unpack":
		return int(a["num"].GetI())
	case "Split", "SplitV":
		return int(a["num_split"].GetI())
	case "FusedBatchNorm", "FusedBatchNormV2":
		return 5
	case "FusedBatchNormV3", "_FusedBatchNormEx":
		return 6
	case "TopKV2", "Unique", "Switch", "RefSwitch", "Merge", "RefMerge", "TensorArrayV3", "NonMaxSuppressionV4":
		return 2
	case "NonMaxSuppressionV5":
		return 3
	case "IdentityN":
		return nin
	}
	return 1
}

// topoSort orders the nodes so that every node follows its data and
// control inputs; ties go to file order.
func (c *converter) topoSort() error {
	succ := make([][]int32, len(c.nodes))
	for i := range c.nodes {
		for _, r := range c.nodes[i].ins {
			succ[r.node] = append(succ[r.node], int32(i))
		}
		for _, s := range c.nodes[i].ctrl {
			succ[s] = append(succ[s], int32(i))
		}
	}
	order, cycle := graph.TopoSort(len(c.nodes), func(v int32) []int32 { return succ[v] })
	if cycle != nil {
		return fmt.Errorf("the graph has a cycle through node %s (a while loop's only cycle is NextIteration feeding its Merge)", label(c.nodes[slices.Min(cycle)].def))
	}
	c.order = make([]int, len(order))
	for i, v := range order {
		c.order[i] = int(v)
	}
	return nil
}

// inferAll runs one forward inference pass over every node.
func (c *converter) inferAll() error {
	c.passes++
	c.vals = make([][]*value, len(c.nodes))
	c.works = make([]graph.Work, len(c.nodes))
	var arrays map[int]*tensorArray
	for _, i := range c.order {
		tn := &c.nodes[i]
		nd := tn.def
		switch nd.GetOp() {
		case "Const":
			v, err := c.constant(i)
			if err != nil {
				return fmt.Errorf("node %s: %v", label(nd), err)
			}
			c.vals[i] = []*value{v}
			continue
		case "Placeholder":
			v, err := c.placeholderValue(nd)
			if err != nil {
				return err
			}
			c.vals[i] = []*value{v}
			continue
		}
		n := &node{def: nd, name: nd.GetName(), op: nd.GetOp(),
			in: make([]*value, len(tn.ins)), out: make([]*value, tn.nout), declared: make([]*value, tn.nout)}
		for k, r := range tn.ins {
			n.in[k] = c.vals[r.node][r.out]
		}
		for k := range n.declared {
			n.declared[k] = c.declared[tensorName(n.name, k)]
		}
		if isTensorArray(n.op) {
			if arrays == nil {
				arrays = map[int]*tensorArray{}
			}
			n.ta = c.array(arrays, i)
		}
		if err := c.inferNode(n); err != nil {
			return fmt.Errorf("node %s: %v%s", label(nd), err, c.shapeHint)
		}
		c.vals[i] = n.out
		c.works[i] = n.work
	}
	return nil
}

// deduce runs the backward rules (backward.go) over the graph in
// reverse order, so that a chain of deductions completes in one sweep,
// recording what they learn as declared shapes for the next forward
// pass. It reports whether it learned anything.
func (c *converter) deduce() bool {
	changed := false
	for k := len(c.order) - 1; k >= 0; k-- {
		i := c.order[k]
		tn := &c.nodes[i]
		if isSource(tn.def.GetOp()) || len(tn.ins) == 0 {
			continue
		}
		rule := backRuleFor(tn.def.GetOp())
		if rule == nil {
			continue
		}
		for j, cands := range rule(c.view(i)) {
			if j < len(tn.ins) && len(cands) > 0 && c.learn(tn.ins[j], cands) {
				changed = true
			}
		}
	}
	return changed
}

// view is node i as inference left it: current inputs and outputs.
func (c *converter) view(i int) *node {
	tn := &c.nodes[i]
	nd := tn.def
	n := &node{def: nd, name: nd.GetName(), op: nd.GetOp(), in: make([]*value, len(tn.ins)), out: c.vals[i]}
	for k, r := range tn.ins {
		n.in[k] = c.vals[r.node][r.out]
	}
	return n
}

// learn merges the candidate shapes a backward rule gives for tensor r
// into what is known of it. Candidates that contradict it are dropped;
// of several, only what all agree on is taken, and the alternatives are
// kept for assumptions to choose from. It reports whether r's shape
// gained anything.
func (c *converter) learn(r ref, cands []*value) bool {
	src := &c.nodes[r.node]
	if isSource(src.def.GetOp()) {
		return false
	}
	cur := c.vals[r.node][r.out]
	var ok []*value
	for _, cd := range cands {
		if m, good := meet(cur, cd); good {
			ok = append(ok, m)
		}
	}
	if len(ok) == 0 {
		return false
	}
	name := tensorName(src.def.GetName(), r.out)
	m := ok[0]
	if len(ok) > 1 {
		c.choices[name] = ok
		mm, good := meet(cur, common(ok))
		if !good {
			return false
		}
		m = mm
	}
	if !moreThan(m, cur) {
		return false
	}
	if err := checkPartial(m); err != nil {
		return false
	}
	hint, good := meet(c.declared[name], &value{shape: m.shape, ranked: m.ranked, count: m.numElems()})
	if !good {
		return false
	}
	c.declared[name] = hint
	c.vals[r.node][r.out] = m
	c.learned[name] = true
	return true
}

// constant is node i's Const value, decoded once (inference runs many
// times while settling missing values), with the value settled for it
// if its contents are missing.
func (c *converter) constant(i int) (*value, error) {
	if c.consts == nil {
		c.consts = make([]*value, len(c.nodes))
	}
	v := c.consts[i]
	if v == nil {
		var err error
		if v, err = c.constValue(c.nodes[i].def); err != nil {
			return nil, err
		}
		c.consts[i] = v
	}
	if g, ok := c.guesses[c.nodes[i].def.GetName()]; ok && !v.hasInts() {
		ints := make([]int64, shapes.Prod(v.shape))
		for k := range ints {
			ints[k] = g
		}
		return &value{dtype: v.dtype, shape: v.shape, ranked: v.ranked, ints: ints, fromConst: true}, nil
	}
	return v, nil
}

// constValue reads a Const node; for TF.js models the manifest gives the
// shape and the weight files, when present, the contents.
func (c *converter) constValue(nd *nodepb.NodeDef) (*value, error) {
	t := nd.GetAttr()["value"].GetTensor()
	v, err := tensorValue(t)
	if err != nil {
		return nil, err
	}
	if dt := dtypeOf(nd.GetAttr()["dtype"].GetType()); dt != graph.Undefined {
		v.dtype = dt
	}
	v.fromConst = true
	if c.meta != nil {
		if w, ok := c.meta.weights[nd.GetName()]; ok {
			if err := checkShape(w.Shape); err != nil {
				return nil, fmt.Errorf("weights manifest: %v", err)
			}
			v.shape = shapes.Clone(w.Shape)
			if v.dtype == graph.Undefined {
				v.dtype = jsDType(w.Dtype)
			}
			if ints, ok := c.meta.values[nd.GetName()]; ok && int64(len(ints)) == shapes.Prod(v.shape) {
				v.ints = ints
			}
		}
	}
	return v, nil
}

// placeholderValue resolves a graph input's shape from --shape, the
// node's shape attribute or the TF.js signature, binding a dynamic
// leading dimension with --batch.
func (c *converter) placeholderValue(nd *nodepb.NodeDef) (*value, error) {
	name := nd.GetName()
	dt := dtypeOf(nd.GetAttr()["dtype"].GetType())
	key := name
	given, override := c.opts.Import.Shapes[key]
	if !override {
		key = name + ":0"
		given, override = c.opts.Import.Shapes[key]
	}
	dims, ranked := shapeOf(nd.GetAttr()["shape"].GetShape())
	if c.meta != nil {
		if s, ok := c.meta.inputs[name]; ok && (!ranked || len(dims) == len(s)) {
			if !ranked {
				dims, ranked = shapes.Clone(s), true
			}
			for i := range dims {
				if dims[i] < 0 && s[i] >= 0 {
					dims[i] = s[i]
				}
			}
		}
	}
	if override {
		if ranked && len(dims) != len(given) {
			decl := make([]string, len(dims))
			for i, d := range dims {
				decl[i] = "?"
				if d >= 0 {
					decl[i] = strconv.FormatInt(d, 10)
				}
			}
			return nil, importopt.ShapeRankError(c.opts.Import.Knobs, key, given, decl)
		}
		for axis, d := range dims {
			if d >= 0 && d != given[axis] && c.shapeHint == "" {
				g := make([]string, len(given))
				for i, x := range given {
					g[i] = strconv.FormatInt(x, 10)
				}
				c.shapeHint = fmt.Sprintf("; %s sets axis %d of input %q to %d, where the model declares %d",
					c.opts.Import.Knobs.Shape(key, strings.Join(g, ",")), axis, name, given[axis], d)
			}
		}
		return &value{dtype: dt, shape: shapes.Clone(given), ranked: true}, nil
	}
	if !ranked || nd.GetAttr()["shape"] == nil && dims == nil {
		return nil, fmt.Errorf("input %q has no declared shape; set it with %s", name, c.opts.Import.Knobs.Shape(name, "D0,D1,..."))
	}
	if b := c.opts.Import.Batch; b > 0 && len(dims) > 0 {
		switch {
		case dims[0] < 0 || dims[0] == b:
			c.batchBinds = true
		case c.batchFixed == "":
			c.batchFixed = name
			for _, d := range dims {
				c.batchFixedDims = append(c.batchFixedDims, strconv.FormatInt(d, 10))
			}
		}
	}
	for axis, d := range dims {
		if d == 0 {
			c.warn("empty:"+name, fmt.Sprintf("input %q axis %d has size 0 in the model: the tensor is empty, and so is the work of every op that depends on it", name, axis))
		}
		if d >= 0 {
			continue
		}
		if axis == 0 && c.opts.Import.Batch > 0 {
			dims[axis] = c.opts.Import.Batch
			continue
		}
		hint := ""
		if axis == 0 {
			hint = " or " + c.opts.Import.Knobs.Batch("N")
		}
		return nil, fmt.Errorf("input %q axis %d has no fixed size (-1); set the whole shape with %s%s", name, axis, c.opts.Import.Knobs.Shape(name, "D0,D1,..."), hint)
	}
	if err := checkShape(dims); err != nil {
		return nil, fmt.Errorf("input %q: %v", name, err)
	}
	return &value{dtype: dt, shape: dims, ranked: true}, nil
}

// build turns the inferred nodes into the operator DAG.
func (c *converter) build(loops loopInfo) (*graph.Graph, error) {
	g := graph.New("", len(c.nodes), len(c.nodes)+len(c.nodes)/4)
	tids := make([][]graph.TensorID, len(c.nodes))
	opOf := make([]graph.OpID, len(c.nodes))
	unshaped := map[string][]string{}
	for _, i := range c.order {
		tn := &c.nodes[i]
		nd := tn.def
		opOf[i] = graph.NoOp
		kind := graph.Activation
		switch nd.GetOp() {
		case "Placeholder":
			kind = graph.Input
		case "Const":
			kind = graph.Constant
			if v := c.vals[i][0]; v.dtype.IsFloat() {
				kind = graph.Parameter
				c.params += v.elems()
			}
		}
		tids[i] = make([]graph.TensorID, tn.nout)
		for k := 0; k < tn.nout; k++ {
			v := c.vals[i][k]
			t := graph.Tensor{Name: tensorName(nd.GetName(), k), DType: v.dtype, Kind: kind}
			if v.known() {
				t.Shape, t.ShapeKnown = shapes.Clone(v.shape), true
			} else if !isSource(nd.GetOp()) {
				unshaped[nd.GetOp()] = append(unshaped[nd.GetOp()], t.Name)
			}
			id, err := g.AddTensor(t)
			if err != nil {
				return nil, err
			}
			tids[i][k] = id
			if kind == graph.Input {
				g.Inputs = append(g.Inputs, id)
			}
		}
		if isSource(nd.GetOp()) {
			continue
		}
		op := graph.Op{Name: nd.GetName(), Type: nd.GetOp(), Attrs: convertAttrs(nd), Work: c.works[i]}
		if loops.scale != nil {
			k := loops.scale[i]
			op.Work.FLOPs, op.Work.MACs = shapes.MulSat(op.Work.FLOPs, k), shapes.MulSat(op.Work.MACs, k)
			op.Work.Estimated = op.Work.Estimated || loops.estimated[i] && k > 0
		}
		for _, r := range tn.ins {
			op.Inputs = append(op.Inputs, tids[r.node][r.out])
		}
		op.Outputs = tids[i]
		for _, s := range tn.ctrl {
			if opOf[s] != graph.NoOp {
				op.ControlDeps = append(op.ControlDeps, opOf[s])
			}
		}
		if dev := nd.GetDevice(); dev != "" && c.opts.Pins != nil {
			d, err := c.opts.Pins(dev)
			if err != nil {
				return nil, fmt.Errorf("node %s: device %q: %v", label(nd), dev, err)
			}
			op.Device = d
		}
		id, err := g.AddOp(op)
		if err != nil {
			return nil, err
		}
		opOf[i] = id
	}
	c.colocate(g, opOf)
	c.outputs(g, tids)
	if len(unshaped) > 0 {
		types := make([]string, 0, len(unshaped))
		total := 0
		for t, names := range unshaped {
			types = append(types, t)
			total += len(names)
		}
		sort.Strings(types)
		c.warn("unshaped", fmt.Sprintf("%d op outputs have unknown shapes (op types %s; e.g. %q); their costs are estimated", total, strings.Join(types, ", "), unshaped[types[0]][0]))
	}
	if len(c.opts.Import.Dims) > 0 {
		k := c.opts.Import.Knobs
		c.warn("dims", fmt.Sprintf("%s binds named dimensions, which TensorFlow graphs do not have; use %s or %s", k.Dim("", ""), k.Batch(""), k.Shape("", "")))
	}
	if b := c.opts.Import.Batch; b > 0 && !c.batchBinds {
		c.warn("batch", importopt.BatchUnused(c.opts.Import.Knobs, b, c.batchFixed, c.batchFixedDims, ""))
	}
	for name := range c.opts.Import.Shapes {
		i, ok := c.index[strings.TrimSuffix(name, ":0")]
		if !ok || c.nodes[i].def.GetOp() != "Placeholder" {
			c.warn("shape:"+name, fmt.Sprintf("%s: the graph has no Placeholder named %q", c.opts.Import.Knobs.Shape(name, ""), name))
		}
	}
	return g, nil
}

// colocate turns `_class: loc:@X` attributes into colocation groups:
// every op in a group (X included) must share a device. Groups are keyed
// by their first member in file order, for stable output.
func (c *converter) colocate(g *graph.Graph, opOf []graph.OpID) {
	uf := graph.NewUnionFind[int32](len(c.nodes))
	any := false
	for i := range c.nodes {
		for _, s := range c.nodes[i].def.GetAttr()["_class"].GetList().GetS() {
			target, ok := strings.CutPrefix(string(s), "loc:@")
			if !ok {
				continue
			}
			j, ok := c.index[target]
			if !ok {
				c.warn("class:"+target, fmt.Sprintf("node %s asks to be colocated with %q, which is not in the graph; ignored", label(c.nodes[i].def), target))
				continue
			}
			uf.Union(int32(i), int32(j))
			any = true
		}
	}
	if !any {
		return
	}
	count := make([]int, len(c.nodes)) // ops per group, by representative
	for i := range c.nodes {
		if opOf[i] != graph.NoOp {
			count[uf.Find(int32(i))]++
		}
	}
	for i := range c.nodes {
		if r := uf.Find(int32(i)); opOf[i] != graph.NoOp && count[r] > 1 {
			g.Ops[opOf[i]].Colocate = "loc:@" + c.nodes[r].def.GetName()
		}
	}
}

// outputs sets the graph outputs: the signature's, else every op output
// nothing reads.
func (c *converter) outputs(g *graph.Graph, tids [][]graph.TensorID) {
	if c.meta != nil && len(c.meta.outputs) > 0 {
		names := make([]string, 0, len(c.meta.outputs))
		for n := range c.meta.outputs {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if id, ok := g.TensorByName(n); ok {
				g.Outputs = append(g.Outputs, id)
			}
		}
		if len(g.Outputs) > 0 {
			return
		}
	}
	for _, i := range c.order {
		if op := c.nodes[i].def.GetOp(); isSource(op) || isNextIteration(op) || isSwitch(op) || op == "LoopCond" {
			continue // control-flow plumbing, not results
		}
		for k, id := range tids[i] {
			if k == 1 && isMerge(c.nodes[i].def.GetOp()) {
				continue // the index of the input taken
			}
			if len(g.Tensors[id].Consumers) == 0 {
				g.Outputs = append(g.Outputs, id)
			}
		}
	}
}

// convertAttrs copies a node's attributes, and its device as "_device".
func convertAttrs(nd *nodepb.NodeDef) graph.Attrs {
	a := graph.Attrs{}
	for k, v := range nd.GetAttr() {
		switch x := v.GetValue().(type) {
		case *attrpb.AttrValue_I:
			a[k] = graph.Attr{Kind: graph.AttrInt, Int: x.I}
		case *attrpb.AttrValue_F:
			a[k] = graph.Attr{Kind: graph.AttrFloat, Float: float64(x.F)}
		case *attrpb.AttrValue_B:
			a[k] = graph.Attr{Kind: graph.AttrInt, Int: boolInt(x.B)}
		case *attrpb.AttrValue_S:
			a[k] = graph.Attr{Kind: graph.AttrString, String: string(x.S)}
		case *attrpb.AttrValue_Type:
			a[k] = graph.Attr{Kind: graph.AttrString, String: dtypeOf(x.Type).String()}
		case *attrpb.AttrValue_Shape:
			dims, _ := shapeOf(x.Shape)
			a[k] = graph.Attr{Kind: graph.AttrInts, Ints: dims}
		case *attrpb.AttrValue_List:
			l := x.List
			switch {
			case len(l.GetI()) > 0:
				a[k] = graph.Attr{Kind: graph.AttrInts, Ints: shapes.Clone(l.GetI())}
			case len(l.GetF()) > 0:
				fs := make([]float64, len(l.GetF()))
				for i, f := range l.GetF() {
					fs[i] = float64(f)
				}
				a[k] = graph.Attr{Kind: graph.AttrFloats, Floats: fs}
			case len(l.GetS()) > 0:
				ss := make([]string, len(l.GetS()))
				for i, s := range l.GetS() {
					ss[i] = string(s)
				}
				a[k] = graph.Attr{Kind: graph.AttrStrings, Strings: ss}
			}
		}
	}
	if d := nd.GetDevice(); d != "" {
		a["_device"] = graph.Attr{Kind: graph.AttrString, String: d}
	}
	return a
}
