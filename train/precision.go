package train

import (
	"fmt"
	"slices"
	"strings"

	"github.com/opplace/opplace/graph"
)

// Precision is the numeric precision a step is planned in.
type Precision string

// The precisions opplace plans. The zero value plans the model in the
// element types its file declares.
const (
	// PrecisionDefault keeps the model file's element types.
	PrecisionDefault Precision = ""
	// FP32 stores and computes every floating-point tensor in float32,
	// matmuls on CUDA cores (PyTorch's default since 1.12: TF32 off).
	FP32 Precision = "fp32"
	// TF32 stores float32 and runs matmuls and convolutions on TF32
	// tensor cores (torch.backends.cuda.matmul.allow_tf32 = True).
	TF32 Precision = "tf32"
	// AMPBF16 and AMPFP16 are torch.autocast with bfloat16 or float16:
	// see Autocast.
	AMPBF16 Precision = "amp-bf16"
	AMPFP16 Precision = "amp-fp16"
)

// Precisions lists the precisions in the order messages give them.
var Precisions = []Precision{FP32, TF32, AMPBF16, AMPFP16}

// ParsePrecision reads a precision name; "" is PrecisionDefault.
func ParsePrecision(s string) (Precision, error) {
	p := Precision(strings.ToLower(strings.TrimSpace(s)))
	if p == PrecisionDefault || slices.Contains(Precisions, p) {
		return p, nil
	}
	names := make([]string, len(Precisions))
	for i, q := range Precisions {
		names[i] = string(q)
	}
	return "", fmt.Errorf("unknown precision %q: use %s", s, strings.Join(names, ", "))
}

// Half is the half type autocast computes in, or graph.Undefined when p
// is not mixed precision.
func (p Precision) Half() graph.DType {
	switch p {
	case AMPBF16:
		return graph.BFloat16
	case AMPFP16:
		return graph.Float16
	}
	return graph.Undefined
}

// AutocastDomain is the domain of the Cast ops Autocast inserts; their
// gradient ops read no saved activations (a cast's backward is a cast of
// the incoming gradient).
const AutocastDomain = "opplace.autocast"

// PrecisionStats counts what ApplyPrecision changed.
type PrecisionStats struct {
	// HalfOps and Float32Ops count the ops autocast casts to the half type
	// and to float32; Casts the Cast ops inserted, CastBytes their
	// traffic (bytes read and written) per forward pass.
	HalfOps, Float32Ops, Casts int
	CastBytes                  int64
	// HalfWeightBytes is the half-precision working copy of the weights
	// (the casts of parameters).
	HalfWeightBytes int64
	// Converted counts the tensors a float32 precision widened from half.
	Converted int
}

// ApplyPrecision returns fwd as precision p runs it; fwd is not modified
// (the result is fwd itself when p changes nothing).
//
// fp32 and tf32 store every half-precision floating-point tensor as
// float32 (tf32's faster matmuls are the cost model's business:
// cost.Roofline.TF32). The default keeps the file's types.
//
// amp-bf16 and amp-fp16 rewrite the forward graph as torch.autocast runs
// an fp32 model (see graph.Autocast for the op lists): an AutocastHalf op
// reads its float32 inputs through Cast ops to the half type and writes
// half outputs; an AutocastFloat32 op reads its half inputs through Casts
// to float32 and writes float32; any other op writes the widest
// floating-point type among its activation and graph inputs (parameters
// and constants do not widen it: the bias a linear layer's export split
// off into an Add stays in the layer's half type, as in addmm). Each
// tensor is cast once per target type and the cast shared by its
// readers: a parameter's cast is the half-precision working copy of the
// weight (autocast's weight cache), alive from the forward pass until
// the backward pass has read it. Parameters stay float32 (the master
// weights), so their gradients and the optimizer state stay float32 too.
// Cast ops are real ops: placed, costed by the roofline as memory traffic
// and simulated like any other, with gradients that cast back.
func ApplyPrecision(fwd *graph.Graph, p Precision) (*graph.Graph, PrecisionStats, error) {
	switch p {
	case PrecisionDefault:
		return fwd, PrecisionStats{}, nil
	case FP32, TF32:
		return widen(fwd)
	case AMPBF16, AMPFP16:
		return autocast(fwd, p.Half())
	}
	_, err := ParsePrecision(string(p))
	return nil, PrecisionStats{}, err
}

