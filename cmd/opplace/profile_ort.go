package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/opplace/opplace/internal/ort"
	"github.com/opplace/opplace/profile/driver"
)

// Values of --runtime.
const (
	runtimeAuto        = "auto"
	runtimeGorgonia    = driver.RuntimeGorgonia
	runtimeONNXRuntime = driver.RuntimeONNXRuntime
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

// printORTRun says what the ONNX Runtime run measured, as far as it got:
// the model's runs, the peak (warning when the machine was busy or the
// peak did not settle), and how the trace mapped.
func printORTRun(w, stderr io.Writer, modelPath string, r *driver.ORTRun) {
	res := r.Run
	if res == nil {
		return
	}
	fmt.Fprintf(w, "ran %s in ONNX Runtime %s (intra-op threads: %d, %s): median %.3f ms, p10 %.3f, p90 %.3f over %d runs\n",
		modelPath, res.Version, res.Threads, res.Library, res.MedianMS, res.P10MS, res.P90MS, len(res.TimesMS))
	if r.Peak == nil {
		return
	}
	peak, cpu, dt := r.Peak, r.CPU, r.DeviceType
	if r.Busy() {
		fmt.Fprintf(stderr, "warning: the machine is busy (load average %.1f on %d logical cores): other processes slow the runs, so the times and the peak can move by tens of per cent between measurements; measure on an idle machine\n",
			cpu.LoadAverage, cpu.LogicalCores)
	}
	fmt.Fprintf(w, "peak at threads %d (fastest runs; median, p10-p90 spread): %.3g FLOP/s (%d² MatMul; %.3g, %.0f%%; theoretical %.3g), bandwidth %.3g B/s (%.3g, %.0f%%), overhead %.3g us per op (%.3g, %.0f%%)\n",
		res.Threads, dt.PeakFLOPS, peak.MatMulN, peak.FLOPS.Median, 100*peak.FLOPS.Spread(), cpu.PeakPerThread*float64(res.Threads),
		dt.MemoryBandwidth, peak.Bandwidth.Median, 100*peak.Bandwidth.Spread(), dt.LaunchOverhead*1e6, peak.Overhead.Median*1e6, 100*peak.Overhead.Spread())
	fmt.Fprintf(w, "peak over %d rounds (rounds' fastest FLOP/s spread %.0f%%)\n", peak.Rounds, 100*peak.RoundSpread())
	if !peak.Settled {
		fmt.Fprintf(stderr, "warning: the peak did not settle: in %d rounds the fastest FLOP/s or bandwidth was not reached again within %.0f%% by %d rounds; other work is slowing this machine, so the roofline may be low: measure again when it is quieter\n",
			peak.Rounds, 100*ort.DefaultSettle.Tolerance, ort.DefaultSettle.Confirm)
	}
	if r.Imported != nil {
		printImport(w, stderr, "trace", r.Imported)
	}
}
