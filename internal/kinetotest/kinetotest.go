// Package kinetotest writes torch.profiler (Kineto) Chrome traces of one
// training step of a model, for tests of the trace import: no GPU was at
// hand to record a real one. The events have the names and fields Kineto
// writes (see profile/kineto.go): a ProfilerStep#N range, the forward's
// aten ops ("cat": "cpu_op") on the main thread, each launching its
// kernels with cudaLaunchKernel ("cat": "cuda_runtime", args.correlation)
// that run on a stream ("cat": "kernel", the same correlation), the loss,
// the backward functions ("autograd::engine::evaluate_function:
// ConvolutionBackward0", args "Sequence number" and "Fwd thread id") on
// the autograd thread in the order the engine runs them, AccumulateGrad
// per parameter, and Optimizer.step#Adam.step with foreach kernels.
//
// Each kernel's time comes from known efficiency constants (Constants),
// so a test can check that calibration recovers them.
package kinetotest

import (
	"encoding/json"
	"math"
	"math/rand"
	"strconv"
	"strings"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/profile"
)

// Constants are the achievable-speed constants the trace's kernel times
// are made from, the form profile.FamilyFit fits:
//
//	conv and matmul ops: max(FLOPs/(peak·ComputeEff·W/(W+ComputeHalf)), bytes/(bandwidth·MemoryEff)) + ComputeOverhead
//	other ops:           max(FLOPs/(peak·ComputeEff), bytes/(bandwidth·MemoryEff)) + MemoryOverhead
//	the optimizer:       the update ops' bytes/(bandwidth·MemoryEff), no overhead (foreach kernels)
type Constants struct {
	PeakFLOPS, Bandwidth      float64
	ComputeEff, ComputeHalf   float64
	ComputeOverhead           float64
	MemoryEff, MemoryOverhead float64
	// Noise, when positive, multiplies every kernel time by exp(N(0,
	// Noise²)), drawn from Seed.
	Noise float64
	Seed  int64
}

// OpTime is op id's kernel time in seconds under c; view ops have none.
func (c Constants) OpTime(g *graph.Graph, id graph.OpID) float64 {
	op := &g.Ops[id]
	fam := profile.Family(op.Type)
	w, b := float64(op.Work.FLOPs), float64(cost.BytesMoved(g, id))
	mem := b / (c.Bandwidth * c.MemoryEff)
	switch {
	case fam == profile.FamilyView:
		return 0
	case fam == profile.FamilyUpdate:
		return mem
	case profile.Group(fam) == profile.FamilyCompute:
		return max(w/(c.PeakFLOPS*c.ComputeEff*cost.Ramp(w, c.ComputeHalf)), mem) + c.ComputeOverhead
	}
	return max(w/(c.PeakFLOPS*c.ComputeEff), mem) + c.MemoryOverhead
}

// Trace is a generated trace and what it holds.
type Trace struct {
	JSON []byte
	// StepUS is one step's GPU kernel time, LossUS the part of it the loss
	// and its backward take (no op of the model computes them).
	StepUS, LossUS float64
	// OpUS is each training-graph op's kernel time in one step, by name
	// (the update ops' share of the optimizer's kernels: exactly their
	// own time, since the optimizer's time is the sum of theirs).
	OpUS map[string]float64
}

// lossUS is each of the loss's four kernels (forward two, backward two).
const lossUS = 3.5

type writer struct {
	events []map[string]any
	corr   int
	gpu    float64 // the stream's next free time
}

func (w *writer) cpu(cat, name string, tid int, ts, dur float64, args map[string]any) {
	e := map[string]any{"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": round3(ts), "dur": round3(dur)}
	if args != nil {
		e["args"] = args
	}
	w.events = append(w.events, e)
}

// launch records a cudaLaunchKernel at ts on tid and its kernel of us
// microseconds on stream 7.
func (w *writer) launch(tid int, ts, us float64, kernel string) {
	w.corr++
	w.cpu("cuda_runtime", "cudaLaunchKernel", tid, ts, 0.8, map[string]any{"External id": w.corr, "correlation": w.corr})
	start := max(w.gpu, ts+5)
	w.events = append(w.events, map[string]any{"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7,
		"ts": round3(start), "dur": round3(us), "args": map[string]any{"External id": w.corr, "correlation": w.corr, "stream": 7, "device": 0}})
	w.gpu = start + us
}

func round3(v float64) float64 { return math.Round(v*1e3) / 1e3 }

// names gives an ONNX op type's aten op, backward function and the
// backward's aten op, as PyTorch names them for torchvision's layers.
func names(opType string) (fwd, bwd, bwdAten string) {
	switch opType {
	case "Conv":
		return "aten::conv2d", "ConvolutionBackward0", "aten::convolution_backward"
	case "Relu":
		return "aten::relu_", "ReluBackward0", "aten::threshold_backward"
	case "MaxPool":
		return "aten::max_pool2d", "MaxPool2DWithIndicesBackward0", "aten::max_pool2d_with_indices_backward"
	case "Add":
		return "aten::add_", "AddBackward0", "aten::add"
	case "GlobalAveragePool":
		return "aten::adaptive_avg_pool2d", "MeanBackward1", "aten::div"
	case "Flatten":
		return "aten::flatten", "ViewBackward0", "aten::reshape"
	case "Gemm":
		return "aten::linear", "AddmmBackward0", "aten::mm"
	}
	return "aten::" + strings.ToLower(opType), opType + "Backward0", "aten::" + strings.ToLower(opType) + "_backward"
}

