package train_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/train"
)

// typed builds small graphs of float32 tensors with real op types.
type typed struct {
	t *testing.T
	g *graph.Graph
}

func (b typed) tensor(name string, kind graph.TensorKind, shape ...int64) graph.TensorID {
	id, err := b.g.AddTensor(graph.Tensor{Name: name, DType: graph.Float32, Shape: shape, ShapeKnown: true, Kind: kind})
	if err != nil {
		b.t.Fatal(err)
	}
	return id
}

func (b typed) op(name, typ string, flops int64, out graph.TensorID, in ...graph.TensorID) {
	if _, err := b.g.AddOp(graph.Op{Name: name, Type: typ, Inputs: in, Outputs: []graph.TensorID{out}, Work: graph.Work{FLOPs: flops}}); err != nil {
		b.t.Fatal(err)
	}
}

// linearNorm is x[4,8] -> MatMul(W[8,16]) -> Add(b[16]) ->
// LayerNormalization(gamma[16]) -> Relu: a linear layer, a norm autocast
// keeps in float32 and an elementwise op after it.
func linearNorm(t *testing.T) *graph.Graph {
	b := typed{t, graph.New("linear-norm", 0, 0)}
	x := b.tensor("x", graph.Input, 4, 8)
	w := b.tensor("W", graph.Parameter, 8, 16)
	bias := b.tensor("b", graph.Parameter, 16)
	gamma := b.tensor("gamma", graph.Parameter, 16)
	mm, add, ln, relu := b.tensor("mm", graph.Activation, 4, 16), b.tensor("add", graph.Activation, 4, 16),
		b.tensor("ln", graph.Activation, 4, 16), b.tensor("relu", graph.Activation, 4, 16)
	b.op("mm", "MatMul", 2*4*8*16, mm, x, w)
	b.op("add", "Add", 64, add, mm, bias)
	b.op("ln", "LayerNormalization", 8*64, ln, add, gamma)
	b.op("relu", "Relu", 64, relu, ln)
	b.g.Inputs = []graph.TensorID{x}
	b.g.Outputs = []graph.TensorID{relu}
	return b.g
}

func tensor(t *testing.T, g *graph.Graph, name string) *graph.Tensor {
	t.Helper()
	id, ok := g.TensorByName(name)
	if !ok {
		t.Fatalf("no tensor %q", name)
	}
	return &g.Tensors[id]
}

// TestAutocastCastNames checks that autocast's casts sit in the module of
// the op that reads them, as torch.onnx names ops, so module paths (of
// op names) stay the forward ops': a weight's cast named after the
// weight read as a module "blocks.5.fc2.weight/", and an activation's as
// a sub-module of the op that wrote it.
func TestAutocastCastNames(t *testing.T) {
	b := typed{t, graph.New("block", 0, 0)}
	x := b.tensor("x", graph.Input, 4, 8)
	w := b.tensor("blocks.5.fc2.weight", graph.Parameter, 8, 16)
	gamma := b.tensor("blocks.5.ln.weight", graph.Parameter, 16)
	mm := b.tensor("/blocks/blocks.5/fc2/MatMul_output_0", graph.Activation, 4, 16)
	ln := b.tensor("/blocks/blocks.5/ln/LayerNormalization_output_0", graph.Activation, 4, 16)
	b.op("/blocks/blocks.5/fc2/MatMul", "MatMul", 2*4*8*16, mm, x, w)
	b.op("/blocks/blocks.5/ln/LayerNormalization", "LayerNormalization", 8*64, ln, mm, gamma)
	// A weight torch.onnx shares through an Identity at the root: its
	// cast is named in the module of the op that computes with it.
	w3 := b.tensor("blocks.5.fc3.weight", graph.Parameter, 16, 16)
	alias := b.tensor("onnx::MatMul_99", graph.Activation, 16, 16)
	out := b.tensor("/blocks/blocks.5/fc3/MatMul_output_0", graph.Activation, 4, 16)
	b.op("Identity_0", "Identity", 0, alias, w3)
	b.op("/blocks/blocks.5/fc3/MatMul", "MatMul", 2*4*16*16, out, ln, alias)
	b.g.Inputs, b.g.Outputs = []graph.TensorID{x}, []graph.TensorID{out}
	g, _, err := train.ApplyPrecision(b.g, train.AMPBF16)
	if err != nil {
		t.Fatal(err)
	}
	var casts []string
	for i := range g.Ops {
		if g.Ops[i].Domain == train.AutocastDomain {
			casts = append(casts, g.Ops[i].Name)
		}
	}
	slices.Sort(casts)
	want := []string{
		"/blocks/blocks.5/fc2/blocks.5.fc2.weight_autocast_bfloat16",
		"/blocks/blocks.5/fc2/x_autocast_bfloat16",
		"/blocks/blocks.5/fc3/LayerNormalization_output_0_autocast_bfloat16",
		"/blocks/blocks.5/fc3/blocks.5.fc3.weight_autocast_bfloat16",
		"/blocks/blocks.5/ln/MatMul_output_0_autocast_float32",
	}
	if !slices.Equal(casts, want) {
		t.Errorf("casts %q, want %q", casts, want)
	}
}

