package ort

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/opplace/opplace/onnx/onnxpb"
)

// Figure is one measured rate or time: the median over timed runs and
// the 10th and 90th percentiles, in the figure's unit (P10 ≤ Median ≤
// P90 whatever the unit).
type Figure struct {
	Median, P10, P90 float64
}

// Spread is (P90 - P10) / Median: how much the runs disagree.
func (f Figure) Spread() float64 {
	if f.Median == 0 {
		return 0
	}
	return (f.P90 - f.P10) / f.Median
}

// Peak is this CPU's roofline as ONNX Runtime achieves it at a thread
// count.
type Peak struct {
	Version, Library string
	Threads          int
	// FLOPS is the float32 FLOP/s of the fastest MatMul size (MatMulN ×
	// MatMulN by MatMulN × MatMulN, 2N³ FLOPs a run).
	FLOPS   Figure
	MatMulN int
	// Bandwidth is bytes/s of an elementwise Add of two BandwidthBytes
	// float32 tensors: reading both and writing the result, three times
	// BandwidthBytes a run.
	Bandwidth      Figure
	BandwidthBytes int64
	// Overhead is seconds per op of a chain of OverheadOps one-element
	// Adds: a run's time over the op count, so a run's fixed cost is
	// spread over them.
	Overhead    Figure
	OverheadOps int
}

// Sizes of the micro-benchmarks.
var (
	peakSizes      = []int{512, 1024}
	bandwidthElems = int64(16 << 20) // 64 MiB of float32 per tensor
	overheadOps    = 64
)

// MeasurePeak times three models built here in ONNX Runtime at
// o.Threads: MatMuls of a few sizes (FLOP/s, the best median), a large
// Add (bytes/s) and a chain of tiny Adds (per-op overhead). Each runs
// o.Warmup untimed and o.Runs timed runs (0: 3 and 30; the machine may be
// shared, and the medians of many runs move less than one run does).
// Profile and KeepOptimized are ignored.
func MeasurePeak(ctx context.Context, o Options) (Peak, error) {
	if o.Warmup <= 0 {
		o.Warmup = 3
	}
	if o.Runs <= 0 {
		o.Runs = 30
	}
	o.Profile, o.KeepOptimized = false, false
	p := Peak{MatMulN: 0, BandwidthBytes: bandwidthElems * 4, OverheadOps: overheadOps}
	// rate turns run times into a rate of work per second: the slowest
	// run is the lowest rate.
	rate := func(r *Result, work float64) Figure {
		return Figure{Median: work / (r.MedianMS / 1e3), P10: work / (r.P90MS / 1e3), P90: work / (r.P10MS / 1e3)}
	}
	for _, n := range peakSizes {
		r, err := Run(ctx, matMulModel(n), o)
		if err != nil {
			return Peak{}, fmt.Errorf("the %d×%d MatMul: %w", n, n, err)
		}
		p.Version, p.Library, p.Threads = r.Version, r.Library, r.Threads
		if f := rate(r, 2*float64(n)*float64(n)*float64(n)); f.Median > p.FLOPS.Median {
			p.FLOPS, p.MatMulN = f, n
		}
	}
	r, err := Run(ctx, addModel(bandwidthElems), o)
	if err != nil {
		return Peak{}, fmt.Errorf("the bandwidth Add: %w", err)
	}
	p.Bandwidth = rate(r, 3*float64(p.BandwidthBytes))
	r, err = Run(ctx, chainModel(overheadOps), o)
	if err != nil {
		return Peak{}, fmt.Errorf("the overhead chain: %w", err)
	}
	ops := float64(overheadOps)
	p.Overhead = Figure{Median: r.MedianMS / 1e3 / ops, P10: r.P10MS / 1e3 / ops, P90: r.P90MS / 1e3 / ops}
	return p, nil
}

// Models for the micro-benchmarks: float32, opset 17.

func tensorInfo(name string, dims ...int64) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Shape: shape}}}}
}

func node(op, name string, ins []string, out string) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(name), Input: ins, Output: []string{out}}
}

func model(g *onnxpb.GraphProto) []byte {
	mp := &onnxpb.ModelProto{
		IrVersion:    proto.Int64(8),
		ProducerName: proto.String("opplace"),
		OpsetImport:  []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		Graph:        g,
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(mp)
	if err != nil {
		panic(err) // a model built here always encodes
	}
	return data
}

// matMulModel is C = A·B of n×n matrices.
func matMulModel(n int) []byte {
	d := int64(n)
	return model(&onnxpb.GraphProto{
		Name:   proto.String(fmt.Sprintf("matmul%d", n)),
		Input:  []*onnxpb.ValueInfoProto{tensorInfo("A", d, d), tensorInfo("B", d, d)},
		Output: []*onnxpb.ValueInfoProto{tensorInfo("C", d, d)},
		Node:   []*onnxpb.NodeProto{node("MatMul", "matmul", []string{"A", "B"}, "C")},
	})
}

// addModel is Z = X + Y of n elements.
func addModel(n int64) []byte {
	return model(&onnxpb.GraphProto{
		Name:   proto.String("add"),
		Input:  []*onnxpb.ValueInfoProto{tensorInfo("X", n), tensorInfo("Y", n)},
		Output: []*onnxpb.ValueInfoProto{tensorInfo("Z", n)},
		Node:   []*onnxpb.NodeProto{node("Add", "add", []string{"X", "Y"}, "Z")},
	})
}

// chainModel is k one-element Adds in a row, each adding the input to
// the previous sum (nothing to fold or fuse).
func chainModel(k int) []byte {
	g := &onnxpb.GraphProto{Name: proto.String("chain"), Input: []*onnxpb.ValueInfoProto{tensorInfo("x", 1)}}
	prev := "x"
	for i := range k {
		out := fmt.Sprintf("s%d", i)
		g.Node = append(g.Node, node("Add", fmt.Sprintf("add%d", i), []string{prev, "x"}, out))
		prev = out
	}
	g.Output = []*onnxpb.ValueInfoProto{tensorInfo(prev, 1)}
	return model(g)
}