// widen stores half-precision floating-point tensors as float32.
func widen(fwd *graph.Graph) (*graph.Graph, PrecisionStats, error) {
	var st PrecisionStats
	for i := range fwd.Tensors {
		if fwd.Tensors[i].DType.IsHalf() {
			st.Converted++
		}
	}
	if st.Converted == 0 {
		return fwd, st, nil
	}
	g := graph.New(fwd.Name, len(fwd.Ops), len(fwd.Tensors))
	for i := range fwd.Tensors {
		t := fwd.Tensors[i]
		t.Shape = slices.Clone(t.Shape)
		if t.DType.IsHalf() {
			t.DType = graph.Float32
		}
		if _, err := g.AddTensor(t); err != nil {
			return nil, st, err
		}
	}
	for i := range fwd.Ops {
		if _, err := g.AddOp(fwd.Ops[i]); err != nil {
			return nil, st, err
		}
	}
	g.Inputs = slices.Clone(fwd.Inputs)
	g.Outputs = slices.Clone(fwd.Outputs)
	return g, st, nil
}

type castKey struct {
	t  graph.TensorID
	to graph.DType
}

func autocast(fwd *graph.Graph, half graph.DType) (*graph.Graph, PrecisionStats, error) {
	var st PrecisionStats
	order, err := fwd.TopoOrder(fwd.BuildAdjacency())
	if err != nil {
		return nil, st, err
	}
	g := graph.New(fwd.Name, len(fwd.Ops)*3/2, len(fwd.Tensors)*3/2)
	for i := range fwd.Tensors {
		t := fwd.Tensors[i]
		t.Shape = slices.Clone(t.Shape)
		if _, err := g.AddTensor(t); err != nil {
			return nil, st, err
		}
	}
	g.Inputs = slices.Clone(fwd.Inputs)
	g.Outputs = slices.Clone(fwd.Outputs)
	// amp changes only float32 and half tensors; float64 and the integer
	// types are not eligible.
	eligible := func(d graph.DType) bool { return d == graph.Float32 || d.IsHalf() }
	casts := map[castKey]graph.TensorID{}
	opName := func(name string) string {
		for i := 1; ; i++ {
			n := name
			if i > 1 {
				n = fmt.Sprintf("%s_%d", name, i)
			}
			_, inG := g.OpByName(n)
			_, inFwd := fwd.OpByName(n)
			if !inG && !inFwd {
				return n
			}
		}
	}
	// castTo casts in to type to for reader, whose module the cast is
	// named in (castName): the module of the op named module.
	castTo := func(in graph.TensorID, to graph.DType, reader *graph.Op, module string) (graph.TensorID, error) {
		k := castKey{in, to}
		if c, ok := casts[k]; ok {
			return c, nil
		}
		src := g.Tensors[in]
		name := src.Name + "/autocast_" + to.String()
		out, err := g.AddTensor(graph.Tensor{Name: uniqueTensorName(g, name), DType: to,
			Shape: slices.Clone(src.Shape), ShapeKnown: src.ShapeKnown, Kind: graph.Activation})
		if err != nil {
			return 0, err
		}
		cast := graph.Op{Name: opName(castName(src.Name, to, module)), Type: "Cast", Domain: AutocastDomain,
			Inputs: []graph.TensorID{in}, Outputs: []graph.TensorID{out},
			Colocate: reader.Colocate, Device: reader.Device, Phase: graph.Forward}
		if _, err := g.AddOp(cast); err != nil {
			return 0, err
		}
		casts[k] = out
		st.Casts++
		st.CastBytes += src.Bytes() + g.Tensors[out].Bytes()
		if src.Kind == graph.Parameter {
			st.HalfWeightBytes += g.Tensors[out].Bytes()
		}
		return out, nil
	}
	halfWeights := weightViews(fwd, order)
	pos := make([]int, len(fwd.Ops)) // each op's place in order
	for i, id := range order {
		pos[id] = i
	}
	for _, id := range order {
		op := fwd.Ops[id]
		op.Inputs = slices.Clone(op.Inputs)
		var want graph.DType
		cls := graph.Autocast(op.Type)
		switch {
		case cls == graph.AutocastHalf:
			want = half
			st.HalfOps++
		case cls == graph.AutocastFloat32:
			want = graph.Float32
			st.Float32Ops++
		case halfWeights[id]:
			// A view of a weight only half ops read (the Transpose of a
			// linear layer's weight): autocast casts the weight itself,
			// and the view is of the half copy.
			want, cls = half, graph.AutocastHalf
		case op.Type == "Cast":
			// An explicit dtype is not eligible.
		default:
			for _, in := range op.Inputs {
				t := &g.Tensors[in]
				// Type promotion: graph inputs and activations decide, but
				// not scalars (a zero-dimensional tensor does not widen a
				// dimensioned one in PyTorch; one-element tensors are
				// taken as scalars here).
				if (t.Kind == graph.Activation || t.Kind == graph.Input) && eligible(t.DType) && t.ShapeKnown && t.Elements() > 1 &&
					(want == graph.Undefined || t.DType == graph.Float32) {
					want = t.DType
				}
			}
		}
		if want == graph.Undefined {
			if _, err := g.AddOp(op); err != nil {
				return nil, st, err
			}
			continue
		}
		if cls != graph.AutocastPromote {
			// Keep the op and the casts of its inputs on one device, as
			// the training step keeps a layer and its gradient.
			if op.Colocate == "" {
				op.Colocate = graph.SoftColocatePrefix + op.Name
			}
			for i, in := range op.Inputs {
				if d := g.Tensors[in].DType; eligible(d) && d != want {
					c, err := castTo(in, want, &op, castModule(fwd, halfWeights, pos, id))
					if err != nil {
						return nil, st, err
					}
					op.Inputs[i] = c
				}
			}
		}
		for _, out := range op.Outputs {
			if t := &g.Tensors[out]; eligible(t.DType) {
				t.DType = want
			}
		}
		if _, err := g.AddOp(op); err != nil {
			return nil, st, err
		}
	}
	return g, st, nil
}