// TrainingStep writes steps profiled training steps of fwd, whose
// training step (train.Build with Adam) is tg, with kernel times from c.
func TrainingStep(fwd, tg *graph.Graph, c Constants, steps int) (*Trace, error) {
	rng := rand.New(rand.NewSource(c.Seed))
	noisy := func(s float64) float64 {
		if c.Noise > 0 {
			s *= math.Exp(c.Noise * rng.NormFloat64())
		}
		return s * 1e6
	}
	w := &writer{}
	tr := &Trace{OpUS: map[string]float64{}}
	var seq []graph.OpID
	for i := range fwd.Ops {
		if t := fwd.Ops[i].Type; t != "Identity" && t != "Constant" {
			seq = append(seq, graph.OpID(i))
		}
	}
	var updates []graph.OpID
	for i := range tg.Ops {
		if tg.Ops[i].Phase == graph.Update {
			updates = append(updates, graph.OpID(i))
		}
	}
	t := 1000.0
	for s := 1; s <= steps; s++ {
		stepStart := t
		stepIdx := len(w.events)
		w.cpu("user_annotation", "ProfilerStep#"+strconv.Itoa(s), 1, t, 0, nil)
		w.cpu("user_annotation", "Optimizer.zero_grad#Adam.zero_grad", 1, t+1, 3, nil)
		t += 5
		seqNr := 0
		record := func(name string, us float64) {
			if s == 1 {
				tr.OpUS[name] += us
			}
		}
		// Forward: one aten op per op, a conv's time in two kernels.
		for _, id := range seq {
			op := &fwd.Ops[id]
			fname, _, _ := names(op.Type)
			seqNr++
			w.cpu("cpu_op", fname, 1, t, 20, map[string]any{"External id": seqNr, "Sequence number": seqNr, "Fwd thread id": 0})
			if us := noisy(c.OpTime(tg, id)); us > 0 {
				record(op.Name, us)
				if op.Type == "Conv" {
					w.launch(1, t+2, 0.7*us, "cudnn_conv_kernel")
					w.launch(1, t+5, us-0.7*us, "bias_add_kernel")
				} else {
					w.launch(1, t+2, us, "kernel_"+op.Type)
				}
			}
			t += 21
		}
		w.cpu("cpu_op", "aten::cross_entropy_loss", 1, t, 20, nil)
		w.launch(1, t+2, lossUS, "log_softmax_kernel")
		w.launch(1, t+5, lossUS, "nll_loss_forward_kernel")
		t += 21
		// Backward, on the autograd thread, in reverse creation order.
		bwdFn := func(name, inner string, us float64, kernels bool) {
			seqNr++
			w.cpu("cpu_op", "autograd::engine::evaluate_function: "+name, 2, t, 30, map[string]any{"Sequence number": seqNr, "Fwd thread id": 1})
			w.cpu("cpu_op", name, 2, t+1, 28, map[string]any{"Sequence number": seqNr, "Fwd thread id": 1})
			w.cpu("cpu_op", inner, 2, t+2, 20, nil)
			if kernels && us > 0 {
				w.launch(2, t+3, us, "kernel_"+name)
			}
			t += 31
		}
		bwdFn("NllLossBackward0", "aten::nll_loss_backward", lossUS, true)
		bwdFn("LogSoftmaxBackward0", "aten::_log_softmax_backward_data", lossUS, true)
		for i := len(seq) - 1; i >= 0; i-- {
			op := &fwd.Ops[seq[i]]
			gid, ok := tg.OpByName(op.Name + "/grad")
			if !ok {
				continue
			}
			_, bname, inner := names(op.Type)
			us := noisy(c.OpTime(tg, gid))
			if us > 0 {
				record(tg.Ops[gid].Name, us)
			}
			bwdFn(bname, inner, us, true)
			if op.Type == "Gemm" {
				bwdFn("TBackward0", "aten::t", 0, false)
			}
			for _, in := range op.Inputs {
				if fwd.Tensors[in].Kind == graph.Parameter {
					bwdFn("torch::autograd::AccumulateGrad", "aten::detach", 0, false)
				}
			}
		}
		// The optimizer: four foreach kernels sharing the updates' time.
		var optUS float64
		for _, id := range updates {
			us := noisy(c.OpTime(tg, id))
			record(tg.Ops[id].Name, us)
			optUS += us
		}
		w.cpu("user_annotation", "Optimizer.step#Adam.step", 1, t, 100, nil)
		for j, k := range []string{"aten::_foreach_mul_", "aten::_foreach_add_", "aten::_foreach_addcmul_", "aten::_foreach_addcdiv_"} {
			w.cpu("cpu_op", k, 1, t+1+20*float64(j), 18, nil)
			w.launch(1, t+2+20*float64(j), optUS/4, "multi_tensor_apply_kernel")
		}
		t += 101
		t = max(t, w.gpu) + 10
		w.events[stepIdx]["dur"] = round3(t - stepStart)
		t += 50
	}
	for _, us := range tr.OpUS {
		tr.StepUS += us
	}
	tr.LossUS = 4 * lossUS
	tr.StepUS += tr.LossUS
	data, err := json.Marshal(map[string]any{"schemaVersion": 1, "traceEvents": w.events})
	if err != nil {
		return nil, err
	}
	tr.JSON = data
	return tr, nil
}
