package ort

import (
	"context"
	"fmt"
	"slices"
	"time"

	rt "github.com/yalue/onnxruntime_go"

	"google.golang.org/protobuf/proto"

	"github.com/opplace/opplace/internal/stats"
	"github.com/opplace/opplace/onnx/onnxpb"
)

// Figure is one measured rate or time over all timed runs: the median
// and the 10th and 90th percentiles, and the fastest run's figure, in the
// figure's unit (P10 ≤ Median ≤ P90 whatever the unit).
//
// Best is the figure to rely on: on a shared machine other processes only
// ever slow a run down, so the fastest of many runs estimates the
// undisturbed machine and repeats from one measurement to the next, where
// the median moves with the load (Chen and Revels, "Robust benchmarking
// in noisy environments", 2016). Measured on 2 shared cores at load 6,
// four processes' Best FLOP/s stayed within 6% while their medians
// varied by a factor of 2.5.
type Figure struct {
	Median, P10, P90 float64
	Best             float64
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
	FLOPS       Figure
	MatMulN     int
	MatMulSizes []int // the sizes tried
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
	// Runs is the benchmarks' timed run count, all together.
	Runs int
	// Rounds is how many interleaved rounds ran; Settled whether the
	// fastest FLOP/s and bandwidth were each reached again (Settle) by
	// then. RoundFLOPS is each round's fastest FLOP/s (over the MatMul
	// sizes), in round order.
	Rounds     int
	Settled    bool
	RoundFLOPS []float64
}

// RoundSpread is how far the rounds' fastest FLOP/s lie apart: (max -
// min) / max; a round slowed throughout by other work stands out in it.
func (p Peak) RoundSpread() float64 {
	if len(p.RoundFLOPS) == 0 {
		return 0
	}
	lo, hi := slices.Min(p.RoundFLOPS), slices.Max(p.RoundFLOPS)
	return (hi - lo) / hi
}

// Settle bounds MeasurePeak's repetition. On a shared machine other
// processes only slow a run down, so a round's fastest run is the
// machine's figure when the round met a quiet moment and lower when it
// did not; a fixed number of rounds taken inside a busy spell reports
// that spell. MeasurePeak therefore runs at least MinRounds rounds and
// then goes on until the fastest FLOP/s and the fastest bandwidth have
// each been reached, within Tolerance, by Confirm different rounds (a
// figure the machine gives again, not one lucky run), or until MaxRounds
// rounds or MaxTime have passed (Peak.Settled false).
type Settle struct {
	MinRounds, MaxRounds, Confirm int
	Tolerance                     float64
	MaxTime                       time.Duration
}

// DefaultSettle is MeasurePeak's: 5 to 15 rounds, the best FLOP/s and
// bandwidth each within 5% in 3 rounds, at most 12 s of rounds. A quiet
// machine settles in the first 5 rounds (about 5 s on the project's
// 2-core machine); in a busy spell the rounds go on, up to 12 s, for
// quiet moments.
var DefaultSettle = Settle{MinRounds: 5, MaxRounds: 15, Confirm: 3, Tolerance: 0.05, MaxTime: 12 * time.Second}

// FixedRounds is n rounds whatever they measure (Peak.Settled still
// says whether DefaultSettle's test passed): the repetition before
// Settle was 5 rounds, kept to compare against.
func FixedRounds(n int) Settle {
	s := DefaultSettle
	s.MinRounds, s.MaxRounds = n, n
	return s
}

// confirmed counts the values within tol of the largest.
func confirmed(v []float64, tol float64) int {
	if len(v) == 0 {
		return 0
	}
	best, n := slices.Max(v), 0
	for _, x := range v {
		if x >= best*(1-tol) {
			n++
		}
	}
	return n
}

// Sizes of the micro-benchmarks.
var (
	peakSizes      = []int{512, 1024}
	bandwidthElems = int64(16 << 20) // 64 MiB of float32 per tensor
	overheadOps    = 64
	peakRoundTime  = 200 * time.Millisecond
)

// MeasurePeak is MeasurePeakWith(ctx, o, DefaultSettle).
func MeasurePeak(ctx context.Context, o Options) (Peak, error) {
	return MeasurePeakWith(ctx, o, DefaultSettle)
}

