package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/files"
	"github.com/opplace/opplace/internal/machine"
	"github.com/opplace/opplace/internal/ort"
	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/profile"
)

// Values of --runtime.
const (
	runtimeAuto        = "auto"
	runtimeGorgonia    = "gorgonia"
	runtimeONNXRuntime = "onnxruntime"
)

// resolveRuntime picks what --runtime auto measures with: ONNX Runtime
// when its library is found (or its own flags are given), since its times
// are those of a deployed model; gorgonia when nothing is measured, for
// --max-time (gorgonia's per-op bound), or when no library is found.
// find is ort.Find. A library named but missing ($OPPLACE_ONNXRUNTIME) is
// an error, not a fall-back: the user asked for it. fellBack reports a
// fall-back for want of a library.
func resolveRuntime(f *profileFlags, measuring bool, find func(string) (string, error)) (runtime string, fellBack bool, err error) {
	switch {
	case f.runtime != runtimeAuto:
		return f.runtime, false, nil
	case !measuring || f.maxTime > 0:
		return runtimeGorgonia, false, nil
	case f.ortLib != "" || f.keepTrace != "" || f.keepOptimized != "":
		return runtimeONNXRuntime, false, nil
	}
	_, err = find("")
	var nf *ort.NotFoundError
	switch {
	case err == nil:
		return runtimeONNXRuntime, false, nil
	case errors.As(err, &nf) && nf.Explicit == "":
		return runtimeGorgonia, true, nil
	}
	return "", false, usageError{fmt.Errorf("--runtime auto: %w", err)}
}

// ortProfile is what profile --runtime onnxruntime made.
type ortProfile struct {
	profile   *profile.Profile
	trace     []byte // ONNX Runtime's profiling JSON of the timed runs
	optimized []byte // the optimized model, weights stripped
	peak      ort.Peak
}

