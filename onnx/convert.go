package onnx

import (
	"errors"
	"fmt"
	"github.com/opplace/opplace/internal/importopt"
	"slices"
	"strconv"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
	"github.com/opplace/opplace/onnx/onnxpb"
)

// converter imports one model: it builds the operator graph (and nested
// graphs for control flow), then infers shapes in topological order.
type converter struct {
	file   string
	opts   Options
	opsets map[string]int64
	// dimsSeen records the symbolic dimensions the model mentions, so an
	// unused Dims entry can be reported.
	dimsSeen map[string]bool
	warnings map[string]string
	// unshaped lists, per op type, the nodes whose outputs stayed unknown.
	unshaped map[string][]string
	// dynamicIf and dynamicLoop list the If nodes whose condition and the
	// Loop nodes whose trip count are not constants, in inference order;
	// hugeLoop the Loop nodes whose constant trip count is too large to
	// count (maxTrips or more), with that count.
	dynamicIf   []string
	dynamicLoop []string
	hugeLoop    []hugeLoop
	// forcedIf lists the If nodes with a run-time condition of which only
	// one branch could be shaped, so that branch was taken.
	forcedIf []string
	depth    int
	// constFloats holds the contents of small float tensor attributes
	// (graph.Attr keeps only integer contents).
	constFloats map[*graph.Tensor][]float64
	// rebatched is set when a main-graph input's leading axis, fixed in
	// the file, was bound to another size: a reshape whose constant
	// target still holds the file's size then cannot work (exportBatch).
	rebatched *exportBatch
	// reshaped is set when the options' shape for a main-graph input
	// changed a size the file fixes past the leading axis: a node that
	// then fails may be failing on the option, not on the model.
	reshaped *shapeOverride
}

// shapeOverride records the first axis past the leading one whose fixed
// size in the file Options.Shapes changed.
type shapeOverride struct {
	input      string
	axis       int
	file, now  int64
	givenShape []int64
}

// exportBatch records the leading size an input had in the file and the
// one the options gave it.
type exportBatch struct {
	input     string
	file, now int64
	fileShape []int64
}

func newConverter(file string, opts Options, mp *onnxpb.ModelProto) *converter {
	c := &converter{
		file:     file,
		opts:     opts,
		opsets:   map[string]int64{},
		dimsSeen: map[string]bool{},
		warnings: map[string]string{},
		unshaped: map[string][]string{},

		constFloats: map[*graph.Tensor][]float64{},
	}
	if c.opts.Knobs == nil {
		c.opts.Knobs = Fields{}
	}
	for _, o := range mp.GetOpsetImport() {
		c.opsets[normDomain(o.GetDomain())] = o.GetVersion()
	}
	if v := c.opsets[""]; v > NewestOpset {
		c.warn("opset", fmt.Sprintf("the model imports ai.onnx opset %d, newer than the newest this importer knows (%d): ops are shaped by their opset-%d definitions, and op types added since are unknown (estimated cost)", v, NewestOpset, NewestOpset))
	}
	if _, ok := c.opsets[""]; !ok {
		// IR version 1 and 2 models predate opset imports; they are opset 1.
		c.opsets[""] = 1
		if mp.GetIrVersion() >= 3 {
			c.warn("opset", "the model imports no ai.onnx opset; assuming opset 1")
		}
	}
	return c
}

// NewestOpset is the newest ai.onnx opset whose operators the importer
// implements (ONNX 1.18). Newer models import with a warning.
const NewestOpset = 23

// warn records a warning once per key.
func (c *converter) warn(key, msg string) {
	if _, ok := c.warnings[key]; !ok {
		c.warnings[key] = msg
	}
}

