// Package driver runs the profile workflow as a library: it measures a
// model's ops on this machine's CPU (gorgonia per distinct op, or the
// whole model in ONNX Runtime), imports a trace taken elsewhere, or
// re-reads a profile; calibrates the roofline to the measurements; and
// pools several models' profiles into one calibration (Pool). The opplace
// profile command parses its flags into Options, calls Run or Pool, prints
// the Result and writes the files; a Go program does the same without it.
//
// A Result is filled as the work goes: on an error it holds what was done
// before it (the ONNX Runtime run before its peak failed, the device
// types calibrated before one failed), so a caller can still report it.
package driver

import (
	"context"
	"fmt"
	"time"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/files"
	"github.com/opplace/opplace/internal/importopt"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/profile"
	"github.com/opplace/opplace/train"
)

// What measures a model (Options.Runtime).
const (
	RuntimeGorgonia    = "gorgonia"
	RuntimeONNXRuntime = "onnxruntime"
)

// ModelLoader imports a model file; pipeline.LoadModel is the default.
type ModelLoader func(path string, opts importopt.Options) (*pipeline.Model, error)

// Options say where a profile's times come from: a trace (Trace), a
// profile re-read (From), or else a measurement on this machine's CPU
// with Runtime. At most one of Trace and From is set.
type Options struct {
	// Model is the model file the times are for; Import binds its
	// run-time dimensions.
	Model  string
	Import importopt.Options
	// DeviceType names the device type the times are for: "" is
	// profile.DefaultCPUType when measuring and the profile's first
	// device type with From; a trace's device type is required.
	DeviceType string
	// Threads is the thread count the times were measured at, recorded
	// on the device type (0: not stated); ONNX Runtime runs at that many
	// intra-op threads (at least 1).
	Threads int

	// Runtime measures: RuntimeGorgonia (each distinct op, pure-Go
	// kernels) or RuntimeONNXRuntime (the whole model, per-node times
	// from its profiler). Warmup untimed runs, then Runs timed ones;
	// MaxTime bounds gorgonia's measurement (0: none).
	Runtime      string
	Warmup, Runs int
	MaxTime      time.Duration
	ORTLibrary   string // ONNX Runtime's shared library; "" finds it (ort.Find)

	// Trace is an ONNX Runtime profile or Chrome trace to import, taken
	// on a device of type TraceDevice (its roofline and per element type
	// peaks). Optimized is the optimized model the profiled ONNX Runtime
	// session wrote; Optimizer and Precision say how a PyTorch training
	// step ran (profile.ImportOptions).
	Trace       string
	TraceDevice *cluster.DeviceType
	Optimized   string
	Optimizer   string
	Precision   train.Precision

	// From is a profile to re-read and calibrate again.
	From string

	// Report asks for Result.Report.
	Report bool
	// LoadModel imports the model; nil is pipeline.LoadModel.
	LoadModel ModelLoader
}

// Result is what Run made.
type Result struct {
	// Profile is the profile, sorted, its Model set; Graph the graph it
	// times (a training step's for a training trace, the model at the
	// trace's precision for an inference one); DeviceType its device
	// type's name.
	Profile    *profile.Profile
	Graph      *graph.Graph
	DeviceType string

	// Measured is gorgonia's measurement, ORT the ONNX Runtime run,
	// Imported the trace import: the one that made the profile.
	Measured *profile.MeasureResult
	ORT      *ORTRun
	Imported *profile.ImportResult

	// Calibration is the roofline fitted to the measurements, or
	// CalibrationErr why there is none.
	Calibration    *profile.Calibration
	CalibrationErr error
	// Report is the calibration per family, the worst-predicted ops and
	// the whole-graph check, with Options.Report.
	Report *Report

	// Trace and OptimizedModel are ONNX Runtime's profiling JSON and
	// optimized model (weights stripped) of a RuntimeONNXRuntime run.
	Trace, OptimizedModel []byte
	// ClusterSource is the comment a one-device cluster file of the
	// measured CPU starts with (WriteCPUCluster).
	ClusterSource string
}

