package profile

import (
	"errors"
	"fmt"
	"slices"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/opplace/opplace/graph"
)

// errUnsupported marks an op gorgonia has no kernel for here.
type errUnsupported struct{ reason string }

func (e errUnsupported) Error() string { return e.reason }

func unsupported(format string, args ...any) error {
	return errUnsupported{fmt.Sprintf(format, args...)}
}

// kernel is one op built as a gorgonia expression graph, ready to run.
type kernel struct {
	g *G.ExprGraph
	m G.VM
}

func (k *kernel) run() error {
	err := k.m.RunAll()
	k.m.Reset()
	return err
}

func (k *kernel) close() { k.m.Close() }

// unaryKernels maps ONNX elementwise types gorgonia implements.
var unaryKernels = map[string]func(*G.Node) (*G.Node, error){
	"Relu": G.Rectify, "Sigmoid": G.Sigmoid, "Tanh": G.Tanh, "Exp": G.Exp, "Log": G.Log,
	"Sqrt": G.Sqrt, "Neg": G.Neg, "Abs": G.Abs,
}

var binaryKernels = map[string]func(a, b *G.Node) (*G.Node, error){
	"Add": G.Add, "Sub": G.Sub, "Mul": G.HadamardProd, "Div": G.HadamardDiv, "Pow": G.Pow,
}

// buildKernel expresses op in gorgonia with float32 inputs of its shapes.
// What it times, per type:
//
//   - MatMul: a 2-D GEMM of the flattened leading dimensions when B is a
//     matrix, a batched GEMM when both sides share batch dimensions.
//   - Gemm: the GEMM A·B (transposes folded into the layout; the C bias,
//     one pass over the output, is not added).
//   - Conv: 2-D, group 1, symmetric pads: gorgonia's im2col + GEMM (no
//     bias).
//   - MaxPool, AveragePool (2-D, symmetric pads), GlobalAveragePool.
//   - Relu, Sigmoid, Tanh, Exp, Log, Sqrt, Neg, Abs; Add, Sub, Mul, Div,
//     Pow with both operands at the output shape (gorgonia materialises
//     broadcasts, which runtimes do not).
//   - Softmax on its axis, Transpose by its permutation, Concat.
//
// Everything else (and float types other than float32, integer ops,
// unknown shapes) is unsupported and keeps the model's estimate.
func buildKernel(g *graph.Graph, id graph.OpID) (k *kernel, err error) {
	op := &g.Ops[id]
	defer func() {
		if r := recover(); r != nil {
			k, err = nil, unsupported("gorgonia panicked: %v", r)
		}
	}()
	for _, t := range append(slices.Clone(op.Inputs), op.Outputs...) {
		tn := &g.Tensors[t]
		if !tn.ShapeKnown {
			return nil, unsupported("unknown shape")
		}
	}
	if len(op.Inputs) == 0 || len(op.Outputs) == 0 {
		return nil, unsupported("no inputs or outputs")
	}
	if dt := g.Tensors[op.Inputs[0]].DType; dt != graph.Float32 {
		return nil, unsupported("element type %s", dt)
	}
	eg := G.NewGraph()
	in := func(i int) *G.Node { return input(eg, shapeOf(g, op.Inputs[i]), fmt.Sprintf("in%d", i)) }
	outShape := shapeOf(g, op.Outputs[0])
	var out *G.Node
	switch op.Type {
	case "MatMul", "Gemm":
		out, err = matmul(eg, g, op)
	case "Conv":
		out, err = conv(g, op, in(0), in(1))
	case "MaxPool", "AveragePool":
		x := in(0)
		if x.Shape().Dims() != 4 {
			return nil, unsupported("%d-D pooling", x.Shape().Dims()-2)
		}
		kernelShape, pads, strides, perr := window(op, 2)
		if perr != nil {
			return nil, perr
		}
		if op.Type == "MaxPool" {
			out, err = G.MaxPool2D(x, kernelShape, pads, strides)
		} else {
			out, err = G.AveragePool2D(x, kernelShape, pads, strides)
		}
	case "GlobalAveragePool":
		x := in(0)
		if x.Shape().Dims() != 4 {
			return nil, unsupported("%d-D pooling", x.Shape().Dims()-2)
		}
		out, err = G.GlobalAveragePool2D(x)
	case "Softmax":
		x := in(0)
		axis := int(op.Attrs.Int("axis", -1))
		if axis < 0 {
			axis += x.Shape().Dims()
		}
		out, err = G.SoftMax(x, axis)
	case "Transpose":
		x := in(0)
		perm := op.Attrs.Ints("perm")
		axes := make([]int, len(perm))
		for i, p := range perm {
			axes[i] = int(p)
		}
		if len(axes) == 0 {
			for i := x.Shape().Dims() - 1; i >= 0; i-- {
				axes = append(axes, i)
			}
		}
		out, err = G.Transpose(x, axes...)
	case "Concat":
		nodes := make([]*G.Node, len(op.Inputs))
		for i := range op.Inputs {
			nodes[i] = in(i)
		}
		axis := int(op.Attrs.Int("axis", 0))
		if axis < 0 {
			axis += len(outShape)
		}
		out, err = G.Concat(axis, nodes...)
	default:
		if f, ok := unaryKernels[op.Type]; ok && len(op.Inputs) == 1 {
			out, err = f(input(eg, outShape, "x"))
			break
		}
		if f, ok := binaryKernels[op.Type]; ok && len(op.Inputs) == 2 {
			out, err = f(input(eg, outShape, "a"), input(eg, outShape, "b"))
			break
		}
		return nil, unsupported("gorgonia has no %s kernel here", op.Type)
	}
	if err != nil {
		var u errUnsupported
		if errors.As(err, &u) {
			return nil, err
		}
		return nil, unsupported("gorgonia: %v", err)
	}
	_ = out
	return &kernel{g: eg, m: G.NewTapeMachine(eg)}, nil
}

