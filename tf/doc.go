// Package tf imports TensorFlow graphs into opplace's operator DAG
// (package graph) with shape inference and per-op cost accounting, and
// writes placements back into TensorFlow files.
//
// # Formats
//
// Three forms are told apart by content (Sniff): a binary GraphDef (a
// frozen .pb; its first field is GraphDef.node, length-delimited, where
// an ONNX ModelProto starts with the varint ir_version), a GraphDef in
// protobuf text form (.pbtxt) and a TensorFlow.js graph model
// (model.json, whose modelTopology is a GraphDef in protobuf JSON and
// whose weightsManifest gives every weight's dtype and shape). All are
// decoded with the published TensorFlow protobuf types
// (github.com/wamuir/graft) and google.golang.org/protobuf.
//
// # Graph
//
// Const nodes become tensors, not ops: graph.Parameter when the graph
// reads them as weights (graph.Trainable, the rule ONNX import uses),
// graph.Constant otherwise (integers, scalars, masks). Placeholders become
// graph.Input tensors, shaped by their shape attribute (or the TF.js
// signature) and the import options (Options.Import, the importopt.Options
// the ONNX importer takes too, onnx.Options): Batch binds a dynamic (-1)
// leading dimension, Shapes sets a whole shape. Every other node is an
// op; output i of node n is the tensor "n" (i = 0) or "n:i". Control
// inputs (^n) become graph.Op.ControlDeps; `_class: loc:@n` attributes
// become colocation groups (graph.Op.Colocate, keyed "loc:@" + the
// group's first node in file order); node device fields are kept as the
// op's "_device" attribute and, with Options.Pins, become pins
// (graph.Op.Device) on the cluster device they name (tfdevice.NewPinResolver).
// Graph outputs are the TF.js signature's, else every op output nothing
// reads.
//
// # Shape inference
//
// One function per op type (see Supported): convolutions in NHWC and
// NCHW, depthwise, dilated and explicitly padded, and the _Fused* ops
// TensorFlow.js emits; pooling; FusedBatchNorm(V3); MatMul and
// BatchMatMul with broadcasting; the shape ops (Reshape, StridedSlice
// with all five masks, Pad, Concat, Pack, Split, Gather...); reductions;
// resizes; numpy-broadcasting elementwise ops. Small integer tensors are
// evaluated (Shape, StridedSlice, Pack, Concat, arithmetic...), so shapes
// computed at run time fold to constants.
//
// A TF.js model's weight files hold the values of its shape-feeding
// constants (reshape targets, pad amounts, axes). When they sit next to
// model.json they are read; when they are absent, shapes are tracked
// partially (known rank, unknown dimensions, and the element count where
// a Reshape keeps it) and recovered in two stages. First deduction,
// which is always sound: forward inference alternates with backward
// rules (backward.go) that say what an op's inputs must be given what is
// known of its outputs — the signature's output shapes, Unpack/Pack,
// ExpandDims/Squeeze, reductions and ArgMax, ConcatV2 (whose unknown
// axis is deduced where an input differs from the output), GatherNd,
// Transpose, Pad and numpy broadcasting — and a known element count
// fills a single unknown dimension. Then, only for what deduction leaves
// open (settle, guess.go): axis constants that one value fits are set to
// it; computed operands of one rank meeting in a broadcasting op are
// assumed the same size (a residual add); a reshape output takes, of the
// shapes its count and consumers allow, the one keeping its input's
// leading and trailing dimensions; and a remaining axis constant is set
// to the first value with which the graph infers without contradiction
// and with the most shapes known. Each assumption is checked by a strict
// inference run and named in a warning. Unknown ops keep going with a
// warning and an estimated cost (graph.Work.Estimated).
//
// # Control flow
//
// TensorFlow 1 while loops (Enter, Merge, Switch, LoopCond,
// NextIteration, Exit frames) are imported flat (control.go): the
// NextIteration → Merge back edge is dropped, so the graph is a DAG with
// one copy of each body, and a body op costs its work times the trip
// count of its frame and of the frames enclosing it. The trip count is
// read from the loop condition when it compares a constant-stepped
// counter with a constant limit, else it is Options.Import.LoopTrips (one
// iteration, cost estimated, when unset); either case of a dynamic count
// warns. A cond (a Switch on a predicate that is not a LoopCond) costs
// one side, chosen as for an ONNX If (the constant predicate, else
// Options.Import.IfBranch); the other side's ops stay, at no cost.
//
// # Cost convention
//
// As in package onnx: MACs count convolutions (N·∏out·Cout·∏kernel·
// Cin/group; depthwise N·∏out·C·multiplier·∏kernel) and matrix products
// (batch·M·N·K); FLOPs are two per MAC plus, per output element, 1 for
// arithmetic, comparisons, bias adds and Relu-like activations, 4 for
// transcendental activations, 5 for softmax, 4 for inference batch norm
// (8 in training), one per window element for pooling, one per input
// element for reductions, 8 for a bilinear resize, and the epilogues
// fused into _Fused* ops. Data movement costs nothing.
//
// # Writing placements back
//
// Annotate sets node device fields (Const and Placeholder nodes take
// their first consumer's device); AnnotateDevices renders cluster devices
// as TensorFlow device strings with a template (package tfdevice; its
// DefaultTemplate is
// /job:worker/replica:0/task:<host index>/device:<GPU|CPU>:<index within
// host and kind>) and annotates. Which format a model file is, and so
// which annotator writes it, is package pipeline's one format table.
package tf
