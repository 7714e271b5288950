package onnx

import (
	"fmt"
	"github.com/opplace/opplace/internal/importopt"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
	"github.com/opplace/opplace/onnx/onnxpb"
)

// scope maps tensor names to what inference knows of them; a nested
// graph's scope falls back to its enclosing one.
type scope struct {
	parent *scope
	vals   map[string]*value
}

func (s *scope) get(name string) *value {
	for ; s != nil; s = s.parent {
		if v, ok := s.vals[name]; ok {
			return v
		}
	}
	return nil
}

// infer runs shape inference over sg in topological order, writing the
// results onto its tensors and the work onto its ops. The scope must hold
// the graph's formal inputs; initializers are added here.
func (c *converter) infer(sg *subgraph, sc *scope) error {
	g := sg.g
	for _, in := range sg.proto.GetInitializer() {
		v, err := tensorValue(in)
		if err != nil {
			return fmt.Errorf("initializer %q: %v", in.GetName(), err)
		}
		sc.vals[in.GetName()] = v
	}
	for _, sp := range sg.proto.GetSparseInitializer() {
		sc.vals[sp.GetValues().GetName()] = &value{dtype: graph.DType(sp.GetValues().GetDataType()),
			shape: shapes.Clone(sp.GetDims()), known: true}
	}
	// Outer names resolve through the parent scope; copy them onto the
	// nested graph's input tensors.
	for _, name := range sg.outer {
		if id, ok := g.TensorByName(name); ok {
			writeTensor(g.Tensor(id), sc.get(name))
		}
	}
	for _, id := range sg.order {
		ref := &sg.nodes[id]
		op := g.Op(id)
		n := &node{
			name:   op.Name,
			op:     op.Type,
			domain: normDomain(op.Domain),
			attrs:  ref.attrs,
			in:     make([]*value, len(ref.ins)),
			out:    make([]*value, len(ref.outs)),
			sub:    ref.sub,
			c:      c,
			scope:  sc,
		}
		n.opset = c.opsets[n.domain]
		if n.opset == 0 {
			n.opset = 1
		}
		for i, name := range ref.ins {
			if name != "" {
				n.in[i] = sc.get(name)
				if n.in[i] == nil {
					n.in[i] = &value{}
				}
			}
		}
		n.declared = make([]*value, len(ref.outs))
		for i, name := range ref.outs {
			if tp, ok := sg.declared[name]; ok && name != "" {
				n.declared[i] = c.declaredValue(tp)
			}
		}
		if err := c.inferNode(n); err != nil {
			hint := ""
			if len(ref.ins) > 1 {
				hint = c.bakedBatchHint(n, ref.ins[1])
			}
			if r := c.reshaped; r != nil && hint == "" {
				hint = fmt.Sprintf("; %s sets axis %d of input %q to %d, where the model declares %d",
					c.opts.Knobs.Shape(r.input, strings.ReplaceAll(graph.FormatShape(r.givenShape, true), "x", ",")), r.axis, r.input, r.now, r.file)
			}
			return fmt.Errorf("node %q (%s): %v%s", op.Name, op.Type, err, hint)
		}
		op.Work = n.work
		for i, name := range ref.outs {
			if name == "" {
				continue
			}
			v := n.out[i]
			sc.vals[name] = v
			tid, _ := g.TensorByName(name)
			writeTensor(g.Tensor(tid), v)
		}
		if ref.proto.GetOpType() == "Constant" && len(n.out) > 0 {
			if v := n.out[0]; v != nil && v.hasInts() {
				a := op.Attrs["value"]
				if a.Kind == graph.AttrTensor {
					a.TensorInts = shapes.Clone(v.ints)
					op.Attrs["value"] = a
				}
			}
		}
	}
	return nil
}