// shapeOf is a tensor's shape as gorgonia wants it; a scalar is [1].
func shapeOf(g *graph.Graph, t graph.TensorID) tensor.Shape {
	s := make(tensor.Shape, 0, len(g.Tensors[t].Shape))
	for _, d := range g.Tensors[t].Shape {
		s = append(s, int(d))
	}
	if len(s) == 0 {
		s = tensor.Shape{1}
	}
	return s
}

// input makes an input node holding values in [0.5, 1.5), so no kernel
// meets denormals or zeros it could skip.
func input(eg *G.ExprGraph, shape tensor.Shape, name string) *G.Node {
	n := shape.TotalSize()
	data := make([]float32, n)
	for i := range data {
		data[i] = 0.5 + float32(i%97)/97
	}
	t := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))
	return G.NewTensor(eg, tensor.Float32, len(shape), G.WithShape(shape...), G.WithName(name), G.WithValue(t))
}

func matmul(eg *G.ExprGraph, g *graph.Graph, op *graph.Op) (*G.Node, error) {
	if len(op.Inputs) < 2 {
		return nil, unsupported("MatMul with %d inputs", len(op.Inputs))
	}
	a, b := shapeOf(g, op.Inputs[0]), shapeOf(g, op.Inputs[1])
	if op.Type == "Gemm" {
		if len(a) != 2 || len(b) != 2 {
			return nil, unsupported("Gemm of ranks %d and %d", len(a), len(b))
		}
		m, k := a[0], a[1]
		if op.Attrs.Int("transA", 0) != 0 {
			m, k = k, m
		}
		n := b[1]
		if op.Attrs.Int("transB", 0) != 0 {
			n = b[0]
		}
		return G.Mul(input(eg, tensor.Shape{m, k}, "a"), input(eg, tensor.Shape{k, n}, "b"))
	}
	switch {
	case len(a) >= 2 && len(b) == 2:
		rows := a.TotalSize() / a[len(a)-1]
		return G.Mul(input(eg, tensor.Shape{rows, a[len(a)-1]}, "a"), input(eg, b, "b"))
	case len(a) >= 3 && len(a) == len(b) && slices.Equal(a[:len(a)-2], b[:len(b)-2]):
		batch := a.TotalSize() / (a[len(a)-2] * a[len(a)-1])
		x := input(eg, tensor.Shape{batch, a[len(a)-2], a[len(a)-1]}, "a")
		y := input(eg, tensor.Shape{batch, b[len(b)-2], b[len(b)-1]}, "b")
		return G.BatchedMatMul(x, y)
	}
	return nil, unsupported("MatMul of shapes %v and %v", a, b)
}

func conv(g *graph.Graph, op *graph.Op, x, w *G.Node) (*G.Node, error) {
	if op.Attrs.Int("group", 1) != 1 {
		return nil, unsupported("grouped convolution (group %d)", op.Attrs.Int("group", 1))
	}
	if x.Shape().Dims() != 4 || w.Shape().Dims() != 4 {
		return nil, unsupported("%d-D convolution", x.Shape().Dims()-2)
	}
	ws := w.Shape()
	if ks := op.Attrs.Ints("kernel_shape"); ks == nil {
		op2 := *op
		op2.Attrs = graph.Attrs{}
		for k, v := range op.Attrs {
			op2.Attrs[k] = v
		}
		op2.Attrs["kernel_shape"] = graph.Attr{Kind: graph.AttrInts, Ints: []int64{int64(ws[2]), int64(ws[3])}}
		op = &op2
	}
	kernelShape, pads, strides, err := window(op, 2)
	if err != nil {
		return nil, err
	}
	dil := []int{1, 1}
	if d := op.Attrs.Ints("dilations"); len(d) == 2 {
		dil = []int{int(d[0]), int(d[1])}
	}
	return G.Conv2d(x, w, kernelShape, pads, strides, dil)
}

// window reads kernel_shape, symmetric pads and strides of a 2-D window.
func window(op *graph.Op, dims int) (tensor.Shape, []int, []int, error) {
	ks := op.Attrs.Ints("kernel_shape")
	if len(ks) != dims {
		return nil, nil, nil, unsupported("kernel_shape %v", ks)
	}
	if ap := op.Attrs.String("auto_pad", "NOTSET"); ap != "NOTSET" && ap != "VALID" {
		return nil, nil, nil, unsupported("auto_pad %s", ap)
	}
	kernelShape := tensor.Shape{int(ks[0]), int(ks[1])}
	pads := []int{0, 0}
	if p := op.Attrs.Ints("pads"); len(p) == 2*dims {
		if p[0] != p[2] || p[1] != p[3] {
			return nil, nil, nil, unsupported("asymmetric pads %v", p)
		}
		pads = []int{int(p[0]), int(p[1])}
	}
	strides := []int{1, 1}
	if s := op.Attrs.Ints("strides"); len(s) == dims {
		strides = []int{int(s[0]), int(s[1])}
	}
	if op.Attrs.Int("ceil_mode", 0) != 0 {
		return nil, nil, nil, unsupported("ceil_mode")
	}
	return kernelShape, pads, strides, nil
}
