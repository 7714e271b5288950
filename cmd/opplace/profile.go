package main

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/opplace/opplace/internal/printable"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/internal/ort"
	"github.com/opplace/opplace/internal/output"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/profile"
	"github.com/opplace/opplace/profile/driver"
	"github.com/opplace/opplace/train"
)

type profileFlags struct {
	dimFlags
	device     string
	deviceType string
	importFile string
	optimized  string
	from       []string
	holdout    []string
	threads    int
	cluster    string
	out        string
	clusterOut string
	report     bool
	runs       int
	warmup     int
	maxTime    time.Duration
	// --runtime onnxruntime
	runtime       string
	ortLib        string
	keepTrace     string
	keepOptimized string
	optimizer     string
	precision     string
}

func init() { commands = append(commands, newProfileCmd) }

func newProfileCmd() *cobra.Command {
	f := &profileFlags{}
	cmd := &cobra.Command{
		Use:   "profile [MODEL]",
		Short: "Measure or import per-operator times and calibrate the cost model",
		Long: `profile makes a profile of MODEL's operators: measured times that
'opplace plan --profile FILE' uses instead of the roofline estimate on the
device type they were measured on, plus a roofline calibrated to them for the
ops that were not measured.

Measuring (--device cpu, the default) uses --runtime: onnxruntime, gorgonia,
or auto (the default): ONNX Runtime when its library is found, else gorgonia
with a note (and gorgonia for --max-time). ONNX Runtime's times are those of a
deployed model; gorgonia's pure-Go kernels are several times slower.

With gorgonia, measuring runs each distinct operator (same type,
shapes and attributes) on this machine's CPU with gorgonia kernels: warm-up
runs, then timed runs; the profile keeps the median, 10th and 90th percentile.
Ops gorgonia cannot run are listed and keep the model's estimate. The CPU's
roofline (peak FLOP/s from a GEMM, bandwidth from a copy loop, launch overhead
from the smallest op) is measured too and stored as device type local-cpu
(--device-type renames it); --cluster-out writes a one-device cluster file of
it. Use a small batch (--batch, --dim, --shape): every op runs on one core
pair, so a batch-32 ResNet takes minutes, batch 1 seconds.

Importing (--import TRACE) reads an ONNX Runtime profiling JSON
(SessionOptions.enable_profiling) or a Chrome trace with one annotation per
node (torch.profiler with record_function(node_name)), maps events to ops by
node name and reports names that match none. --device-type names the device
the trace ran on; its roofline comes from --cluster FILE or a preset.

ONNX Runtime's graph optimisations fuse and rename nodes (NCHWc convolutions
named <tensor>_nchwc, MatMul+Add Gemms, Gelu), so by name few kernels match.
--optimized-model FILE gives the optimized model the profiled session wrote:
set SessionOptions.optimized_model_filepath (Python:
so.optimized_model_filepath = "model.opt.onnx") next to enable_profiling; its
weights may be stripped. Each kernel then maps to the ops it computes, a fused
kernel's time spread over them by the model's estimate, layout kernels
(ReorderInput/ReorderOutput) to the op reading or writing their tensor. A
PyTorch trace without node annotations has its aten ops aligned with the
model's ops by type and order (profile the module the model was exported
from). The summary gives the share of the trace's kernel time that mapped;
below 80% a warning says which kernels did not.

With ONNX Runtime the whole model runs in ONNX Runtime (its
shared library, loaded at run time: --onnxruntime-lib, $OPPLACE_ONNXRUNTIME,
or npm install onnxruntime-node@1.30.0 --ignore-scripts in this directory)
at --threads intra-op threads, its weights made up (random, seeded) where the
file has none: warm-up runs, then timed runs with ONNX Runtime's profiler
on; the trace maps through the optimized model the session wrote, as above.
The profile keeps the per-op times of the timed runs and, under "runtime",
the whole model's median, p10 and p90. The roofline (peak FLOP/s from
MatMuls, bandwidth from a large Add, per-op overhead from a chain of tiny
Adds) is measured in ONNX Runtime at the same thread count. --keep-trace and
--keep-optimized save the raw trace and the optimized model (weights
stripped).

Every way the roofline is calibrated to the measurements and --report prints
the error before and after. The calibration is per op family (conv, matmul,
elementwise, reduce, movement, pool, other; families with fewer than 5 distinct
ops use their group's fit, compute or memory, else the fit over all ops):

  time = max(FLOPs / (peak x e_max x W/(W + W_half)),
             bytes / (bandwidth x e_mem)) + overhead

conv and matmul fit the ramp (e_max, W_half, W = the op's FLOPs); the other
families fit their overhead and, where it fits better, a cache level: ops whose
working set is at most a fitted size reach a second, fitted bandwidth. The fit
minimises the squared log of predicted/measured (relative error).

--from FILE re-reads a profile instead of measuring. With MODEL its
measurements are matched to MODEL's ops (bind the shapes it was measured at),
which also refits profiles written before measurements carried their op's
features. Repeat --from to pool profiles of several models (MODEL is then
optional: the features stored with each measurement are enough): the output
keeps every measurement, so each model's own ops still match, and one
calibration per device type and thread count fitted to all of them; --report
lists the models pooled and the error per family, --holdout FILE prices another
model's profile with the pooled calibration (per family and whole model).

--threads N records the thread count the times were measured at on the device
type (cluster files' threads:; with --runtime onnxruntime it is also the
intra-op thread count it runs at, 1 if not given); a profile may hold one device type at several
thread counts (pool them with --from) and plan --profile uses the entry of the
cluster device type's threads. gorgonia runs on GOMAXPROCS threads: measure
one thread with GOMAXPROCS=1 opplace profile MODEL --runtime gorgonia --threads 1.

Without --out the profile goes to stdout (and the summary to stderr).`,
		Example: `  # Measure ResNet-50 at batch 1 on this CPU (in ONNX Runtime when it is
  # installed), with a cluster file for it
  opplace profile testdata/models/resnet50.onnx --shape input.1=1,3,224,224 \
      --out resnet50.cpu.json --cluster-out cpu.yaml --report

  # BERT in ONNX Runtime at 2 threads, keeping its trace
  opplace profile testdata/models/bert_base.onnx --dim batch=1 --runtime onnxruntime \
      --threads 2 --out bert.ort.json --keep-trace bert.trace.json --cluster-out cpu-ort.yaml

  # Each distinct op with gorgonia's pure-Go kernels (no library needed)
  opplace profile testdata/models/resnet50.onnx --shape input.1=1,3,224,224 \
      --runtime gorgonia --out resnet50.gorgonia.json

  # Import an ONNX Runtime profile taken on a V100
  opplace profile testdata/models/resnet50.onnx --import onnxruntime_profile.json \
      --device-type V100-16GB --out resnet50.v100.json

  # ... with the optimized model that session wrote, so fused kernels map
  opplace profile testdata/models/resnet50.onnx --shape input.1=1,3,224,224 \
      --import testdata/profiles/resnet50_b1_ort130_cpu.json \
      --optimized-model testdata/profiles/resnet50_b1_ort130_cpu.opt.onnx \
      --device-type Workstation-CPU --cluster testdata/clusters/hetero.yaml --out r50.ort.json

  # Import a PyTorch training step traced on an H100 under bf16 autocast
  opplace profile testdata/models/resnet50.onnx \
      --import testdata/profiles/h100/resnet50-train-amp-bf16-b32.json.gz \
      --precision amp-bf16 --device-type H100-80GB --out resnet50.h100-bf16.json

  # Pool three models' profiles into one calibration; check it on a fourth
  opplace profile --from resnet50.cpu.json --from bert.cpu.json \
      --from vgg16.cpu.json --holdout inception.cpu.json --out pooled.json --report

  # Plan with the measured times
  opplace plan testdata/models/resnet50.onnx --shape input.1=1,3,224,224 \
      --cluster cpu.yaml --profile resnet50.cpu.json --mode infer`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			model := ""
			if len(args) == 1 {
				model = args[0]
			}
			if len(f.from) > 1 || len(f.from) == 1 && model == "" {
				return runPooled(cmd, model, f)
			}
			if model == "" {
				return usageError{errors.New("profile needs MODEL (to measure, or with --import), or --from FILE (repeatable) to calibrate from profiles")}
			}
			return runProfile(cmd, model, f)
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.device, "device", "cpu", "device to measure on (cpu: this machine's CPU)")
	fl.StringVar(&f.deviceType, "device-type", "", "device type the times are for (default local-cpu when measuring; required with --import)")
	fl.StringVar(&f.importFile, "import", "", "import this ONNX Runtime profile or Chrome trace instead of measuring")
	fl.StringVar(&f.optimized, "optimized-model", "", "with --import of an ONNX Runtime profile: the optimized model the session wrote (SessionOptions.optimized_model_filepath), to map fused and renamed kernels")
	fl.StringArrayVar(&f.from, "from", nil, "read this profile instead of measuring (to re-calibrate or --report); repeat to pool several models' profiles")
	fl.StringArrayVar(&f.holdout, "holdout", nil, "with --from: price this (held-out) profile's measurements with the calibration and print the error (repeatable)")
	fl.IntVar(&f.threads, "threads", 0, "thread count the times were measured at, recorded on the device type (0: not stated); with --runtime onnxruntime the intra-op threads it runs at (default 1); with --from, calibrate only that thread count")
	fl.StringVar(&f.cluster, "cluster", "", "cluster file whose device type --device-type names (for --import's roofline)")
	fl.StringVarP(&f.out, "out", "o", "", "write the profile to this file (default stdout)")
	fl.StringVar(&f.clusterOut, "cluster-out", "", "write a one-device cluster file of the measured CPU")
	fl.BoolVar(&f.report, "report", false, "print measured vs predicted error before and after calibration, and the whole-graph check")
	fl.IntVar(&f.runs, "runs", 10, "timed runs per distinct op (fewer for ops slower than 250ms; at least 3), or of the whole model with --runtime onnxruntime")
	fl.IntVar(&f.warmup, "warmup", 2, "untimed warm-up runs per distinct op, or of the whole model with --runtime onnxruntime")
	fl.DurationVar(&f.maxTime, "max-time", 0, "stop measuring after this long (e.g. 60s); ops not reached keep the model's estimate")
	fl.StringVar(&f.runtime, "runtime", runtimeAuto, "what measures: onnxruntime (the whole model in ONNX Runtime, per-node times from its profiler), gorgonia (each distinct op, pure-Go kernels), or auto: onnxruntime when its library is found, else gorgonia")
	fl.StringVar(&f.ortLib, "onnxruntime-lib", "", "ONNX Runtime shared library (default $OPPLACE_ONNXRUNTIME, ./node_modules/onnxruntime-node, .cache/onnxruntime-node, /usr/lib, /usr/local/lib)")
	fl.StringVar(&f.keepTrace, "keep-trace", "", "with --runtime onnxruntime, save ONNX Runtime's profiling JSON of the timed runs here")
	fl.StringVar(&f.precision, "precision", "", "with --import of a PyTorch trace: the precision the traced step ran in (fp32, tf32, amp-bf16 for torch.autocast(bfloat16), amp-fp16); the model is rewritten as plan --precision does, so autocast's casts align, and each op's efficiency is fitted against its own path's peak (tensor cores under amp)")
	fl.StringVar(&f.optimizer, "optimizer", "", "with --import of a training step's trace: its optimizer (sgd, momentum or adam; default: the one the trace's Optimizer.step range names), which names the update ops as plan --optimizer does")
	fl.StringVar(&f.keepOptimized, "keep-optimized", "", "with --runtime onnxruntime, save the model as ONNX Runtime optimized it (large weights stripped) here")
	return cmd
}

