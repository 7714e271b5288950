package train

import "github.com/opplace/opplace/graph"

// What a gradient op reads of its forward op besides the gradients of the
// outputs: the tensors PyTorch's autograd saves for that op's derivative
// (the formulas of tools/autograd/derivatives.yaml), by ONNX op type.
// What is not saved is freed once the forward pass has read it, so this
// decides how much activation memory a training step holds: in a
// transformer block the scores, the scaled scores and the masked scores
// are freed and only the softmax's output waits for backward (measured on
// an H100 for GPT-2: docs/measured-h100.md).
type saveRule uint8

const (
	// saveAll keeps every input and output: the conservative rule for op
	// types the table does not know.
	saveAll saveRule = iota
	// saveNone: the derivative needs only the output gradient (sums,
	// shape and layout ops, concatenation, slicing).
	saveNone
	// saveOutputs: the derivative is a function of the result
	// (relu, sigmoid, tanh, softmax, exp, sqrt).
	saveOutputs
	// saveInputs: the derivative is a function of the inputs (erf, pow,
	// clip, normalisations, pooling).
	saveInputs
	// saveOthers: products (Mul, MatMul, Gemm, Conv): an input is saved
	// when another input needs a gradient, since that gradient is the
	// output gradient times this input.
	saveOthers
	// saveDivisor: a / b saves b when a needs a gradient, and both when
	// b needs one.
	saveDivisor
	// saveIndices: gathers save their integer indices only.
	saveIndices
)

var saveRules = map[string]saveRule{
	"Add": saveNone, "Sub": saveNone, "Neg": saveNone, "Sum": saveNone, "Mean": saveNone,
	"Identity": saveNone, "Reshape": saveNone, "Flatten": saveNone, "Squeeze": saveNone,
	"Unsqueeze": saveNone, "Transpose": saveNone, "Concat": saveNone, "Split": saveNone,
	"Slice": saveNone, "Expand": saveNone, "Pad": saveNone, "ReduceSum": saveNone,
	"ReduceMean": saveNone, "GlobalAveragePool": saveNone, "Dropout": saveNone, "Tile": saveNone,

	"Relu": saveOutputs, "Sigmoid": saveOutputs, "Tanh": saveOutputs, "Softmax": saveOutputs,
	"LogSoftmax": saveOutputs, "Exp": saveOutputs, "Sqrt": saveOutputs, "Reciprocal": saveOutputs,

	"Erf": saveInputs, "Pow": saveInputs, "Log": saveInputs, "Clip": saveInputs,
	"LeakyRelu": saveInputs, "Gelu": saveInputs, "HardSigmoid": saveInputs, "HardSwish": saveInputs,
	"Sin": saveInputs, "Cos": saveInputs, "Abs": saveInputs, "AveragePool": saveInputs,
	"LayerNormalization": saveInputs, "BatchNormalization": saveInputs,
	"InstanceNormalization": saveInputs, "GroupNormalization": saveInputs,

	"Mul": saveOthers, "MatMul": saveOthers, "Gemm": saveOthers, "Conv": saveOthers,
	"ConvTranspose": saveOthers, "Einsum": saveOthers,

	"Div": saveDivisor,

	"Gather": saveIndices, "GatherElements": saveIndices, "GatherND": saveIndices,
}

// savedForBackward lists the non-constant inputs and the outputs of
// forward op f that its gradient op reads, in the op's order, each once.
// Autocast's casts save nothing.
func (b *builder) savedForBackward(f *graph.Op) []graph.TensorID {
	g := b.g
	if f.Domain == AutocastDomain {
		return nil
	}
	if f.Domain == graph.AttentionDomain {
		// A fused attention kernel saves Q, K, V (and a mask it reads) and
		// its output, plus one softmax statistic per query row, small
		// beside them; never the scores (graph.FuseAttention).
		return b.keepAll(f)
	}
	rule, known := saveRules[f.Type]
	if !known || f.Domain != "" && f.Domain != "ai.onnx" {
		rule = saveAll
	}
	needs := func(t graph.TensorID) bool { return b.differentiable(&g.Tensors[t]) }
	var out []graph.TensorID
	keep := func(t graph.TensorID) {
		if g.Tensors[t].Kind != graph.Constant {
			out = append(out, t)
		}
	}
	switch rule {
	case saveAll:
		return b.keepAll(f)
	case saveOutputs:
		for _, t := range f.Outputs {
			keep(t)
		}
	case saveInputs:
		for _, t := range f.Inputs {
			keep(t)
		}
	case saveOthers:
		for i, t := range f.Inputs {
			for j, o := range f.Inputs {
				if j != i && needs(o) {
					keep(t)
					break
				}
			}
		}
	case saveDivisor:
		if len(f.Inputs) == 2 {
			a, d := f.Inputs[0], f.Inputs[1]
			if needs(d) {
				keep(a)
			}
			if needs(a) || needs(d) {
				keep(d)
			}
		}
	case saveIndices:
		for _, t := range f.Inputs {
			if !g.Tensors[t].DType.IsFloat() {
				keep(t)
			}
		}
	}
	return out
}

// keepAll is every non-constant input and output of f.
func (b *builder) keepAll(f *graph.Op) []graph.TensorID {
	var out []graph.TensorID
	for _, ts := range [][]graph.TensorID{f.Inputs, f.Outputs} {
		for _, t := range ts {
			if b.g.Tensors[t].Kind != graph.Constant {
				out = append(out, t)
			}
		}
	}
	return out
}
