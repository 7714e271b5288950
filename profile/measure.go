package profile

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/machine"
	"github.com/opplace/opplace/internal/progress"
)

// SourceGorgonia marks profiles measured by Measure.
const SourceGorgonia = "gorgonia"

// DefaultCPUType names this machine's CPU device type in profiles and
// cluster files unless the user names it.
const DefaultCPUType = "local-cpu"

// MeasureOptions controls Measure.
type MeasureOptions struct {
	// DeviceType names the measured device type; "" means DefaultCPUType.
	DeviceType string
	// Warmup runs are discarded; up to Runs are timed, fewer (but at
	// least MinRuns) when an op's timed runs pass OpBudget. Zeros mean 2,
	// 10, 3 and 250 ms.
	Warmup, Runs, MinRuns int
	OpBudget              time.Duration
	// MaxTime bounds the whole measurement; ops not reached are left
	// unmeasured (they keep the model's estimate). Zero means no bound.
	MaxTime time.Duration
	// CPU is the device type to record; nil means MeasureCPU's result.
	CPU *DeviceType
	// Progress, if set, is called before each distinct op is measured
	// and once at the end (done == total).
	Progress func(done, total int, op string)
}

// MeasureResult is a measured profile with what could not be measured.
type MeasureResult struct {
	Profile *Profile
	// Distinct is the number of distinct (type, shapes, attributes) keys
	// among the kernel-launching ops; Measured how many ran.
	Distinct, Measured int
	// TimedOut counts keys left unmeasured when MaxTime ran out.
	TimedOut int
}

// Measure runs every distinct op of g (by OpKey) on this machine's CPU
// with gorgonia kernels: Warmup untimed runs, then Runs timed ones, and
// records the median, 10th and 90th percentile for every op with that key.
// View ops (Reshape, Constant, ...) launch no kernel and are skipped; ops
// gorgonia has no kernel for are listed in Profile.Unsupported.
func Measure(ctx context.Context, g *graph.Graph, opts MeasureOptions) (*MeasureResult, error) {
	if opts.Warmup <= 0 {
		opts.Warmup = 2
	}
	if opts.Runs <= 0 {
		opts.Runs = 10
	}
	if opts.MinRuns <= 0 {
		opts.MinRuns = 3
	}
	opts.MinRuns = min(opts.MinRuns, opts.Runs)
	if opts.OpBudget <= 0 {
		opts.OpBudget = 250 * time.Millisecond
	}
	name := opts.DeviceType
	if name == "" {
		name = DefaultCPUType
	}
	cpu := opts.CPU
	if cpu == nil {
		c := MeasureCPU()
		cpu = &c
	}
	dt := *cpu
	dt.Name = name
	start := time.Now()

	var keys []string
	byKey := map[string][]graph.OpID{}
	for i := range g.Ops {
		if Family(g.Ops[i].Type) == FamilyView {
			continue
		}
		k := OpKey(g, graph.OpID(i))
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], graph.OpID(i))
	}
	res := &MeasureResult{Distinct: len(keys)}
	p := &Profile{Format: FormatVersion, Source: SourceGorgonia, Batch: g.Batch(), DeviceTypes: []DeviceType{dt}}
	unsup := map[string]*Unsupported{}
	task := progress.From(ctx).Start("profile: measuring ops", int64(len(keys)))
	defer task.Done()
	for n, k := range keys {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		task.Set(int64(n))
		ids := byKey[k]
		first := &g.Ops[ids[0]]
		if opts.Progress != nil {
			opts.Progress(n, len(keys), first.Type+" "+first.Name)
		}
		if opts.MaxTime > 0 && time.Since(start) > opts.MaxTime {
			res.TimedOut = len(keys) - n
			break
		}
		times, err := timeOp(g, ids[0], opts)
		if err != nil {
			var u errUnsupported
			if !errors.As(err, &u) {
				return nil, fmt.Errorf("op %q (%s): %w", first.Name, first.Type, err)
			}
			e := unsup[first.Type]
			if e == nil {
				e = &Unsupported{Type: first.Type, Reason: u.reason}
				unsup[first.Type] = e
			}
			e.Count += len(ids)
			continue
		}
		res.Measured++
		med, p10, p90 := round6(median(times)), round6(quantile(times, 0.1)), round6(quantile(times, 0.9))
		for _, id := range ids {
			p.Ops = append(p.Ops, Measurement{
				Name: g.Ops[id].Name, Key: k, Type: g.Ops[id].Type, Shapes: Shapes(g, id), DeviceType: name, Threads: dt.Threads,
				MedianMS: med, P10MS: p10, P90MS: p90, Runs: len(times),
			})
		}
	}
	if opts.Progress != nil {
		opts.Progress(len(keys), len(keys), "")
	}
	for _, u := range unsup {
		p.Unsupported = append(p.Unsupported, *u)
	}
	FillFeatures(p, g)
	p.Sort()
	res.Profile = p
	return res, nil
}