// profileONNXRuntime runs the model in ONNX Runtime (weights made up by
// onnx.Runnable, inputs bound by the dimension flags) with profiling,
// measures the CPU's roofline at the same thread count, and turns the
// trace into a profile of device type dtName.
func profileONNXRuntime(ctx context.Context, w, stderr io.Writer, modelPath string, g *graph.Graph, opts onnx.Options, f *profileFlags, dtName string) (*ortProfile, error) {
	lib, err := ort.Find(f.ortLib)
	if err != nil {
		return nil, usageError{fmt.Errorf("--runtime onnxruntime: %w (--onnxruntime-lib PATH names the file)", err)}
	}
	if pipeline.IsStream(modelPath) {
		return nil, &pipeline.InputError{Err: fmt.Errorf("%s: --runtime onnxruntime reads the model a second time to run it, which a pipe or device cannot give; give the model as a file", modelPath)}
	}
	data, err := files.ReadFile(modelPath)
	if err != nil {
		return nil, &pipeline.InputError{Err: err}
	}
	model, err := onnx.Runnable(data, onnx.RunnableOptions{Options: opts, Seed: 1})
	if err != nil {
		return nil, &pipeline.InputError{Err: fmt.Errorf("%s: %w", modelPath, err)}
	}
	data = nil
	o := ort.Options{Library: lib, Threads: max(f.threads, 1), Warmup: f.warmup, Runs: f.runs, Profile: true, KeepOptimized: true, Seed: 1}
	res, err := ort.Run(ctx, model, o)
	var re *ort.RunError
	switch {
	case errors.As(err, &re):
		return nil, &pipeline.InputError{Err: fmt.Errorf("%s: %w", modelPath, err)}
	case err != nil:
		return nil, err
	}
	model = nil
	fmt.Fprintf(w, "ran %s in ONNX Runtime %s (intra-op threads: %d, %s): median %.3f ms, p10 %.3f, p90 %.3f over %d runs\n",
		modelPath, res.Version, res.Threads, res.Library, res.MedianMS, res.P10MS, res.P90MS, len(res.TimesMS))

	peak, err := ort.MeasurePeak(ctx, ort.Options{Library: lib, Threads: res.Threads})
	if err != nil {
		return nil, fmt.Errorf("measuring the CPU's peak in ONNX Runtime: %w", err)
	}
	cpu := machine.CPU()
	if cpu.LoadAverage >= float64(cpu.LogicalCores) {
		fmt.Fprintf(stderr, "warning: the machine is busy (load average %.1f on %d logical cores): other processes slow the runs, so the times and the peak can move by tens of per cent between measurements; measure on an idle machine\n",
			cpu.LoadAverage, cpu.LogicalCores)
	}
	dt := profile.DeviceType{
		Name:            dtName,
		Description:     fmt.Sprintf("%s; ONNX Runtime %s, threads: %d", cpu.Description(), res.Version, res.Threads),
		PeakFLOPS:       peak.FLOPS.Best,
		MemoryBandwidth: peak.Bandwidth.Best,
		LaunchOverhead:  peak.Overhead.Best,
		Memory:          machine.AvailableMemory(),
		Threads:         res.Threads,
	}
	fmt.Fprintf(w, "peak at threads %d (fastest runs; median, p10-p90 spread): %.3g FLOP/s (%d² MatMul; %.3g, %.0f%%; theoretical %.3g), bandwidth %.3g B/s (%.3g, %.0f%%), overhead %.3g us per op (%.3g, %.0f%%)\n",
		res.Threads, dt.PeakFLOPS, peak.MatMulN, peak.FLOPS.Median, 100*peak.FLOPS.Spread(), cpu.PeakPerThread*float64(res.Threads),
		dt.MemoryBandwidth, peak.Bandwidth.Median, 100*peak.Bandwidth.Spread(), dt.LaunchOverhead*1e6, peak.Overhead.Median*1e6, 100*peak.Overhead.Spread())
	fmt.Fprintf(w, "peak over %d rounds (rounds' fastest FLOP/s spread %.0f%%)\n", peak.Rounds, 100*peak.RoundSpread())
	if !peak.Settled {
		fmt.Fprintf(stderr, "warning: the peak did not settle: in %d rounds the fastest FLOP/s or bandwidth was not reached again within %.0f%% by %d rounds; other work is slowing this machine, so the roofline may be low: measure again when it is quieter\n",
			peak.Rounds, 100*ort.DefaultSettle.Tolerance, ort.DefaultSettle.Confirm)
	}

	imp, err := profile.ImportWith(modelPath, res.Trace, g, dt, profile.ImportOptions{Optimized: res.Optimized, OptimizedName: "the optimized model ONNX Runtime wrote"})
	if err != nil {
		return nil, fmt.Errorf("ONNX Runtime's trace of %s: %w", modelPath, err)
	}
	p := imp.Profile
	p.Runtime = &profile.RuntimeInfo{
		Name: runtimeONNXRuntime, Version: res.Version, Library: res.Library, Threads: res.Threads,
		ModelMedianMS: res.MedianMS, ModelP10MS: res.P10MS, ModelP90MS: res.P90MS, Runs: len(res.TimesMS),
	}
	printImport(w, stderr, "trace", imp)
	return &ortProfile{profile: p, trace: res.Trace, optimized: res.Optimized, peak: peak}, nil
}

// ortClusterSource is the comment a --cluster-out file of an ONNX
// Runtime profile starts with.
func ortClusterSource(r *ortProfile) string {
	pk := r.peak
	return fmt.Sprintf(`# peak_flops is the best of %v float32 MatMuls, memory_bandwidth an Add of
# %d MiB tensors (read + write), launch_overhead a chain of %d one-element
# Adds; each the fastest of its runs (%d runs in all; the machine's
# undisturbed figure: other processes only slow runs down).
# Source: ONNX Runtime %s, intra-op threads: %d (%s).`,
		pk.MatMulSizes, pk.BandwidthBytes>>20, pk.OverheadOps, pk.Runs, pk.Version, pk.Threads, pk.Library)
}