// inferNode dispatches to the op's inference, falling back to declared
// shapes and an estimated cost for unknown ops and unknown inputs.
func (c *converter) inferNode(n *node) error {
	f, ok := registry[opKey{n.domain, n.op}]
	if !ok {
		dom := n.domain
		if dom == "" {
			dom = "ai.onnx"
		}
		c.warn("op:"+dom+":"+n.op, fmt.Sprintf("unknown operator %s (domain %s): output shapes taken from the model where declared, cost estimated", n.op, dom))
		n.fallback(false)
		return nil
	}
	for _, v := range n.in {
		if v != nil && !v.known {
			n.fallback(true)
			return nil
		}
	}
	if err := f(n); err != nil {
		if err == errNeedValue {
			n.fallback(true)
			return nil
		}
		return err
	}
	for i, v := range n.out {
		if v == nil {
			if n.declared[i] != nil {
				n.out[i] = n.declared[i]
			} else {
				n.out[i] = &value{dtype: n.firstDType()}
			}
		}
	}
	return nil
}

// errNeedValue reports that an output shape depends on tensor contents
// that partial evaluation could not compute.
var errNeedValue = fmt.Errorf("output shape depends on unknown values")

// fallback fills the outputs from declared shapes (or leaves them
// unknown) and estimates the work.
func (n *node) fallback(record bool) {
	unknown := false
	for i := range n.out {
		if d := n.declared[i]; d != nil {
			n.out[i] = d
		} else {
			n.out[i] = &value{dtype: n.firstDType()}
			unknown = true
		}
	}
	n.estimate()
	if record && unknown {
		n.c.unshaped[n.op] = append(n.c.unshaped[n.op], n.name)
	}
}

func (n *node) firstDType() graph.DType {
	for _, v := range n.in {
		if v != nil && v.dtype != graph.Undefined {
			return v.dtype
		}
	}
	return graph.Undefined
}

// declaredValue reads a declared type; the shape counts only when every
// dimension is fixed or bound by Options.Dims.
func (c *converter) declaredValue(tp *onnxpb.TypeProto) *value {
	tt := tp.GetTensorType()
	if tt == nil || tt.GetShape() == nil {
		return nil
	}
	v := &value{dtype: graph.DType(tt.GetElemType()), known: true, shape: []int64{}}
	for _, d := range tt.GetShape().GetDim() {
		switch x := d.GetValue().(type) {
		case *onnxpb.TensorShapeProto_Dimension_DimValue:
			v.shape = append(v.shape, x.DimValue)
		case *onnxpb.TensorShapeProto_Dimension_DimParam:
			b, ok := c.opts.Dims[x.DimParam]
			if !ok {
				return nil
			}
			v.shape = append(v.shape, b)
		default:
			return nil
		}
	}
	if checkShape(v.shape) != nil {
		return nil
	}
	return v
}

// inputValue resolves a main-graph input's shape, binding dynamic
// dimensions from the options; an unbound one is an error that names the
// flag fixing it.
func (c *converter) inputValue(vi *onnxpb.ValueInfoProto) (*value, error) {
	name := vi.GetName()
	tt := vi.GetType().GetTensorType()
	if tt == nil {
		return nil, fmt.Errorf("input %q is not a tensor (sequence, map and optional inputs are not supported)", name)
	}
	v := &value{dtype: graph.DType(tt.GetElemType()), known: true, shape: []int64{}}
	if s, ok := c.opts.Shapes[name]; ok {
		if decl := tt.GetShape(); decl != nil && len(decl.GetDim()) != len(s) {
			return nil, importopt.ShapeRankError(c.opts.Knobs, name, s, declaredDims(decl))
		}
		for axis, d := range tt.GetShape().GetDim() {
			if x, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue); ok && axis > 0 && x.DimValue != s[axis] && c.depth == 0 && c.reshaped == nil {
				c.reshaped = &shapeOverride{input: name, axis: axis, file: x.DimValue, now: s[axis], givenShape: s}
			}
		}
		v.shape = shapes.Clone(s)
		for _, d := range tt.GetShape().GetDim() {
			if p := d.GetDimParam(); p != "" {
				c.dimsSeen[p] = true
			}
		}
		return v, nil
	}
	if tt.GetShape() == nil {
		return nil, fmt.Errorf("input %q has no declared shape; set it with %s", name, c.opts.Knobs.Shape(name, "D0,D1,..."))
	}
	for axis, d := range tt.GetShape().GetDim() {
		switch x := d.GetValue().(type) {
		case *onnxpb.TensorShapeProto_Dimension_DimValue:
			if x.DimValue < 0 {
				return nil, fmt.Errorf("input %q axis %d has negative size %d", name, axis, x.DimValue)
			}
			if x.DimValue == 0 {
				c.warn("empty:"+name, fmt.Sprintf("input %q axis %d has size 0 in the model: the tensor is empty, and so is the work of every op that depends on it", name, axis))
			}
			v.shape = append(v.shape, x.DimValue)
			continue
		case *onnxpb.TensorShapeProto_Dimension_DimParam:
			c.dimsSeen[x.DimParam] = true
		}
		b, err := unfixedDim(c.opts, c.opts.Knobs, name, axis, d)
		if err != nil {
			return nil, err
		}
		v.shape = append(v.shape, b)
	}
	if err := checkShape(v.shape); err != nil {
		return nil, fmt.Errorf("input %q: %v", name, err)
	}
	return v, nil
}