func runProfile(cmd *cobra.Command, modelPath string, f *profileFlags) error {
	importOpts, err := f.options()
	if err != nil {
		return err
	}
	from := ""
	if len(f.from) == 1 {
		from = f.from[0]
	}
	sources := 0
	for _, s := range []string{f.importFile, from} {
		if s != "" {
			sources++
		}
	}
	runtime, fellBack, err := resolveRuntime(f, sources == 0, ort.Find)
	if err != nil {
		return err
	}
	f.runtime = runtime
	switch {
	case sources > 1:
		return usageError{errors.New("--import and --from exclude each other")}
	case f.device != "cpu":
		return usageError{fmt.Errorf("--device %q: only cpu (this machine) can be measured; import other devices' traces with --import", f.device)}
	case f.precision != "" && f.importFile == "":
		return usageError{errors.New("--precision says how an --import trace's step ran; it needs --import TRACE (plan takes --precision to plan in it)")}
	case f.optimized != "" && f.importFile == "":
		return usageError{errors.New("--optimized-model maps an --import trace's kernels; it needs --import TRACE")}
	case f.importFile != "" && f.deviceType == "":
		return usageError{errors.New("--import needs --device-type NAME: the device type the trace ran on (a preset such as V100-16GB, or a type of --cluster)")}
	case f.runs < 1 || f.warmup < 0 || f.maxTime < 0 || f.threads < 0:
		return usageError{errors.New("--runs must be at least 1, --warmup, --max-time and --threads non-negative")}
	case len(f.holdout) > 0:
		return usageError{errors.New("--holdout checks a calibration made --from profiles; give --from FILE")}
	case f.clusterOut != "" && (f.importFile != "" || from != ""):
		return usageError{errors.New("--cluster-out writes the measured CPU's cluster; it needs a measurement, not --import or --from")}
	case f.runtime != runtimeGorgonia && f.runtime != runtimeONNXRuntime:
		return usageError{fmt.Errorf("--runtime %q: want auto, gorgonia or onnxruntime", f.runtime)}
	case f.runtime == runtimeONNXRuntime && sources > 0:
		return usageError{errors.New("--runtime onnxruntime measures; it excludes --import and --from")}
	case f.runtime != runtimeONNXRuntime && (f.keepTrace != "" || f.keepOptimized != "" || f.ortLib != ""):
		return usageError{errors.New("--onnxruntime-lib, --keep-trace and --keep-optimized need --runtime onnxruntime")}
	case f.runtime == runtimeONNXRuntime && f.maxTime > 0:
		return usageError{errors.New("--max-time bounds gorgonia's per-op measurement; --runtime onnxruntime runs the whole model --warmup + --runs times")}
	}
	run := output.Run{Inputs: []output.Input{{What: "the model", Path: modelPath}, {What: "the trace", Path: f.importFile},
		{What: "the optimized model", Path: f.optimized},
		{What: "the profile", Path: from}, {What: "the cluster file", Path: f.cluster}}, Stdout: cmd.OutOrStdout()}
	if err := run.Check(output.File{What: "--out", Path: f.out}, output.File{What: "--cluster-out", Path: f.clusterOut},
		output.File{What: "--keep-trace", Path: f.keepTrace}, output.File{What: "--keep-optimized", Path: f.keepOptimized}); err != nil {
		return err
	}
	opts := driver.Options{Model: modelPath, Import: importOpts, DeviceType: f.deviceType, Threads: f.threads,
		Runtime: f.runtime, Warmup: f.warmup, Runs: f.runs, MaxTime: f.maxTime, ORTLibrary: f.ortLib,
		Trace: f.importFile, Optimized: f.optimized, Optimizer: f.optimizer, From: from, Report: f.report, LoadModel: loadModel}
	if f.importFile != "" {
		if opts.TraceDevice, err = traceDeviceType(f.deviceType, f.cluster); err != nil {
			return err
		}
		if opts.Precision, err = train.ParsePrecision(f.precision); err != nil {
			return usageError{fmt.Errorf("--precision: %w", err)}
		}
	}
	res, err := driver.Run(cmd.Context(), opts)
	stderr := cmd.ErrOrStderr()
	summary := stderr
	if f.out != "" {
		summary = cmd.OutOrStdout()
	}
	if res != nil {
		printProfileSource(summary, stderr, res, f, modelPath, fellBack)
	}
	var lib *driver.LibraryError
	if errors.As(err, &lib) {
		return usageError{fmt.Errorf("--runtime onnxruntime: %w (--onnxruntime-lib PATH names the file)", lib.Err)}
	}
	if err != nil {
		return err
	}
	if res.CalibrationErr != nil {
		fmt.Fprintf(stderr, "warning: not calibrated: %v\n", res.CalibrationErr)
	} else {
		cal := res.Calibration
		fmt.Fprintf(summary, "calibration on %d distinct ops: median relative error %.1f%% -> %.1f%%, p90 %.1f%% -> %.1f%%\n",
			cal.After.Samples, 100*cal.Before.MedianRelErr, 100*cal.After.MedianRelErr, 100*cal.Before.P90RelErr, 100*cal.After.P90RelErr)
	}
	if res.Report != nil {
		if err := writeReport(summary, res.Report, res.DeviceType); err != nil {
			return err
		}
	}
	p := res.Profile
	dt := p.DeviceType(res.DeviceType)
	out := f.out
	if out == "" {
		out = "/dev/stdout"
	}
	return run.Commit(output.File{What: "--out", Path: out, Write: p.Write},
		output.File{What: "--cluster-out", Path: f.clusterOut, Write: func(w io.Writer) error { return driver.WriteCPUCluster(w, dt, res.ClusterSource) }},
		output.Bytes("--keep-trace", f.keepTrace, res.Trace), output.Bytes("--keep-optimized", f.keepOptimized, res.OptimizedModel))
}

