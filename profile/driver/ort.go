package driver

import (
	"context"
	"errors"
	"fmt"
	"github.com/opplace/opplace/internal/files"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/machine"
	"github.com/opplace/opplace/internal/ort"
	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/profile"
)

// ORTRun is a model's run in ONNX Runtime, filled step by step: Run (the
// timed runs), then Peak and CPU (the roofline measured in ONNX Runtime at
// the same thread count), then Imported (the trace mapped to the model's
// ops, as a profile of DeviceType).
type ORTRun struct {
	Run        *ort.Result
	Peak       *ort.Peak
	CPU        machine.CPUInfo
	DeviceType profile.DeviceType
	Imported   *profile.ImportResult
}

// LibraryError says ONNX Runtime's shared library was not found.
type LibraryError struct{ Err error }

func (e *LibraryError) Error() string { return "ONNX Runtime: " + e.Err.Error() }

// Unwrap returns the error ort.Find gave.
func (e *LibraryError) Unwrap() error { return e.Err }

// Busy reports whether the machine was busy when the roofline was measured
// (load average at or above its logical cores): the times and the peak
// can then move by tens of per cent between measurements.
func (r *ORTRun) Busy() bool { return r.CPU.LoadAverage >= float64(r.CPU.LogicalCores) }

// runORT runs the model in ONNX Runtime (weights made up by
// onnx.Runnable, inputs bound by o.Import) with profiling, measures the
// CPU's roofline at the same thread count, and turns the trace into a
// profile of device type dtName, filling r as it goes.
func runORT(ctx context.Context, o Options, g *graph.Graph, dtName string, r *ORTRun) error {
	lib, err := ort.Find(o.ORTLibrary)
	if err != nil {
		return &LibraryError{err}
	}
	if pipeline.IsStream(o.Model) {
		return &pipeline.InputError{Err: fmt.Errorf("%s: running the model in ONNX Runtime reads it a second time, which a pipe or device cannot give; give the model as a file", o.Model)}
	}
	data, err := files.ReadFile(o.Model)
	if err != nil {
		return &pipeline.InputError{Err: err}
	}
	model, err := onnx.Runnable(data, onnx.RunnableOptions{Options: o.Import, Seed: 1})
	if err != nil {
		return &pipeline.InputError{Err: fmt.Errorf("%s: %w", o.Model, err)}
	}
	data = nil
	opts := ort.Options{Library: lib, Threads: max(o.Threads, 1), Warmup: o.Warmup, Runs: o.Runs, Profile: true, KeepOptimized: true, Seed: 1}
	res, err := ort.Run(ctx, model, opts)
	var re *ort.RunError
	switch {
	case errors.As(err, &re):
		return &pipeline.InputError{Err: fmt.Errorf("%s: %w", o.Model, err)}
	case err != nil:
		return err
	}
	model = nil
	r.Run = res

	peak, err := ort.MeasurePeak(ctx, ort.Options{Library: lib, Threads: res.Threads})
	if err != nil {
		return fmt.Errorf("measuring the CPU's peak in ONNX Runtime: %w", err)
	}
	r.Peak = &peak
	r.CPU = machine.CPU()
	r.DeviceType = profile.DeviceType{
		Name:            dtName,
		Description:     fmt.Sprintf("%s; ONNX Runtime %s, threads: %d", r.CPU.Description(), res.Version, res.Threads),
		PeakFLOPS:       peak.FLOPS.Best,
		MemoryBandwidth: peak.Bandwidth.Best,
		LaunchOverhead:  peak.Overhead.Best,
		Memory:          machine.AvailableMemory(),
		Threads:         res.Threads,
	}

	imp, err := profile.ImportWith(o.Model, res.Trace, g, r.DeviceType, profile.ImportOptions{Optimized: res.Optimized, OptimizedName: "the optimized model ONNX Runtime wrote"})
	if err != nil {
		return fmt.Errorf("ONNX Runtime's trace of %s: %w", o.Model, err)
	}
	imp.Profile.Runtime = &profile.RuntimeInfo{
		Name: RuntimeONNXRuntime, Version: res.Version, Library: res.Library, Threads: res.Threads,
		ModelMedianMS: res.MedianMS, ModelP10MS: res.P10MS, ModelP90MS: res.P90MS, Runs: len(res.TimesMS),
	}
	r.Imported = imp
	return nil
}

// clusterSource is the comment a cluster file of an ONNX Runtime
// measurement starts with.
func (r *ORTRun) clusterSource() string {
	pk := r.Peak
	return fmt.Sprintf(`# peak_flops is the best of %v float32 MatMuls, memory_bandwidth an Add of
# %d MiB tensors (read + write), launch_overhead a chain of %d one-element
# Adds; each the fastest of its runs (%d runs in all; the machine's
# undisturbed figure: other processes only slow runs down).
# Source: ONNX Runtime %s, intra-op threads: %d (%s).`,
		pk.MatMulSizes, pk.BandwidthBytes>>20, pk.OverheadOps, pk.Runs, pk.Version, pk.Threads, pk.Library)
}
