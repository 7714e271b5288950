package profile

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// A torch.profiler trace with the CUDA activity on is Kineto's Chrome
// trace. The events read here, with the names and fields Kineto writes
// (pytorch/kineto libkineto/src/output_json.cpp; an excerpt of a real
// trace is in mlcommons/chakra's wiki, and HolisticTraceAnalysis reads the
// same fields):
//
//   - "cat": "cpu_op", "name": "aten::conv2d": an aten op on a CPU
//     thread ("tid"), "ts" and "dur" in microseconds;
//   - "cat": "cuda_runtime" (or "cuda_driver"), "name":
//     "cudaLaunchKernel": a launch, inside the aten op that made it on
//     the same thread, with "args": {"correlation": N};
//   - "cat": "kernel", "gpu_memcpy", "gpu_memset": what ran on the GPU
//     (a stream's "tid"), "args": {"correlation": N} naming its launch;
//   - "name": "ProfilerStep#N" (cat "user_annotation" or "cpu_op"): one
//     profiler step, the run;
//   - in a training step, "cat": "cpu_op", "name":
//     "autograd::engine::evaluate_function: ConvolutionBackward0": one
//     backward function, on the autograd engine's thread, with its aten
//     ops (aten::convolution_backward) inside; args carry "Sequence
//     number" and "Fwd thread id";
//   - "name": "Optimizer.step#Adam.step" and
//     "Optimizer.zero_grad#Adam.zero_grad" (torch.optim's
//     record_function ranges) around the optimizer's aten ops
//     (aten::_foreach_*).

// Kineto names.
const (
	backwardPrefix  = "autograd::engine::evaluate_function: "
	accumulateGrad  = "torch::autograd::AccumulateGrad"
	optimizerStep   = "Optimizer.step#"
	optimizerZero   = "Optimizer.zero_grad#"
	profilerStepPfx = "ProfilerStep#"
)

// kinetoEv is one complete event of a Kineto trace.
type kinetoEv struct {
	name    string
	ts, dur float64
	tid     string
	corr    float64
}

// kinetoTrace is a trace's runs, CPU-side ops and ranges, and GPU time.
type kinetoTrace struct {
	// ranges are the runs (model_run, ProfilerStep#N), by start.
	ranges []kinetoEv
	// ops are the aten ops; spans the backward functions and optimizer
	// ranges of a training step.
	ops, spans []kinetoEv
	// launches are runtime calls with a correlation id, by start.
	launches []kinetoEv
	// gpu is the GPU time (µs) of each correlation id's kernels.
	gpu map[float64]float64
}

// isSpan reports whether a name is a training step's backward function
// or optimizer range.
func isSpan(name string) bool {
	return strings.HasPrefix(name, backwardPrefix) || strings.HasPrefix(name, optimizerStep) || strings.HasPrefix(name, optimizerZero)
}

func readKineto(events []traceEvent) *kinetoTrace {
	k := &kinetoTrace{gpu: map[float64]float64{}}
	for _, e := range events {
		if e.Dur == nil || e.Ts == nil || (e.Ph != "" && e.Ph != "X") || *e.Dur < 0 {
			continue
		}
		x := kinetoEv{e.Name, *e.Ts, *e.Dur, fmt.Sprint(e.Pid, "/", e.Tid), 0}
		corr, hasCorr := e.Args["correlation"].(float64)
		switch {
		case e.Cat == "kernel" || e.Cat == "gpu_memcpy" || e.Cat == "gpu_memset":
			if hasCorr {
				k.gpu[corr] += *e.Dur
			}
		case e.Cat == "cuda_runtime" || e.Cat == "cuda_driver":
			if hasCorr {
				x.corr = corr
				k.launches = append(k.launches, x)
			}
		case e.Cat == "gpu_user_annotation":
		case e.Name == "model_run" || strings.HasPrefix(e.Name, profilerStepPfx):
			k.ranges = append(k.ranges, x)
		case isSpan(e.Name):
			k.spans = append(k.spans, x)
		case strings.HasPrefix(e.Name, "aten::"):
			k.ops = append(k.ops, x)
		}
	}
	byStart := func(a, b kinetoEv) int {
		if a.ts != b.ts {
			return cmp.Compare(a.ts, b.ts)
		}
		return cmp.Compare(b.dur, a.dur)
	}
	slices.SortStableFunc(k.ops, byStart)
	slices.SortStableFunc(k.spans, byStart)
	slices.SortStableFunc(k.ranges, byStart)
	slices.SortStableFunc(k.launches, byStart)
	return k
}