// printProfileSource says what made the profile: the ONNX Runtime run,
// the trace import or gorgonia's measurement, as far as it got.
func printProfileSource(summary, stderr io.Writer, res *driver.Result, f *profileFlags, modelPath string, fellBack bool) {
	switch {
	case res.ORT != nil:
		printORTRun(summary, stderr, modelPath, res.ORT)
	case res.Imported != nil:
		printImport(summary, stderr, "imported "+f.importFile, res.Imported)
		if res.Imported.Profile.Source == profile.SourceORT && f.optimized == "" && len(res.Imported.Warnings) > 0 {
			fmt.Fprintln(stderr, "hint: give the optimized model that session wrote with --optimized-model FILE")
		}
	case res.Measured != nil:
		m := res.Measured
		p := m.Profile
		dtName := res.DeviceType
		dt := p.DeviceType(dtName)
		fmt.Fprintf(summary, "measured %d of %d distinct ops of %s on %s (%s): peak %.3g FLOP/s (runs spread %.0f%%), bandwidth %.3g B/s, launch %.3g us\n",
			m.Measured, m.Distinct, modelPath, dtName, dt.Description, dt.PeakFLOPS, 100*dt.PeakSpread, dt.MemoryBandwidth, dt.LaunchOverhead*1e6)
		if fellBack {
			fmt.Fprintf(summary, "note: --runtime auto found no ONNX Runtime library, so gorgonia measured (install one with `ONNXRUNTIME_NODE_INSTALL=skip npm install onnxruntime-node@1.30.0 --ignore-scripts`, or name it with $%s or --onnxruntime-lib)\n", ort.EnvLibrary)
		}
		fmt.Fprintln(summary, "note: gorgonia's pure-Go kernels are much slower than a deployed runtime's (on this project's 2-core Xeon gorgonia's peak measured 5-12 GFLOP/s, ONNX Runtime's 130 per thread); --runtime onnxruntime times the model in ONNX Runtime (docs/cpu-accuracy.md)")
		if m.TimedOut > 0 {
			fmt.Fprintf(summary, "--max-time reached: %d distinct ops not measured\n", m.TimedOut)
		}
		for _, u := range p.Unsupported {
			fmt.Fprintf(summary, "not measured: %d %s ops (%s)\n", u.Count, u.Type, u.Reason)
		}
	}
}

