package cost

import (
	"strings"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
)

// Roofline is the analytic cost model: an op is bound either by compute
// or by memory traffic,
//
//	time = max(FLOPs / (peak FLOP/s × ComputeEfficiency),
//	           bytes moved / (bandwidth × MemoryEfficiency)) + launch overhead
//
// where bytes moved is every input read once plus every output written
// once. Ops that only relabel metadata (Reshape, Shape, ...) cost nothing:
// runtimes implement them as views without a kernel.
type Roofline struct {
	// ComputeEfficiency is the achieved fraction of peak FLOP/s; 0 means
	// DefaultComputeEfficiency.
	ComputeEfficiency float64
	// MemoryEfficiency is the achieved fraction of peak bandwidth; 0 means
	// DefaultMemoryEfficiency.
	MemoryEfficiency float64
	// TF32 runs float32 matmuls and convolutions (graph.AutocastHalf op
	// types and their gradients) at the device type's TF32 tensor-core
	// figure, as PyTorch does with allow_tf32 set (precision tf32).
	TF32 bool
}

// The default efficiencies are uncalibrated assumptions taken from the
// usual range reported for dense GEMM/convolution kernels (60-80% of peak)
// and streaming kernels (70-90% of bandwidth). `opplace profile`
// calibration replaces them with fitted per-family factors.
const (
	DefaultComputeEfficiency = 0.7
	DefaultMemoryEfficiency  = 0.8
)

// metadataOps never launch a kernel: they reinterpret a tensor's shape or
// produce a value known before the step.
var metadataOps = map[string]bool{
	"Shape": true, "Size": true, "Constant": true, "Reshape": true,
	"Squeeze": true, "Unsqueeze": true, "Flatten": true, "Identity": true,
	"Dropout": true, // inference: identity
	// TensorFlow spellings.
	"Const": true, "ExpandDims": true, "NoOp": true, "Placeholder": true,
	"StopGradient": true,
}

// IsMetadataOp reports whether ops of this type cost no kernel.
func IsMetadataOp(opType string) bool { return metadataOps[opType] }

// OpTime implements Model.
func (r Roofline) OpTime(g *graph.Graph, id graph.OpID, dt *cluster.DeviceType) float64 {
	op := &g.Ops[id]
	if metadataOps[op.Type] || op.Phase == graph.Backward && metadataOps[strings.TrimSuffix(op.Type, "Grad")] {
		return 0
	}
	return max(r.ComputeTime(g, id, dt), r.MemoryTime(g, id, dt)) + dt.LaunchOverhead
}

func (r Roofline) efficiencies() (ce, me float64) {
	ce, me = r.ComputeEfficiency, r.MemoryEfficiency
	if ce <= 0 {
		ce = DefaultComputeEfficiency
	}
	if me <= 0 {
		me = DefaultMemoryEfficiency
	}
	return ce, me
}

// Peak is the FLOP/s op's compute runs at on dt: the figure for its
// element type (computeDType), or TF32's for a float32 matmul or
// convolution when r.TF32 is set.
func (r Roofline) Peak(g *graph.Graph, id graph.OpID, dt *cluster.DeviceType) float64 {
	op := &g.Ops[id]
	d := computeDType(g, op)
	if r.TF32 && d == graph.Float32 && graph.Autocast(op.Type) == graph.AutocastHalf {
		return dt.MatmulFLOPS(true)
	}
	return dt.FLOPS(d)
}

// ComputeTime is op's FLOPs at its peak times the compute efficiency.
func (r Roofline) ComputeTime(g *graph.Graph, id graph.OpID, dt *cluster.DeviceType) float64 {
	ce, _ := r.efficiencies()
	return float64(g.Ops[id].Work.FLOPs) / (r.Peak(g, id, dt) * ce)
}

// MemoryTime is op's bytes moved at the bandwidth times the memory
// efficiency.
func (r Roofline) MemoryTime(g *graph.Graph, id graph.OpID, dt *cluster.DeviceType) float64 {
	_, me := r.efficiencies()
	return float64(BytesMoved(g, id)) / (dt.MemoryBandwidth * me)
}

// BytesMoved is the memory traffic of one op: inputs read and outputs
// written, once each.
func BytesMoved(g *graph.Graph, id graph.OpID) int64 {
	op := &g.Ops[id]
	var b int64
	for _, t := range op.Inputs {
		b += g.Tensors[t].Bytes()
	}
	for _, t := range op.Outputs {
		b += g.Tensors[t].Bytes()
	}
	return b
}

// computeDType picks the element type whose peak rate bounds the op: the
// first floating-point input, else the first output, else float32.
func computeDType(g *graph.Graph, op *graph.Op) graph.DType {
	for _, t := range op.Inputs {
		if d := g.Tensors[t].DType; d.IsFloat() {
			return d
		}
	}
	for _, t := range op.Outputs {
		if d := g.Tensors[t].DType; d.IsFloat() {
			return d
		}
	}
	return graph.Float32
}