// timeOp builds op's kernel and times runs of it, in milliseconds. A
// warm-up run slower than the budget is the only warm-up: a kernel that
// long is not dominated by cold caches.
func timeOp(g *graph.Graph, id graph.OpID, opts MeasureOptions) ([]float64, error) {
	k, err := buildKernel(g, id)
	if err != nil {
		return nil, err
	}
	defer k.close()
	for i := range opts.Warmup {
		t0 := time.Now()
		if err := k.run(); err != nil {
			return nil, unsupported("gorgonia: %v", err)
		}
		if i == 0 && time.Since(t0) > opts.OpBudget {
			break
		}
	}
	var times []float64
	var spent time.Duration
	for len(times) < opts.Runs && (len(times) < opts.MinRuns || spent < opts.OpBudget) {
		t0 := time.Now()
		if err := k.run(); err != nil {
			return nil, unsupported("gorgonia: %v", err)
		}
		d := time.Since(t0)
		spent += d
		times = append(times, float64(d.Nanoseconds())/1e6)
	}
	return times, nil
}

// MeasureCPU estimates this machine's CPU as a roofline device type:
// peak float32 FLOP/s from a 512×512 GEMM through gonum's BLAS (the
// library Measure's MatMul and Conv kernels call), memory bandwidth from
// copying a 64 MiB buffer (read plus write), and launch overhead from the
// median run of a one-element gorgonia Add.
//
// Peak and bandwidth are capabilities, and noise from other processes
// only ever slows a run, so each is the fastest tenth (10th percentile)
// of at least 30 runs over at least a second, after warm-up. Measured
// here: five processes' medians moved by 20%, their 10th percentiles by
// under 3% (one thread: 1%); best-of-six, what this did before, moved by
// a factor of two. PeakSpread keeps how far the GEMM's runs spread.
func MeasureCPU() DeviceType {
	dt := DeviceType{Name: DefaultCPUType, Description: cpuModel()}
	// GEMM.
	const n = 512
	mk := func() blas32.General {
		d := make([]float32, n*n)
		for i := range d {
			d[i] = float32(i%7) / 7
		}
		return blas32.General{Rows: n, Cols: n, Stride: n, Data: d}
	}
	a, b, c := mk(), mk(), mk()
	if ts, err := repeat(func() error { blas32.Gemm(blas.NoTrans, blas.NoTrans, 1, a, b, 0, c); return nil }, 30, time.Second); err == nil {
		dt.PeakFLOPS = sig(2 * n * n * n / quantile(ts, 0.1))
		dt.PeakSpread = round4((quantile(ts, 0.9) - quantile(ts, 0.1)) / median(ts))
	}
	// Copy loop.
	const words = 16 << 20 // 64 MiB of float32
	src, dst := make([]float32, words), make([]float32, words)
	for i := range src {
		src[i] = float32(i)
	}
	if ts, err := repeat(func() error { copy(dst, src); return nil }, 30, time.Second); err == nil {
		dt.MemoryBandwidth = sig(2 * 4 * words / quantile(ts, 0.1))
	}
	// Launch: the smallest op.
	eg := G.NewGraph()
	x := input(eg, tensor.Shape{1}, "x")
	y := input(eg, tensor.Shape{1}, "y")
	if _, err := G.Add(x, y); err == nil {
		m := G.NewTapeMachine(eg)
		if ts, err := repeat(func() error { defer m.Reset(); return m.RunAll() }, 200, 0); err == nil {
			dt.LaunchOverhead = sig(median(ts))
		}
		m.Close()
	}
	dt.Memory = machine.TotalMemory()
	return dt
}

// repeat runs f twice untimed, then times it until it has run at least
// minRuns times and minTime has passed, and returns the times in
// seconds.
func repeat(f func() error, minRuns int, minTime time.Duration) ([]float64, error) {
	for range 2 {
		if err := f(); err != nil {
			return nil, err
		}
	}
	var ts []float64
	start := time.Now()
	for len(ts) < minRuns || time.Since(start) < minTime {
		t0 := time.Now()
		if err := f(); err != nil {
			return nil, err
		}
		ts = append(ts, time.Since(t0).Seconds())
	}
	return ts, nil
}

// cpuModel describes the CPU gorgonia measured on.
func cpuModel() string {
	name := machine.CPU().Model
	if name == "" {
		name = "unknown CPU"
	}
	return fmt.Sprintf("%s, %d threads (GOMAXPROCS %d), gorgonia v0.9.18 kernels", name, runtime.NumCPU(), runtime.GOMAXPROCS(0))
}