// traceDeviceType finds the device type an imported trace ran on: a
// device type of the cluster file, else a preset.
func traceDeviceType(name, clusterPath string) (*cluster.DeviceType, error) {
	if clusterPath != "" {
		c, err := cluster.Load(clusterPath)
		if err != nil {
			return nil, &pipeline.InputError{Err: err}
		}
		for i := range c.Devices {
			if c.Devices[i].Type.Name == name {
				return c.Devices[i].Type, nil
			}
		}
		return nil, usageError{fmt.Errorf("--device-type %q: cluster %s has no device of that type", name, clusterPath)}
	}
	p, ok := cluster.Preset(name)
	if !ok {
		return nil, usageError{fmt.Errorf("--device-type %q is no preset (%s); pass --cluster FILE that defines it", name, strings.Join(cluster.PresetNames(), ", "))}
	}
	return p, nil
}

// writeReport prints the calibration per family, the ops predicted worst
// after calibration, and the whole-graph check: the sum of measured op
// times against the simulator's one-device step with the roofline, the
// calibrated roofline and the measured profile.
func writeReport(w io.Writer, r *driver.Report, dtName string) error {
	var b bytes.Buffer
	if r.Calibration != nil {
		writeCalibration(&b, r.Calibration)
		fmt.Fprintf(&b, "\nworst predicted after calibration:\n")
		for _, s := range r.Worst {
			fmt.Fprintf(&b, "  %-48s %-11s measured %9.3f ms  roofline %9.3f ms  calibrated %9.3f ms\n",
				s.Name, s.Family, s.Measured*1e3, s.Default*1e3, s.Calibrated*1e3)
		}
	}
	fmt.Fprintf(&b, "\nwhole graph on one %s (%d ops, %d measured): sum of measured op times %.3f ms\n", dtName, r.Ops, r.Measured, r.MeasuredMS)
	for _, row := range r.Steps {
		fmt.Fprintf(&b, "  simulated step, %-32s %10.3f ms (%+.1f%% vs measured sum)\n", row.Model+":", row.Seconds*1e3, 100*(row.Seconds*1e3/r.MeasuredMS-1))
	}
	_, err := io.WriteString(w, printable.Text(b.String())) // op names from the model
	return err
}

