// Package onnx imports ONNX models into opplace's operator DAG
// (package graph) with full shape inference and per-op cost accounting.
//
// Every ONNX node becomes one op (Constant nodes included); initializers
// become graph.Parameter tensors when the model reads them as weights and
// graph.Constant tensors (buffers) otherwise, by graph.Trainable, and a
// Constant node holding a weight becomes a graph.Parameter tensor too
// (graph.MarkTrainable, with a warning); graph inputs that are not
// initializers become graph.Input tensors, and node outputs
// graph.Activation tensors. Only
// initializer types and dimensions are read, so external weight files
// may be absent. Control-flow bodies (If, Loop, Scan) are imported as
// nested graphs in graph.Attr.Graphs; the values a body reads from the
// enclosing graph become implicit inputs of its op.
//
// # Shape inference
//
// Exported models usually carry no intermediate shapes, so every shape is
// inferred, in topological order, by one function per (domain, op type)
// in a registry (see Supported), honouring opset-version differences
// (Squeeze/Unsqueeze/Reduce axes as attribute or input, Split, Slice,
// Pad, Resize, Clip...). Small integer tensors are partially evaluated —
// Constant, inline initializers, Shape, and Gather, Unsqueeze, Concat,
// Slice, Cast, arithmetic, Where, Range, ConstantOfShape, Expand and
// reductions over them — so reshape targets computed at run time by
// Shape→Gather→Concat chains fold to constants.
//
// Symbolic dimensions are bound by Options; an unbound one is an error
// naming the input, the axis and the flag that binds it.
//
// # Control flow
//
// An If whose condition folds to a constant takes that branch (the other
// need not shape for these inputs). Otherwise, when one branch cannot be
// shaped for these inputs (a decoder of another sample rate), it cannot
// be the branch taken: the other is, with a warning naming the If and the
// branch dropped; only when neither shapes does import fail, naming both
// errors. Else the If is shaped and costed as the branch Options.IfBranch
// names — by default the one with more FLOPs, so a plan never
// underestimates it. A
// Loop runs M times when M folds to a count (INT32_MAX and above are
// exporters' "while" sentinels, not counts), else Options.LoopTrips
// times; without that option one iteration is counted, the cost marked
// estimated and the stacked scan outputs left unshaped. A Scan runs once
// per element of its sequence axis, which its input shapes give. Both
// cases warn, naming the first such node and the option.
//
// Unknown ops keep the shapes the model declares for their outputs, if
// any, get an estimated cost (graph.Work.Estimated) and one warning per
// op type; import never aborts on them.
//
// # Cost convention
//
// MACs count the multiply-accumulates of Conv, ConvTranspose, Gemm,
// MatMul, Einsum contractions, recurrent-layer gate projections and the
// fused and quantized forms of these (com.microsoft Attention, FusedConv,
// FusedMatMul, QLinearConv...). A convolution has
// N·Cout·∏out_spatial·(Cin/group)·∏kernel MACs, a MatMul batch·M·N·K with
// numpy broadcasting of the batch axes.
//
// FLOPs count everything: two per MAC, plus per output element 1 for
// arithmetic, comparisons and bias adds, 4 for transcendental functions
// (exp, tanh, erf, sigmoid...), 5 for softmax, 8 for layer, instance and
// group normalisation, 4 for inference batch normalisation, one per
// window element for pooling and one per input element for reductions.
// Pure data movement (Reshape, Transpose, Gather, Concat, Slice...) costs
// nothing. Each op's inference documents its own count.
//
// # Errors
//
// Every failure caused by the model or the options is an *InputError
// naming the file, with a one-line message: unreadable or non-ONNX
// files, missing graphs, dangling inputs, duplicate outputs, cycles
// (wrapping *graph.CycleError), impossible shapes (naming the node).
package onnx
