package cost

import (
	"strings"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
)

// Roofline is the analytic cost model: an op is bound either by compute
// or by memory traffic,
//
//	time = max(FLOPs / (peak FLOP/s × compute efficiency),
//	           bytes moved / (bandwidth × memory efficiency)) + launch overhead
//
// where bytes moved is every input read once plus every output written
// once. Ops that only relabel metadata (Reshape, Shape, ...) cost nothing:
// runtimes implement them as views without a kernel.
//
// The efficiencies are the device type's achievable-speed model
// (cluster.Efficiency): compute efficiency = Clock × Compute, and for a
// matmul or convolution (graph.AutocastHalf op types and their gradients)
// of W FLOPs also × W/(W + MatmulHalf), a ramp from launch-bound small
// GEMMs to the achievable fraction of large ones; memory efficiency =
// Memory. A field the device type leaves zero takes the flat default
// below. Setting ComputeEfficiency or MemoryEfficiency here overrides the
// device type's model with that flat figure for every op.
type Roofline struct {
	// ComputeEfficiency, when positive, is the achieved fraction of peak
	// FLOP/s of every op on every device type, in place of the device
	// type's achievable-speed model.
	ComputeEfficiency float64
	// MemoryEfficiency, when positive, is the achieved fraction of peak
	// bandwidth of every op, in place of the device type's figure.
	MemoryEfficiency float64
	// TF32 runs float32 matmuls and convolutions (graph.AutocastHalf op
	// types and their gradients) at the device type's TF32 tensor-core
	// figure, as PyTorch does with allow_tf32 set (precision tf32).
	TF32 bool
}

// The default efficiencies, for device types whose achievable-speed model
// leaves a field zero, are uncalibrated assumptions taken from the usual
// range reported for dense GEMM/convolution kernels (60-80% of peak) and
// streaming kernels (70-90% of bandwidth). `opplace profile` calibration
// replaces them with fitted per-family factors.
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

// noKernel reports whether op runs no kernel: a metadata op, or the
// gradient of one.
func noKernel(op *graph.Op) bool {
	return metadataOps[op.Type] || op.Phase == graph.Backward && metadataOps[strings.TrimSuffix(op.Type, "Grad")]
}

// OpTime implements Model.
func (r Roofline) OpTime(g *graph.Graph, id graph.OpID, dt *cluster.DeviceType) float64 {
	op := &g.Ops[id]
	if noKernel(op) {
		return 0
	}
	return max(r.ComputeTime(g, id, dt), r.MemoryTime(g, id, dt)) + dt.LaunchOverhead
}

// ComputeEfficiencyOf is the fraction of op's peak FLOP/s it reaches on dt:
// the flat r.ComputeEfficiency when set, else the device type's
// achievable-speed model (see Roofline).
func (r Roofline) ComputeEfficiencyOf(g *graph.Graph, id graph.OpID, dt *cluster.DeviceType) float64 {
	ce, half := r.efficiency(g, id, dt)
	return ce * Ramp(float64(g.Ops[id].Work.FLOPs), half)
}

// efficiency is op's compute efficiency on dt before the size ramp, and
// the ramp's half-efficiency FLOPs (0: no ramp).
func (r Roofline) efficiency(g *graph.Graph, id graph.OpID, dt *cluster.DeviceType) (ce, half float64) {
	if r.ComputeEfficiency > 0 {
		return r.ComputeEfficiency, 0
	}
	e := dt.Efficiency
	op := &g.Ops[id]
	matmul := graph.Autocast(op.Type) == graph.AutocastHalf
	ce = e.Compute
	if matmul && r.onTensorCores(g, op, dt) {
		if e.Tensor > 0 {
			ce = e.Tensor
		}
		if e.TensorConv > 0 && strings.HasPrefix(op.Type, "Conv") {
			ce = e.TensorConv
		}
	}
	if ce <= 0 {
		ce = DefaultComputeEfficiency
	}
	if e.Clock > 0 {
		ce *= e.Clock
	}
	if matmul {
		half = e.MatmulHalf
	}
	return ce, half
}

// Ramp is the fraction of its achievable efficiency a matmul or
// convolution of w FLOPs reaches, w/(w + half): half of it at half FLOPs
// (cluster.Efficiency.MatmulHalf; profile calibration fits the same form).
func Ramp(w, half float64) float64 {
	if half <= 0 {
		return 1
	}
	return w / (w + half)
}