// Run makes a profile of o.Model's ops and calibrates the roofline to it.
func Run(ctx context.Context, o Options) (*Result, error) {
	load := o.LoadModel
	if load == nil {
		load = pipeline.LoadModel
	}
	m, err := load(o.Model, o.Import)
	if err != nil {
		return nil, err
	}
	res := &Result{Graph: m.Graph, DeviceType: o.DeviceType}
	var p *profile.Profile
	switch {
	case o.Runtime == RuntimeONNXRuntime && o.Trace == "" && o.From == "":
		if res.DeviceType == "" {
			res.DeviceType = profile.DefaultCPUType
		}
		res.ORT = &ORTRun{}
		if err := runORT(ctx, o, res.Graph, res.DeviceType, res.ORT); err != nil {
			return res, err
		}
		p = res.ORT.Imported.Profile
		res.Trace, res.OptimizedModel = res.ORT.Run.Trace, res.ORT.Run.Optimized
		res.ClusterSource = res.ORT.clusterSource()
	case o.From != "":
		if p, err = profile.Load(o.From); err != nil {
			return res, &pipeline.InputError{Err: err}
		}
		if res.DeviceType == "" && len(p.DeviceTypes) > 0 {
			res.DeviceType = p.DeviceTypes[0].Name
		}
	case o.Trace != "":
		if p, err = importTrace(o, res); err != nil {
			return res, err
		}
	default:
		if res.DeviceType == "" {
			res.DeviceType = profile.DefaultCPUType
		}
		cpu := profile.MeasureCPU()
		cpu.Threads = o.Threads
		mr, err := profile.Measure(ctx, res.Graph, profile.MeasureOptions{
			DeviceType: res.DeviceType, Warmup: o.Warmup, Runs: o.Runs, MaxTime: o.MaxTime, CPU: &cpu,
		})
		if err != nil {
			return res, err
		}
		res.Measured = mr
		p = mr.Profile
		res.ClusterSource = GorgoniaClusterSource
	}
	res.Profile = p
	p.Model = o.Model
	if p.DeviceType(res.DeviceType) == nil {
		return res, &pipeline.InputError{Err: fmt.Errorf("%s: the profile has no device type %q", o.From, res.DeviceType)}
	}
	res.Calibration, res.CalibrationErr = profile.Calibrate(p, res.Graph, res.DeviceType)
	if res.CalibrationErr == nil && o.Trace != "" {
		res.Calibration.Trace = o.Trace
	}
	if o.Report {
		res.Report = NewReport(p, res.Graph, res.DeviceType)
	}
	p.Sort()
	return res, nil
}

// importTrace reads o.Trace into a profile of the device type o.TraceDevice
// names, setting res.Imported and, when the trace times a training step
// or the model at another precision, res.Graph.
func importTrace(o Options, res *Result) (*profile.Profile, error) {
	cdt := o.TraceDevice
	if cdt == nil {
		return nil, fmt.Errorf("importing trace %s: no device type to price it with", o.Trace)
	}
	dt := profile.DeviceType{
		Name: o.DeviceType, PeakFLOPS: cdt.FLOPS(graph.Float32), MemoryBandwidth: cdt.MemoryBandwidth,
		LaunchOverhead: cdt.LaunchOverhead, Memory: cdt.Memory, Threads: o.Threads,
	}
	trace, err := files.Read(o.Trace, "trace")
	if err != nil {
		return nil, &pipeline.InputError{Err: err}
	}
	opts := profile.ImportOptions{OptimizedName: o.Optimized, Optimizer: o.Optimizer, Precision: o.Precision, Device: cdt}
	if o.Optimized != "" {
		if opts.Optimized, err = files.Read(o.Optimized, "optimized model"); err != nil {
			return nil, &pipeline.InputError{Err: err}
		}
	}
	imp, err := profile.ImportWith(o.Trace, trace, res.Graph, dt, opts)
	if err != nil {
		return nil, &pipeline.InputError{Err: err}
	}
	if imp.Graph != nil {
		// A training step's trace times the training step's ops.
		res.Graph = imp.Graph
	} else if res.Graph, _, err = train.ApplyPrecision(res.Graph, o.Precision); err != nil {
		// An inference trace times the model as its precision ran it.
		return nil, &pipeline.InputError{Err: err}
	}
	res.Imported = imp
	return imp.Profile, nil
}