// writeCalibration prints a calibration's fits, with each fit's error on
// the ops it prices before (roofline) and after, and the overall error.
func writeCalibration(b io.Writer, c *profile.Calibration) {
	if len(c.Models) > 0 {
		fmt.Fprintf(b, "\ncalibrated on %d model(s): %s\n", len(c.Models), strings.Join(c.Models, ", "))
	}
	fmt.Fprintf(b, "\nfamily        ops  e_max   W_half   e_mem  e_cache  cache      overhead  error before -> after (median)\n")
	for _, f := range c.Families {
		errs := ""
		if f.Before != nil && f.After != nil {
			errs = fmt.Sprintf("%6.1f%% -> %5.1f%% (%d ops)", 100*f.Before.MedianRelErr, 100*f.After.MedianRelErr, f.After.Samples)
		}
		cache := "      -          -"
		if f.CacheEfficiency > 0 {
			cache = fmt.Sprintf("%7.3f  %9s", f.CacheEfficiency, humanBytes(f.CacheBytes))
		}
		fmt.Fprintf(b, "%-12s %4d  %5.3f  %7.3g  %5.3f  %s  %7.1fus  %s\n", f.Family, f.Samples, f.ComputeEfficiency, f.ComputeHalfFLOPs,
			f.MemoryEfficiency, cache, f.OverheadS*1e6, errs)
	}
	fmt.Fprintf(b, "\nrelative error   median    p90   (%d distinct ops)\n", c.Before.Samples)
	fmt.Fprintf(b, "roofline        %6.1f%% %6.1f%%\n", 100*c.Before.MedianRelErr, 100*c.Before.P90RelErr)
	fmt.Fprintf(b, "calibrated      %6.1f%% %6.1f%%\n", 100*c.After.MedianRelErr, 100*c.After.P90RelErr)
}