// onTensorCores reports whether a matmul or convolution runs on dt's
// tensor cores: in a half type, or in float32 under TF32 on a part that
// has it.
func (r Roofline) onTensorCores(g *graph.Graph, op *graph.Op, dt *cluster.DeviceType) bool {
	d := computeDType(g, op)
	return d.IsHalf() && dt.PeakFLOPS[d] > 0 || d == graph.Float32 && r.TF32 && dt.TF32FLOPS > 0
}

// MemoryEfficiencyOf is the fraction of dt's bandwidth an op reaches: the
// flat r.MemoryEfficiency when set, else the device type's figure, else
// DefaultMemoryEfficiency.
func (r Roofline) MemoryEfficiencyOf(dt *cluster.DeviceType) float64 {
	switch {
	case r.MemoryEfficiency > 0:
		return r.MemoryEfficiency
	case dt.Efficiency.Memory > 0:
		return dt.Efficiency.Memory
	}
	return DefaultMemoryEfficiency
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

// ComputeTime is op's FLOPs at its peak times its compute efficiency.
func (r Roofline) ComputeTime(g *graph.Graph, id graph.OpID, dt *cluster.DeviceType) float64 {
	f := g.Ops[id].Work.FLOPs
	if f == 0 {
		return 0
	}
	return float64(f) / (r.Peak(g, id, dt) * r.ComputeEfficiencyOf(g, id, dt))
}

// MemoryTime is op's bytes moved at the bandwidth times the memory
// efficiency.
func (r Roofline) MemoryTime(g *graph.Graph, id graph.OpID, dt *cluster.DeviceType) float64 {
	return float64(BytesMoved(g, id)) / (dt.MemoryBandwidth * r.MemoryEfficiencyOf(dt))
}

// Shape implements Shaper: the roofline's compute time, less the ramp's
// share of it, is the op's FLOPs at the efficiency of a large kernel;
// the ramp's is MatmulHalf FLOPs at it, whatever the op's size.
func (r Roofline) Shape(g *graph.Graph, id graph.OpID, dt *cluster.DeviceType) Shape {
	op := &g.Ops[id]
	if noKernel(op) {
		return Shape{}
	}
	var s Shape
	if f := op.Work.FLOPs; f > 0 {
		ce, half := r.efficiency(g, id, dt)
		rate := r.Peak(g, id, dt) * ce
		s.Compute, s.Ramp = float64(f)/rate, half/rate
	}
	s.Memory = r.MemoryTime(g, id, dt)
	return s
}

// BytesMoved is the memory traffic of one op: inputs read and outputs
// written, once each. Ops that select from their first input (Gather
// rows of an embedding table, a Slice's window) read only what they
// write of it: that input counts at most the outputs' bytes. Counting a
// 94 MB table for a 0.4 MB embedding lookup made the lookup look 200x
// faster than the bandwidth allows, which a calibration then fitted.
func BytesMoved(g *graph.Graph, id graph.OpID) int64 {
	b, _ := MovedBytes(g, id, nil)
	return b
}

// MovedBytes is BytesMoved, and of it the bytes of the tensors fixed
// reports (nil: none). A selecting op's first input counts as what the op
// selects of it, never as fixed: a run on a share of the batch selects
// its share.
func MovedBytes(g *graph.Graph, id graph.OpID, fixed func(graph.TensorID) bool) (total, fixedBytes int64) {
	op := &g.Ops[id]
	var out int64
	for _, t := range op.Outputs {
		n := g.Tensors[t].Bytes()
		out += n
		if fixed != nil && fixed(t) {
			fixedBytes += n
		}
	}
	total = out
	for i, t := range op.Inputs {
		in := g.Tensors[t].Bytes()
		if i == 0 && readsSelection(op.Type) {
			total += min(in, out)
			continue
		}
		total += in
		if fixed != nil && fixed(t) {
			fixedBytes += in
		}
	}
	return total, fixedBytes
}

// readsSelection reports whether an op of this type reads only the part
// of its first input that it writes out.
func readsSelection(opType string) bool {
	switch opType {
	case "Gather", "GatherElements", "GatherND", "Slice":
		return true
	}
	return false
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