// castName names autocast's cast of tensor src to type to, read first
// by op reader: in reader's module, so module paths, which come from op
// names, stay those of the forward ops ("/blocks/blocks.5/fc2/" for the
// cast of "blocks.5.fc2.weight" that its MatMul reads). The tensor's
// name, its last path component, follows: "/blocks/blocks.5/fc2/" +
// "blocks.5.fc2.weight_autocast_bfloat16". Named after the tensor
// alone, a weight's cast would read as a module of its own
// ("blocks.5.fc2.weight/") and an activation's as a sub-module of the
// op that wrote it.
func castName(src string, to graph.DType, reader string) string {
	module := ""
	if i := strings.LastIndexByte(reader, '/'); i > 0 {
		module = reader[:i+1]
	}
	return module + src[strings.LastIndexByte(src, '/')+1:] + "_autocast_" + to.String()
}

// castModule is the name of the op whose module the casts op id reads
// are named in: id's own, or for a view of a weight (halfWeights: the
// Identity torch.onnx gives a shared weight, at the root, or a linear
// layer's Transpose) the op that computes with the view, found through
// its earliest readers (pos: each op's place in topological order).
func castModule(g *graph.Graph, halfWeights []bool, pos []int, id graph.OpID) string {
	for halfWeights[id] {
		var next graph.OpID = graph.NoOp
		for _, out := range g.Ops[id].Outputs {
			for _, c := range g.Tensors[out].Consumers {
				if next == graph.NoOp || pos[c] < pos[next] {
					next = c
				}
			}
		}
		if next == graph.NoOp {
			break
		}
		id = next
	}
	return g.Ops[id].Name
}

// viewOps relabel or reorder a tensor; PyTorch runs them on weights as
// views of the (cast) weight.
var viewOps = map[string]bool{"Transpose": true, "Identity": true, "Reshape": true, "Squeeze": true, "Unsqueeze": true, "Flatten": true}

// weightViews marks the view ops of a weight (their one floating-point
// input a parameter or another such view) whose output only half ops,
// or further such views, read: autocast casts the weight before them.
func weightViews(g *graph.Graph, order []graph.OpID) []bool {
	view := make([]bool, len(g.Ops))
	for _, id := range order {
		op := &g.Ops[id]
		if !viewOps[op.Type] || len(op.Outputs) != 1 {
			continue
		}
		float := 0
		ok := true
		for _, in := range op.Inputs {
			t := &g.Tensors[in]
			if !t.DType.IsFloat() {
				continue
			}
			float++
			ok = ok && (t.Kind == graph.Parameter || t.Producer != graph.NoOp && view[t.Producer])
		}
		view[id] = ok && float == 1
	}
	// Keep only the views every reader of which is a half op or a kept
	// view, deciding readers first (reverse order).
	for i := len(order) - 1; i >= 0; i-- {
		id := order[i]
		if !view[id] {
			continue
		}
		out := &g.Tensors[g.Ops[id].Outputs[0]]
		view[id] = len(out.Consumers) > 0 && !slices.Contains(g.Outputs, g.Ops[id].Outputs[0])
		for _, c := range out.Consumers {
			if graph.Autocast(g.Ops[c].Type) != graph.AutocastHalf && !view[c] {
				view[id] = false
			}
		}
	}
	return view
}