func (c *converter) finishWarnings() []string {
	for op, names := range c.unshaped {
		msg := fmt.Sprintf("%d %s node(s) have outputs of unknown shape (first: %q)", len(names), op, names[0])
		c.warn("unshaped:"+op, msg)
	}
	c.controlFlowWarnings()
	for d := range c.opts.Dims {
		if !c.dimsSeen[d] {
			c.warn("dim:"+d, fmt.Sprintf("%s: the model has no symbolic dimension named %q", c.opts.Knobs.Dim(d, ""), d))
		}
	}
	out := make([]string, 0, len(c.warnings))
	for _, m := range c.warnings {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// subgraph is a graph being imported, with what inference needs beyond
// the graph.Graph: the proto nodes by op ID, positional input and output
// names, names read from enclosing scopes, and declared shapes.
type subgraph struct {
	g     *graph.Graph
	proto *onnxpb.GraphProto
	nodes []nodeRef
	order []graph.OpID
	// outer lists names this graph (or graphs nested in it) reads from
	// enclosing scopes, sorted.
	outer []string
	// inputs are the formal (non-initializer) input names, in order.
	inputs   []string
	outputs  []string
	declared map[string]*onnxpb.TypeProto
}

type nodeRef struct {
	proto *onnxpb.NodeProto
	ins   []string
	outs  []string
	attrs graph.Attrs
	sub   map[string]*subgraph
}

// convert imports the main graph and infers its shapes.
func (c *converter) convert(gp *onnxpb.GraphProto) (*graph.Graph, error) {
	sg, err := c.build(gp, nil, true)
	if err != nil {
		return nil, err
	}
	for _, name := range sortedKeys(c.opts.Shapes) {
		if !slices.Contains(sg.inputs, name) {
			if id, ok := sg.g.TensorByName(name); ok && sg.g.Tensor(id).Kind == graph.Parameter {
				return nil, fmt.Errorf("%s: %q is a weight of the model (an initializer), whose shape the file fixes, not an input (inputs: %v)", c.opts.Knobs.Shape(name, ""), name, sg.inputs)
			}
			return nil, fmt.Errorf("%s: the model has no input named %q (inputs: %v)", c.opts.Knobs.Shape(name, ""), name, sg.inputs)
		}
	}
	sc := &scope{vals: map[string]*value{}}
	batchBinds, byDim := false, ""
	var fixed *onnxpb.ValueInfoProto // the first input whose leading size the file fixes
	for _, name := range sg.inputs {
		id, _ := sg.g.TensorByName(name)
		var vi *onnxpb.ValueInfoProto
		for _, in := range gp.GetInput() {
			if in.GetName() == name {
				vi = in
				break
			}
		}
		v, err := c.inputValue(vi)
		if err != nil {
			return nil, err
		}
		if _, given := c.opts.Shapes[name]; !given {
			switch d := vi.GetType().GetTensorType().GetShape().GetDim(); {
			case len(d) == 0:
			case d[0].GetDimParam() != "" && c.opts.Dims[d[0].GetDimParam()] > 0:
				if byDim == "" {
					byDim = d[0].GetDimParam()
				}
			case d[0].GetValue() == nil || d[0].GetDimParam() != "" || d[0].GetDimValue() == c.opts.Batch:
				batchBinds = true // or the file's batch is the one asked for
			case fixed == nil:
				fixed = vi
			}
		}
		c.noteExportBatch(vi, v)
		sc.vals[name] = v
		writeTensor(sg.g.Tensor(id), v)
	}
	if b := c.opts.Batch; b > 0 && !batchBinds {
		c.warn("batch", c.batchUnused(fixed, byDim))
	}
	if err := c.infer(sg, sc); err != nil {
		return nil, err
	}
	return sg.g, nil
}

// shadowed checks an initializer t that gives graph input in its default
// value: ONNX requires it to have the input's declared element type and
// shape (a symbolic dimension matching any size), and a clash would
// otherwise surface as a shape error at the first node that reads it.
func shadowed(in *onnxpb.ValueInfoProto, t *graph.Tensor) error {
	tt := in.GetType().GetTensorType()
	dt := graph.DType(tt.GetElemType())
	same := tt.GetElemType() == 0 || dt == t.DType
	if decl := tt.GetShape(); decl != nil {
		if len(decl.GetDim()) != len(t.Shape) {
			same = false
		}
		for i, d := range decl.GetDim() {
			if v, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue); ok && i < len(t.Shape) && v.DimValue != t.Shape[i] {
				same = false
			}
		}
	}
	if same {
		return nil
	}
	declared := "of any shape"
	if tt.GetShape() != nil {
		declared = "[" + strings.Join(declaredDims(tt.GetShape()), ",") + "]"
	}
	if tt.GetElemType() != 0 {
		declared = dt.String() + " " + declared
	}
	init := make([]string, len(t.Shape))
	for i, d := range t.Shape {
		init[i] = strconv.FormatInt(d, 10)
	}
	return fmt.Errorf("graph input %q is declared %s, but the initializer of the same name, which gives the input its default value, is %s [%s]: "+
		"the two must agree (fix the input's declaration or the initializer)",
		in.GetName(), declared, t.DType, strings.Join(init, ","))
}

// batchUnused is the warning for Options.Batch when no input's leading
// dimension is left for it to bind (see BatchUnused). fixed is the first
// input whose leading size the file fixes (nil: none), byDim the first
// symbolic leading dimension Options.Dims binds ("": none).
func (c *converter) batchUnused(fixed *onnxpb.ValueInfoProto, byDim string) string {
	if byDim != "" {
		return importopt.BatchUnused(c.opts.Knobs, c.opts.Batch, "", nil, c.opts.Knobs.Dim(byDim, strconv.FormatInt(c.opts.Dims[byDim], 10)))
	}
	if fixed == nil {
		return importopt.BatchUnused(c.opts.Knobs, c.opts.Batch, "", nil, "")
	}
	return importopt.BatchUnused(c.opts.Knobs, c.opts.Batch, fixed.GetName(), declaredDims(fixed.GetType().GetTensorType().GetShape()), "")
}

// lookup tells whether a name is visible from enclosing scopes.
type lookup func(name string) bool

// build creates the graph structure of gp: tensors for initializers,
// inputs and node outputs, one op per node, nested graphs for control
// flow. outer resolves names of enclosing scopes (nil for the main graph).
func (c *converter) build(gp *onnxpb.GraphProto, outer lookup, top bool) (*subgraph, error) {
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > 64 {
		return nil, errors.New("control-flow subgraphs are nested more than 64 deep")
	}
	nodes := gp.GetNode()
	g := graph.New(gp.GetName(), len(nodes), len(nodes)+len(gp.GetInitializer())+len(gp.GetInput()))
	sg := &subgraph{g: g, proto: gp, declared: map[string]*onnxpb.TypeProto{}}

	for _, in := range gp.GetInitializer() {
		if in.GetName() == "" {
			return nil, errors.New("an initializer has no name")
		}
		dims := in.GetDims()
		if err := checkShape(dims); err != nil {
			return nil, fmt.Errorf("initializer %q: %v", in.GetName(), err)
		}
		if err := checkTensor(in); err != nil {
			return nil, fmt.Errorf("initializer %q: %v", in.GetName(), err)
		}
		if _, err := g.AddTensor(graph.Tensor{Name: in.GetName(), DType: graph.DType(in.GetDataType()),
			Shape: shapes.Clone(dims), ShapeKnown: true, Kind: graph.Parameter}); err != nil {
			return nil, fmt.Errorf("initializer %q is defined twice", in.GetName())
		}
	}
	for _, sp := range gp.GetSparseInitializer() {
		v := sp.GetValues()
		name := v.GetName()
		if err := checkShape(sp.GetDims()); err != nil || name == "" {
			return nil, fmt.Errorf("sparse initializer %q has a bad shape or no name", name)
		}
		if _, err := elemType(v.GetDataType()); err != nil {
			return nil, fmt.Errorf("sparse initializer %q: data_type %v", name, err)
		}
		if _, err := g.AddTensor(graph.Tensor{Name: name, DType: graph.DType(v.GetDataType()),
			Shape: shapes.Clone(sp.GetDims()), ShapeKnown: true, Kind: graph.Parameter}); err != nil {
			return nil, fmt.Errorf("initializer %q is defined twice", name)
		}
	}
	for _, in := range gp.GetInput() {
		name := in.GetName()
		if name == "" {
			return nil, errors.New("a graph input has no name")
		}
		if id, isInit := g.TensorByName(name); isInit {
			// An initializer listed as input (IR < 4): a parameter, whose
			// initializer is the input's default value.
			if err := shadowed(in, g.Tensor(id)); err != nil {
				return nil, err
			}
			continue
		}
		dt, err := elemType(in.GetType().GetTensorType().GetElemType())
		if err != nil {
			return nil, fmt.Errorf("graph input %q: elem_type %v", name, err)
		}
		id, err := g.AddTensor(graph.Tensor{Name: name, DType: dt, Kind: graph.Input})
		if err != nil {
			return nil, fmt.Errorf("graph input %q is declared twice", name)
		}
		g.Inputs = append(g.Inputs, id)
		sg.inputs = append(sg.inputs, name)
	}
	for _, vi := range gp.GetValueInfo() {
		if _, err := elemType(vi.GetType().GetTensorType().GetElemType()); err != nil {
			return nil, fmt.Errorf("value_info %q: elem_type %v", vi.GetName(), err)
		}
		sg.declared[vi.GetName()] = vi.GetType()
	}
	for _, vi := range gp.GetOutput() {
		if _, err := elemType(vi.GetType().GetTensorType().GetElemType()); err != nil {
			return nil, fmt.Errorf("graph output %q: elem_type %v", vi.GetName(), err)
		}
		sg.declared[vi.GetName()] = vi.GetType()
	}
	for _, tp := range sg.declared {
		for _, d := range tp.GetTensorType().GetShape().GetDim() {
			if p := d.GetDimParam(); p != "" {
				c.dimsSeen[p] = true
			}
		}
	}

	// Every node output becomes an activation before any op is added, so
	// nodes may appear in any order and subgraphs can see every name.
	producer := map[string]int{}
	for i, n := range nodes {
		for _, o := range n.GetOutput() {
			if o == "" {
				continue
			}
			if j, dup := producer[o]; dup {
				return nil, fmt.Errorf("tensor %q is produced twice (by nodes %s and %s)", o, nodeLabel(nodes[j], j), nodeLabel(n, i))
			}
			if _, dup := g.TensorByName(o); dup {
				return nil, fmt.Errorf("node %s writes %q, which is already a graph input or initializer", nodeLabel(n, i), o)
			}
			producer[o] = i
			if _, err := g.AddTensor(graph.Tensor{Name: o, Kind: graph.Activation}); err != nil {
				return nil, err
			}
		}
	}

	outerSet := map[string]bool{}
	resolve := func(name string) (graph.TensorID, bool) {
		if id, ok := g.TensorByName(name); ok {
			return id, true
		}
		if outer != nil && outer(name) {
			// A name from an enclosing scope enters this graph as an input.
			id, err := g.AddTensor(graph.Tensor{Name: name, Kind: graph.Input})
			if err != nil {
				return 0, false
			}
			outerSet[name] = true
			return id, true
		}
		return 0, false
	}
	visible := func(name string) bool {
		if _, ok := g.TensorByName(name); ok {
			return true
		}
		return outer != nil && outer(name)
	}

	names := uniqueNames(nodes)
	sg.nodes = make([]nodeRef, len(nodes))
	for i, n := range nodes {
		ref := nodeRef{proto: n, ins: n.GetInput(), outs: n.GetOutput()}
		attrs, subs, err := c.attrs(n, visible)
		if err != nil {
			return nil, fmt.Errorf("node %s: %v", nodeLabel(n, i), err)
		}
		ref.attrs, ref.sub = attrs, subs
		op := graph.Op{Name: names[i], Type: n.GetOpType(), Domain: n.GetDomain(), Attrs: attrs}
		for _, in := range n.GetInput() {
			if in == "" {
				continue // an omitted optional input
			}
			id, ok := resolve(in)
			if !ok {
				return nil, fmt.Errorf("node %s reads %q, which no node, graph input or initializer produces", nodeLabel(n, i), in)
			}
			op.Inputs = append(op.Inputs, id)
		}
		// Names a nested graph reads from this or enclosing scopes are
		// implicit inputs: the op depends on their producers.
		var implicit []string
		for _, key := range sortedKeys(subs) {
			implicit = append(implicit, subs[key].outer...)
		}
		slices.Sort(implicit)
		for _, in := range slices.Compact(implicit) {
			id, ok := resolve(in)
			if !ok {
				return nil, fmt.Errorf("node %s: a subgraph reads %q, which is not defined", nodeLabel(n, i), in)
			}
			if !slices.Contains(op.Inputs, id) {
				op.Inputs = append(op.Inputs, id)
			}
		}
		for _, o := range n.GetOutput() {
			if o != "" {
				id, _ := g.TensorByName(o)
				op.Outputs = append(op.Outputs, id)
			}
		}
		if _, err := g.AddOp(op); err != nil {
			return nil, err
		}
		sg.nodes[i] = ref
	}
	for _, o := range gp.GetOutput() {
		id, ok := resolve(o.GetName())
		if !ok {
			return nil, fmt.Errorf("graph output %q is never produced", o.GetName())
		}
		g.Outputs = append(g.Outputs, id)
		sg.outputs = append(sg.outputs, o.GetName())
	}
	for name := range outerSet {
		sg.outer = append(sg.outer, name)
	}
	slices.Sort(sg.outer)
	order, err := g.TopoOrder(g.BuildAdjacency())
	if err != nil {
		return nil, err
	}
	sg.order = order
	return sg, nil
}

// nodeLabel names a node in messages: its name, or its type and index.
func nodeLabel(n *onnxpb.NodeProto, i int) string {
	if n.GetName() != "" {
		return strconv.Quote(n.GetName()) + " (" + n.GetOpType() + ")"
	}
	return fmt.Sprintf("#%d (%s)", i, n.GetOpType())
}

// uniqueNames gives every node a unique, stable name: its own when it has
// one and it is free, else "<OpType>_<index>", suffixed until unique.
func uniqueNames(nodes []*onnxpb.NodeProto) []string {
	taken := map[string]bool{}
	out := make([]string, len(nodes))
	for i, n := range nodes {
		if nm := n.GetName(); nm != "" && !taken[nm] {
			out[i] = nm
			taken[nm] = true
		}
	}
	for i, n := range nodes {
		if out[i] != "" {
			continue
		}
		base := n.GetName()
		if base == "" {
			base = n.GetOpType() + "_" + strconv.Itoa(i)
		}
		nm := base
		for k := 2; taken[nm]; k++ {
			nm = base + "_" + strconv.Itoa(k)
		}
		out[i] = nm
		taken[nm] = true
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// writeTensor copies an inferred value onto its graph tensor.
func writeTensor(t *graph.Tensor, v *value) {
	if v == nil {
		return
	}
	if v.dtype != graph.Undefined {
		t.DType = v.dtype
	}
	if v.known {
		t.Shape = shapes.Clone(v.shape)
		t.ShapeKnown = true
	}
}