func TestAutocastTypesAndCasts(t *testing.T) {
	fwd := linearNorm(t)
	g, st, err := train.ApplyPrecision(fwd, train.AMPBF16)
	if err != nil {
		t.Fatal(err)
	}
	// Casts: x and W to bfloat16 for the MatMul (W's is the working copy
	// of the weight), add back to float32 for the LayerNormalization.
	// Traffic: (128+64) + (512+256) + (128+256) bytes.
	want := train.PrecisionStats{HalfOps: 1, Float32Ops: 1, Casts: 3, CastBytes: 1344, HalfWeightBytes: 256}
	if st != want {
		t.Errorf("stats = %+v, want %+v", st, want)
	}
	for name, dt := range map[string]graph.DType{
		"mm": graph.BFloat16, "add": graph.BFloat16, // the bias add stays in the layer's type
		"add/autocast_float32": graph.Float32, "ln": graph.Float32, "relu": graph.Float32,
		"W": graph.Float32, "W/autocast_bfloat16": graph.BFloat16, "x/autocast_bfloat16": graph.BFloat16,
	} {
		if got := tensor(t, g, name).DType; got != dt {
			t.Errorf("%s is %s, want %s", name, got, dt)
		}
	}
	if got := tensor(t, g, "mm").Bytes(); got != 128 {
		t.Errorf("the MatMul's output takes %d bytes, want 128 (64 bfloat16 elements)", got)
	}
	mm := op(t, g, "mm")
	if got := names(g, mm.Inputs); strings.Join(got, " ") != "x/autocast_bfloat16 W/autocast_bfloat16" {
		t.Errorf("mm reads %v", got)
	}
	if mm.Colocate == "" || op(t, g, "W_autocast_bfloat16").Colocate != mm.Colocate {
		t.Errorf("the weight's cast is not colocated with its reader: %q vs %q", op(t, g, "W_autocast_bfloat16").Colocate, mm.Colocate)
	}
	// fwd is untouched.
	if fwd.Tensors[0].DType != graph.Float32 || len(fwd.Ops) != 4 {
		t.Error("ApplyPrecision modified its input")
	}
	// amp-fp16 is the same with float16.
	g16, _, err := train.ApplyPrecision(fwd, train.AMPFP16)
	if err != nil {
		t.Fatal(err)
	}
	if got := tensor(t, g16, "mm").DType; got != graph.Float16 {
		t.Errorf("amp-fp16: mm is %s", got)
	}
}