// MeasurePeakWith times three kinds of model built here in ONNX Runtime
// at o.Threads: MatMuls of a few sizes (FLOP/s of the size with the best
// Best), a large Add (bytes/s) and a chain of tiny Adds (per-op
// overhead). Each gets o.Warmup untimed runs (0 means 3), then rounds,
// as many as st says, in which every benchmark runs at least o.Runs
// times (0 means 10) and for at least peakRoundTime, interleaved so that
// a burst of other work on the machine hits all of them alike. Profile
// and KeepOptimized are ignored.
func MeasurePeakWith(ctx context.Context, o Options, st Settle) (Peak, error) {
	if o.Warmup <= 0 {
		o.Warmup = 3
	}
	if o.Runs <= 0 {
		o.Runs = 10
	}
	o = o.withDefaults()
	o.Profile, o.KeepOptimized = false, false
	type bench struct {
		what   string
		model  []byte
		work   float64 // per run: FLOPs, bytes or ops
		s      *session
		rounds [][]float64
	}
	var benches []*bench
	for _, n := range peakSizes {
		benches = append(benches, &bench{what: fmt.Sprintf("the %d×%d MatMul", n, n), model: matMulModel(n), work: 2 * float64(n) * float64(n) * float64(n)})
	}
	benches = append(benches,
		&bench{what: "the bandwidth Add", model: addModel(bandwidthElems), work: 3 * 4 * float64(bandwidthElems)},
		&bench{what: "the overhead chain", model: chainModel(overheadOps), work: float64(overheadOps)})

	mu.Lock()
	defer mu.Unlock()
	defer func() {
		for _, b := range benches {
			if b.s != nil {
				b.s.close()
			}
		}
	}()
	for _, b := range benches {
		var err error
		if b.s, err = open(b.model, o); err != nil {
			return Peak{}, fmt.Errorf("%s: %w", b.what, err)
		}
		if _, err := b.s.time(ctx, o.Warmup); err != nil {
			return Peak{}, fmt.Errorf("%s: %w", b.what, err)
		}
	}
	runs := 0
	// roundBest is each round's fastest rate of benches[from:to].
	roundBest := func(from, to int) []float64 {
		var out []float64
		for r := range benches[from].rounds {
			best := 0.0
			for _, b := range benches[from:to] {
				best = max(best, b.work/(slices.Min(b.rounds[r])/1e3))
			}
			out = append(out, best)
		}
		return out
	}
	nMM := len(peakSizes)
	settled := func() bool {
		return confirmed(roundBest(0, nMM), st.Tolerance) >= st.Confirm && confirmed(roundBest(nMM, nMM+1), st.Tolerance) >= st.Confirm
	}
	began := time.Now()
	rounds := 0
	for rounds < max(st.MinRounds, 1) || rounds < st.MaxRounds && time.Since(began) < st.MaxTime && !settled() {
		rounds++
		for _, b := range benches {
			// At least o.Runs runs and peakRoundTime: short benchmarks
			// get more runs, and so more chances of one undisturbed.
			var round []float64
			for start := time.Now(); len(round) < o.Runs || time.Since(start) < peakRoundTime; {
				t, err := b.s.time(ctx, 1)
				if err != nil {
					return Peak{}, fmt.Errorf("%s: %w", b.what, err)
				}
				round = append(round, t...)
			}
			b.rounds = append(b.rounds, round)
			runs += len(round)
		}
	}
	// figure is the work per second of a benchmark's runs.
	figure := func(b *bench) Figure {
		var all []float64
		for _, r := range b.rounds {
			all = append(all, r...)
		}
		rate := func(ms float64) float64 { return b.work / (ms / 1e3) }
		return Figure{Median: rate(stats.Quantile(all, 0.5)), P10: rate(stats.Quantile(all, 0.9)), P90: rate(stats.Quantile(all, 0.1)), Best: rate(stats.Quantile(all, 0))}
	}
	p := Peak{Version: rt.GetVersion(), Library: initLib, Threads: o.Threads, BandwidthBytes: bandwidthElems * 4, OverheadOps: overheadOps,
		MatMulSizes: slices.Clone(peakSizes), Runs: runs, Rounds: rounds, Settled: settled(), RoundFLOPS: roundBest(0, nMM)}
	for i, n := range peakSizes {
		if f := figure(benches[i]); f.Best > p.FLOPS.Best {
			p.FLOPS, p.MatMulN = f, n
		}
	}
	p.Bandwidth = figure(benches[len(peakSizes)])
	// The overhead is a time: seconds per op, the inverse of the rate.
	ops := figure(benches[len(peakSizes)+1])
	p.Overhead = Figure{Median: 1 / ops.Median, P10: 1 / ops.P90, P90: 1 / ops.P10, Best: 1 / ops.Best}
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