func humanBytes(v float64) string {
	switch {
	case v >= 1<<30:
		return fmt.Sprintf("%.3gGiB", v/(1<<30))
	case v >= 1<<20:
		return fmt.Sprintf("%.3gMiB", v/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%.3gKiB", v/(1<<10))
	}
	return fmt.Sprintf("%.0fB", v)
}

func abbreviate(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + fmt.Sprintf(", ... (%d more)", len(names)-n)
}

// loadProfileModel is the cost model of plan --profile FILE: measured
// times for the device types the profile has, calibrated roofline for its
// unmeasured ops, the roofline elsewhere (at TF32 for float32 matmuls
// under --precision tf32, as without a profile).
func loadProfileModel(path, precision string) (cost.Model, error) {
	if path == "" {
		return nil, nil
	}
	p, err := profile.Load(path)
	if err != nil {
		return nil, &pipeline.InputError{Err: err}
	}
	return profile.NewModel(p, cost.Roofline{TF32: strings.EqualFold(precision, string(train.TF32))}), nil
}

// printFusion says what the fuse stage did, for plan -v.
func printFusion(w io.Writer, r *pipeline.FusionReport) {
	if r.Mode == "" {
		return
	}
	fmt.Fprintf(w, "fusion %s: %d ops -> %d", r.Mode, r.OpsBefore, r.OpsAfter)
	for _, p := range r.Passes {
		fmt.Fprintf(w, ", %s merged %d", p.Pass, p.Merged)
	}
	fmt.Fprintln(w)
}

// printImport says how much of a trace mapped to the model's ops, and
// its warnings on stderr.
func printImport(summary, stderr io.Writer, what string, res *profile.ImportResult) {
	p := res.Profile
	fmt.Fprintf(summary, "%s (%s): %d node events, %d matched %d ops; %d ops have no time and keep the model's estimate\n",
		what, p.Source, res.Events, res.Matched, len(p.Ops), res.Unmeasured)
	fmt.Fprintf(summary, "matched %.1f%% of the trace's kernel time (%.3f of %.3f ms per run over %d runs; layout kernels %.3f ms)",
		100*res.MatchedShare, res.MatchedMS, res.TraceMS, res.Runs, res.LayoutMS)
	if res.RunMS > 0 {
		fmt.Fprintf(summary, "; median model run %.3f ms", res.RunMS)
	}
	fmt.Fprintln(summary)
	if len(res.Phases) > 0 {
		var parts []string
		for _, ph := range res.Phases {
			share := 0.0
			if ph.MS > 0 {
				share = 100 * ph.MatchedMS / ph.MS
			}
			parts = append(parts, fmt.Sprintf("%s %.3f ms (%.1f%% matched)", ph.Phase, ph.MS, share))
		}
		fmt.Fprintf(summary, "training step (%s): %s %s; %d ops of the training step have a time\n", res.Optimizer, res.TimeKind(), strings.Join(parts, ", "), len(p.Ops))
	}
	if n := len(p.Unmatched); n > 0 {
		fmt.Fprintf(summary, "unmatched node names (%d): %s\n", n, abbreviate(p.Unmatched, 8))
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
}