// training reports whether the trace has a backward pass.
func (k *kinetoTrace) training() bool {
	return slices.ContainsFunc(k.spans, func(s kinetoEv) bool { return strings.HasPrefix(s.name, backwardPrefix) })
}

// time is an event's time: with GPU kernels in the trace, that of the
// kernels the runtime calls inside it on its thread launched (matched by
// correlation id); its own duration then times the launches. Without,
// its CPU duration.
func (k *kinetoTrace) time(e kinetoEv) float64 {
	if len(k.gpu) == 0 {
		return e.dur
	}
	var t float64
	j, _ := slices.BinarySearchFunc(k.launches, e.ts, func(l kinetoEv, ts float64) int { return cmp.Compare(l.ts, ts) })
	for ; j < len(k.launches) && k.launches[j].ts < e.ts+e.dur; j++ {
		if k.launches[j].tid == e.tid {
			t += k.gpu[k.launches[j].corr]
		}
	}
	return t
}

// topOps is the aten ops inside no other aten op on their thread, and
// with outside no backward function or optimizer range either, timed.
func (k *kinetoTrace) topOps(outsideSpans bool) []kinetoEv {
	end := map[string]float64{}
	spanEnd := map[string]float64{}
	si := 0
	var top []kinetoEv
	for _, o := range k.ops {
		if outsideSpans {
			// Spans on one thread do not nest (one backward function
			// at a time), so the latest started one is the one to test.
			for ; si < len(k.spans) && k.spans[si].ts <= o.ts; si++ {
				s := k.spans[si]
				spanEnd[s.tid] = max(spanEnd[s.tid], s.ts+s.dur)
			}
			if o.ts < spanEnd[o.tid] {
				continue
			}
		}
		if e, ok := end[o.tid]; ok && o.ts < e {
			continue
		}
		end[o.tid] = o.ts + o.dur
		top = append(top, o)
	}
	for i := range top {
		top[i].dur = k.time(top[i])
	}
	return top
}

// split puts timed events in their runs, in order; without runs they
// are one. Runs with no event are dropped.
func (k *kinetoTrace) split(evs []kinetoEv) [][]atenOp {
	if len(k.ranges) == 0 {
		run := make([]atenOp, 0, len(evs))
		for _, o := range evs {
			run = append(run, atenOp{o.name, o.dur})
		}
		return [][]atenOp{run}
	}
	runs := make([][]atenOp, len(k.ranges))
	for _, o := range evs {
		if r := k.runOf(o.ts); r >= 0 {
			runs[r] = append(runs[r], atenOp{o.name, o.dur})
		}
	}
	return slices.DeleteFunc(runs, func(r []atenOp) bool { return len(r) == 0 })
}

// runOf is the index of the run whose range holds ts, -1 when none.
func (k *kinetoTrace) runOf(ts float64) int {
	for i, r := range k.ranges {
		if ts >= r.ts && ts < r.ts+r.dur {
			return i
		}
	}
	return -1
}

// gpuTotal is the GPU time (µs) of the kernels launched inside the runs
// (all of them when the trace has no runs), what a mapping's share is a
// share of.
func (k *kinetoTrace) gpuTotal() float64 {
	var t float64
	if len(k.ranges) == 0 {
		// In correlation order, so the sum is the same every run.
		ids := make([]float64, 0, len(k.gpu))
		for c := range k.gpu {
			ids = append(ids, c)
		}
		slices.Sort(ids)
		for _, c := range ids {
			t += k.gpu[c]
		}
		return t
	}
	seen := map[float64]bool{}
	for _, l := range k.launches {
		if !seen[l.corr] && k.runOf(l.ts) >= 0 {
			seen[l.corr] = true
			t += k.gpu[l.corr]
		}
	}
	return t
}
