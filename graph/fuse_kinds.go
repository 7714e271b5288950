package graph

// The op classes fusion passes reason about. The lists name ONNX types and,
// where they differ, the TensorFlow spellings the GraphDef importer keeps.

// anchorOps are the compute-heavy kernels a runtime fuses epilogues into
// (cuDNN/oneDNN conv+bias+activation, cuBLASLt matmul epilogues): one per
// vertically fused group.
var anchorOps = map[string]bool{
	"Conv": true, "ConvTranspose": true, "ConvInteger": true, "QLinearConv": true,
	"MatMul": true, "Gemm": true, "MatMulInteger": true, "QLinearMatMul": true, "FusedMatMul": true,
	// TensorFlow.
	"Conv2D": true, "Conv3D": true, "DepthwiseConv2dNative": true, "BatchMatMul": true,
	"BatchMatMulV2": true, "BatchMatMulV3": true,
}

// elementwiseOps compute each output element from the elements at the same
// (broadcast) position of their inputs, so a chain of them runs as one
// loop without writing its intermediates: the epilogues and the
// elementwise runs vertical fusion merges. Inference BatchNormalization is
// a per-channel affine map and belongs here.
var elementwiseOps = map[string]bool{
	"Add": true, "Sub": true, "Mul": true, "Div": true, "Pow": true, "Mod": true,
	"Neg": true, "Abs": true, "Reciprocal": true, "Sqrt": true, "Exp": true, "Log": true,
	"Erf": true, "Tanh": true, "Sigmoid": true, "Relu": true, "LeakyRelu": true, "PRelu": true,
	"Elu": true, "Selu": true, "Celu": true, "Gelu": true, "FastGelu": true, "BiasGelu": true,
	"HardSigmoid": true, "HardSwish": true, "Softplus": true, "Softsign": true, "Mish": true,
	"Clip": true, "Cast": true, "Where": true, "Min": true, "Max": true, "Sum": true,
	"Floor": true, "Ceil": true, "Round": true, "Sign": true, "Sin": true, "Cos": true,
	"Not": true, "And": true, "Or": true, "Xor": true, "Equal": true, "Less": true, "Greater": true,
	"LessOrEqual": true, "GreaterOrEqual": true, "IsNaN": true, "ThresholdedRelu": true,
	"BatchNormalization": true, "QuantizeLinear": true, "DequantizeLinear": true,
	// TensorFlow.
	"AddV2": true, "BiasAdd": true, "RealDiv": true, "Maximum": true, "Minimum": true,
	"Relu6": true, "Rsqrt": true, "Square": true, "SquaredDifference": true,
	"FusedBatchNorm": true, "FusedBatchNormV3": true,
}

// viewOps launch no kernel (they relabel a tensor's shape or produce a
// value known before the step), so they fuse into whatever they touch.
// The list matches cost.IsMetadataOp, which prices them at zero.
var viewOps = map[string]bool{
	"Shape": true, "Size": true, "Constant": true, "Reshape": true,
	"Squeeze": true, "Unsqueeze": true, "Flatten": true, "Identity": true,
	"Dropout": true,
	"Const":   true, "ExpandDims": true, "NoOp": true, "Placeholder": true,
	"StopGradient": true,
}

// IsAnchorOp reports whether ops of this type are compute-heavy kernels
// that take fused epilogues.
func IsAnchorOp(opType string) bool { return anchorOps[opType] }

// IsElementwiseOp reports whether ops of this type are elementwise.
func IsElementwiseOp(opType string) bool { return elementwiseOps[opType] }

// IsViewOp reports whether ops of this type launch no kernel.
func IsViewOp(opType string) bool { return viewOps[opType] }

// fusible reports whether an op may join a vertically fused group at all.
func fusible(opType string) bool {
	return anchorOps[opType] || elementwiseOps[opType] || viewOps[opType]
}
