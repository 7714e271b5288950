package graph

import "strings"

// AutocastClass says how PyTorch's autocast runs an op under mixed
// precision (torch.autocast on CUDA; the op lists are in the torch.amp
// documentation, "Autocast Op Reference":
// https://pytorch.org/docs/stable/amp.html#autocast-op-reference).
type AutocastClass uint8

const (
	// AutocastPromote ops are not on either list: they run in the widest
	// floating-point type of their activation inputs (PyTorch's type
	// promotion), so elementwise ops after a half-precision op stay half.
	AutocastPromote AutocastClass = iota
	// AutocastHalf ops are cast to the half type (float16 or bfloat16):
	// matmuls, linear layers, convolutions and recurrent cells, the ops
	// tensor cores run.
	AutocastHalf
	// AutocastFloat32 ops are cast to float32 for range: softmax, the
	// layer and group norms, sums and products, exp, log, pow and the
	// losses.
	AutocastFloat32
)

// autocastHalf maps op types (ONNX, and TensorFlow spellings) to the
// torch ops autocast runs in half precision: matmul, mm, bmm, baddbmm,
// addmm, linear (Gemm; MatMul also covers the batched matmuls of
// attention), conv1d/2d/3d, conv_transpose*, prelu, and the LSTM, GRU and
// RNN cells.
var autocastHalf = map[string]bool{
	"MatMul": true, "Gemm": true, "Conv": true, "ConvTranspose": true, "Einsum": true,
	"PRelu": true, "LSTM": true, "GRU": true, "RNN": true,
	// scaled_dot_product_attention (on autocast's lower-precision list in
	// aten/src/ATen/autocast_mode.cpp): a fused attention core
	// (FuseAttention) and the attention ops model files carry.
	"Attention": true, "MultiHeadAttention": true,
	// TensorFlow.
	"BatchMatMul": true, "BatchMatMulV2": true, "BatchMatMulV3": true, "Conv2D": true,
	"Conv3D": true, "DepthwiseConv2dNative": true, "Conv2DBackpropInput": true,
	"_FusedMatMul": true, "_FusedConv2D": true,
}

// autocastFloat32 maps op types to the torch ops autocast keeps in
// float32: softmax, log_softmax, layer_norm, group_norm, norm, sum,
// prod, cumsum, logsumexp, exp, log, pow, reciprocal, rsqrt, softplus,
// the hyperbolic and inverse trigonometric functions, and the losses.
// (ONNX Sum is an elementwise sum of tensors, not torch.sum: it
// promotes.) BatchNormalization is on neither list (cuDNN's batch norm takes a
// half input with float32 statistics and writes half), so it promotes;
// so does ReduceMean (torch.mean is not listed).
var autocastFloat32 = map[string]bool{
	"Softmax": true, "LogSoftmax": true, "LayerNormalization": true, "GroupNormalization": true,
	"LpNormalization": true, "ReduceSum": true, "ReduceProd": true, "ReduceL1": true, "ReduceL2": true,
	"ReduceSumSquare": true, "ReduceLogSum": true, "ReduceLogSumExp": true, "CumSum": true,
	"Exp": true, "Log": true, "Pow": true, "Reciprocal": true, "Softplus": true,
	"Sinh": true, "Cosh": true, "Tan": true, "Asin": true, "Acos": true,
	"SoftmaxCrossEntropyLoss": true, "NegativeLogLikelihoodLoss": true,
	// TensorFlow.
	"Prod": true, "Cumsum": true, "Rsqrt": true,
}

// Autocast is the class of an op type; a gradient op ("MatMulGrad") has
// its forward op's class.
func Autocast(opType string) AutocastClass {
	t := strings.TrimSuffix(opType, "Grad")
	switch {
	case autocastHalf[t]:
		return AutocastHalf
	case autocastFloat32[t]:
		return AutocastFloat32
	}
	return AutocastPromote
}

// IsHalf reports whether d is a 16-bit floating-point type.
func (d DType) IsHalf() bool { return d == Float16 || d == BFloat16 }