// unfixedDim is the size o gives axis of graph input name, whose
// dimension d has no fixed value: its symbolic name's binding in o.Dims,
// else o.Batch on axis 0. Unbound, the error says which flag binds it.
func unfixedDim(o Options, knobs Knobs, name string, axis int, d *onnxpb.TensorShapeProto_Dimension) (int64, error) {
	hint := ""
	if axis == 0 {
		hint = " or " + knobs.Batch("N")
	}
	if x, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimParam); ok {
		if b, ok := o.Dims[x.DimParam]; ok {
			return b, nil
		}
		if axis == 0 && o.Batch > 0 {
			return o.Batch, nil
		}
		return 0, fmt.Errorf("input %q axis %d is the symbolic dimension %q; bind it with %s%s",
			name, axis, x.DimParam, knobs.Dim(x.DimParam, "N"), hint)
	}
	if axis == 0 && o.Batch > 0 {
		return o.Batch, nil
	}
	return 0, fmt.Errorf("input %q axis %d has no fixed size; set the whole shape with %s%s",
		name, axis, knobs.Shape(name, "D0,D1,..."), hint)
}

// noteExportBatch remembers the first main-graph input whose fixed
// leading size in the file the options changed.
func (c *converter) noteExportBatch(vi *onnxpb.ValueInfoProto, v *value) {
	if c.depth > 0 || c.rebatched != nil || len(v.shape) == 0 {
		return
	}
	var file []int64
	for _, d := range vi.GetType().GetTensorType().GetShape().GetDim() {
		x, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue)
		if !ok {
			return
		}
		file = append(file, x.DimValue)
	}
	if len(file) == 0 || file[0] == v.shape[0] {
		return
	}
	c.rebatched = &exportBatch{input: vi.GetName(), file: file[0], now: v.shape[0], fileShape: file}
}

// bakedBatchHint explains a failed Reshape whose constant target starts
// with the batch the model was exported at while the plan asks for
// another: exports that reshape with literal sizes (ViT, Swin and
// ShuffleNet's channel shuffle among torchvision's models) run only at
// their export batch. It returns "" when that is not the case.
func (c *converter) bakedBatchHint(n *node, targetName string) string {
	rb := c.rebatched
	if rb == nil || n.op != "Reshape" || len(n.in) < 2 || n.in[1] == nil {
		return ""
	}
	target, ok := n.in[1].intsOf()
	x := n.in[0]
	if !ok || len(target) == 0 || target[0] != rb.file || x == nil || !x.known || x.rank() == 0 || x.shape[0] != rb.now {
		return ""
	}
	return fmt.Sprintf("; its target shape %v (tensor %q) is fixed in the file and holds the batch %d the model was exported at "+
		"(input %q is %s in the file), so this export runs only at batch %d: plan it with %s, "+
		"or export it again with the batch left dynamic (reshape to -1 or x.shape[0], and dynamic_axes in torch.onnx.export)",
		target, targetName, rb.file, rb.input, graph.FormatShape(rb.fileShape, true), rb.file,
		c.opts.Knobs.Shape(rb.input, strings.ReplaceAll(graph.FormatShape(rb.fileShape, true), "x", ",")))
}