// TestAutocastTrainingMemory checks the step's memory per dtype on the
// small graph: fp32 master weights, the bfloat16 working copy, fp32
// gradients, fp32 Adam state and half-size saved activations.
func TestAutocastTrainingMemory(t *testing.T) {
	fwd := linearNorm(t)
	amp, _, err := train.ApplyPrecision(fwd, train.AMPBF16)
	if err != nil {
		t.Fatal(err)
	}
	g, st, err := train.Build(amp, train.Options{Optimizer: train.Adam})
	if err != nil {
		t.Fatal(err)
	}
	// Master weights W 512 + b 64 + gamma 64 = 640 bytes of float32:
	// gradients the same, Adam's two moments twice that.
	if st.GradientBytes != 640 || st.StateBytes != 1280 {
		t.Errorf("gradients %d, state %d bytes; want 640 and 1280", st.GradientBytes, st.StateBytes)
	}
	for _, name := range []string{"W/adam_state0", "W/adam_state1"} {
		if tt := tensor(t, g, name); tt.DType != graph.Float32 || tt.Bytes() != 512 {
			t.Errorf("%s: %s, %d bytes", name, tt.DType, tt.Bytes())
		}
	}
	// The MatMul's gradient writes the working copy's gradient in
	// bfloat16; the cast's gradient turns it into W's float32 gradient,
	// reading nothing saved.
	castGrad := op(t, g, "W_autocast_bfloat16/grad")
	if got := names(g, castGrad.Inputs); len(got) != 1 || !strings.HasPrefix(got[0], "grad/mm/grad/W/autocast_bfloat16") {
		t.Errorf("the cast's gradient reads %v, want only the incoming gradient", got)
	}
	if half := &g.Tensors[castGrad.Inputs[0]]; half.DType != graph.BFloat16 || half.Bytes() != 256 {
		t.Errorf("the working copy's gradient: %s, %d bytes", half.DType, half.Bytes())
	}
	if wg := &g.Tensors[castGrad.Outputs[0]]; wg.DType != graph.Float32 || wg.Bytes() != 512 {
		t.Errorf("W's gradient: %s, %d bytes", wg.DType, wg.Bytes())
	}
	// The MatMul's gradient reads its saved inputs in bfloat16: the
	// activation saved for backward is 64 bytes (x's copy), not 128.
	var saved int64
	for _, in := range op(t, g, "mm/grad").Inputs {
		if tt := &g.Tensors[in]; tt.Producer != graph.NoOp && g.Ops[tt.Producer].Phase == graph.Forward {
			saved += tt.Bytes()
		}
	}
	// x's copy only, 64 bytes: a product saves an input for the other
	// input's gradient, and x (a graph input) needs none, so W's copy is
	// not saved; nor is the product's output.
	if saved != 64 {
		t.Errorf("mm/grad reads %d saved bytes, want 64", saved)
	}
	// The same step in fp32 saves 128 + 512 + 256 (x itself, W resident).
	f32, _, _ := train.Build(fwd, train.Options{Optimizer: train.Adam})
	if got := tensor(t, f32, "mm").Bytes(); got != 256 {
		t.Errorf("fp32 mm output %d bytes, want 256", got)
	}
}

func TestPrecisionParse(t *testing.T) {
	for _, s := range []string{"", "fp32", "tf32", "amp-bf16", "AMP-FP16"} {
		if _, err := train.ParsePrecision(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	_, err := train.ParsePrecision("bf16")
	if err == nil || !strings.Contains(err.Error(), "fp32, tf32, amp-bf16, amp-fp16") {
		t.Errorf("bf16: %v", err)
	}
}

func TestFP32WidensHalfModels(t *testing.T) {
	fwd := linearNorm(t)
	if g, _, _ := train.ApplyPrecision(fwd, train.FP32); g != fwd {
		t.Error("fp32 copied a float32 graph")
	}
	for i := range fwd.Tensors {
		fwd.Tensors[i].DType = graph.Float16
	}
	g, st, err := train.ApplyPrecision(fwd, train.TF32)
	if err != nil || st.Converted != len(fwd.Tensors) || tensor(t, g, "W").DType != graph.Float32 {
		t.Errorf("tf32 on a float16 graph: %+v %v", st, err)
	}
}
