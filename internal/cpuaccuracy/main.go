// Command cpuaccuracy measures how well opplace predicts CPU inference
// time against ONNX Runtime, the runtime most ONNX users deploy with, on
// this machine. It drives the opplace command line as a user would:
//
//	make cpu-accuracy   (go run ./internal/cpuaccuracy -out /tmp/cpuacc)
//
// For each thread count (-threads, default 1,2) and each model it runs
// `opplace profile MODEL --runtime onnxruntime` (a runnable copy with
// random weights, timed, and its trace imported through the optimised
// model), then predicts the model's time three ways with `opplace plan
// --mode infer` on the one-CPU cluster that profile --cluster-out wrote:
//
//	(a) the CPU description alone (no profile);
//	(b) a profile pooled from the fitting models' profiles only
//	    (`profile --from A --from B ...`): for the held-out models this is
//	    calibration that has never seen them;
//	(c) the model's own profile.
//
// The measured time is the runtime's median model run over the timed
// runs (profiler on: its cost is in the trace the predictions come from
// too). The machine is shared, so every model is profiled -repeat times,
// the repetitions interleaved, and keeps its fastest repetition. Models
// are split before anything is fitted: the fitting set (-fit) and the
// held-out set (every other model); medians are reported per set, so the
// held-out error is never an in-sample figure. docs/cpu-accuracy.md has
// the results.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/opplace/opplace/internal/ort"
	"github.com/opplace/opplace/internal/stats"
)

// modelCase is one model of the bench and the flags that bind its inputs.
type modelCase struct {
	name, path string
	args       []string
	// runs overrides -runs for slow models.
	runs int
}

// cases lists the models at batch b. Models that run at one batch only
// (the shared transformer's fixed shape, ShuffleNet's literal reshapes)
// are left out at other batches.
func cases(shared, heldout string, b int) []modelCase {
	img := func(n int) []string { return []string{"--shape", fmt.Sprintf("input.1=%d,3,%d,%d", b, n, n)} }
	seq := []string{"--dim", fmt.Sprintf("batch=%d", b)}
	c := []modelCase{
		{name: "resnet50", path: filepath.Join(shared, "resnet50.onnx"), args: img(224)},
		{name: "mobilenet_v2", path: filepath.Join(shared, "mobilenet_v2.onnx"), args: img(224)},
		{name: "inception_v3", path: filepath.Join(shared, "inception_v3.onnx"), args: img(299)},
		{name: "vgg16", path: filepath.Join(shared, "vgg16.onnx"), args: img(224), runs: 5},
		{name: "bert_base", path: filepath.Join(shared, "bert_base.onnx"), args: seq},
		{name: "gpt2_small", path: filepath.Join(shared, "gpt2_small.onnx"), args: seq, runs: 3},
	}
	if b == 1 {
		c = append(c, modelCase{name: "transformer", path: filepath.Join(shared, "transformer.onnx"), runs: 3})
	}
	for _, n := range []string{"resnet18", "densenet121", "efficientnet_b0", "squeezenet1_1", "shufflenet_v2", "regnet_y_400mf", "convnext_tiny"} {
		if n == "shufflenet_v2" && b != 1 {
			continue
		}
		c = append(c, modelCase{name: n, path: filepath.Join(heldout, n+".onnx"), args: img(224)})
	}
	c = append(c, modelCase{name: "gpt_mini", path: filepath.Join(heldout, "gpt_mini.onnx"), args: seq})
	return c
}

type config struct {
	bin, out, lib, fusion string
	threads               []int
	runs, repeat, batch   int
	reuse                 bool
	fit                   []string
	only                  []string
}

func main() {
	var cfg config
	var threads, fit, only string
	flag.StringVar(&cfg.bin, "opplace", "bin/opplace", "the opplace binary")
	flag.StringVar(&cfg.out, "out", "", "folder for profiles, cluster files and plans (default a temporary one)")
	flag.StringVar(&cfg.lib, "onnxruntime-lib", "", "ONNX Runtime shared library (default: what opplace finds)")
	flag.StringVar(&cfg.fusion, "fusion", "none", "--fusion for the predictions")
	flag.StringVar(&threads, "threads", "1,2", "thread counts")
	flag.IntVar(&cfg.runs, "runs", 10, "timed runs per model")
	flag.IntVar(&cfg.repeat, "repeat", 3, "profile every model this many times, interleaved; each keeps its fastest")
	flag.BoolVar(&cfg.reuse, "reuse", false, "reuse the profiles already in -out (re-predict only)")
	flag.StringVar(&fit, "fit", "resnet50,mobilenet_v2,inception_v3,bert_base", "models whose profiles are pooled for (b); the others are held out")
	flag.StringVar(&only, "models", "", "comma-separated subset of models (default all)")
	shared := flag.String("shared", "../shared/models", "the shared models")
	heldout := flag.String("heldout", "testdata/models/heldout", "the held-out models")
	batch := flag.Int("batch", 1, "batch size (images per input, sequences for BERT and the GPTs)")
	peaks := flag.Int("peak-stability", 0, "instead of the models: measure the CPU's peak this many times per thread count with profile's repetition and with the old fixed 5 rounds, interleaved, and print how far each moves")
	flag.Parse()
	if *peaks > 0 {
		if err := peakStability(os.Stdout, cfg.lib, threads, *peaks); err != nil {
			fatalf("%v", err)
		}
		return
	}
	cfg.batch = *batch
	for _, s := range strings.Split(threads, ",") {
		t, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || t < 1 {
			fatalf("-threads %q: want positive integers", threads)
		}
		cfg.threads = append(cfg.threads, t)
	}
	cfg.fit = strings.Split(fit, ",")
	if only != "" {
		cfg.only = strings.Split(only, ",")
	}
	if cfg.out == "" {
		d, err := os.MkdirTemp("", "cpuaccuracy")
		if err != nil {
			fatalf("%v", err)
		}
		cfg.out = d
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		fatalf("%v", err)
	}
	var all []modelCase
	for _, c := range cases(*shared, *heldout, *batch) {
		if cfg.only == nil || slices.Contains(cfg.only, c.name) {
			all = append(all, c)
		}
	}
	// Repetitions interleave the thread counts and models, so a busy
	// spell of the shared machine slows one repetition, not one model;
	// each model keeps its fastest repetition (other processes only slow
	// runs down).
	reps := make(map[int][]map[string]measurement)
	for r := 1; r <= cfg.repeat; r++ {
		// Each repetition starts the list at another model and takes the
		// thread counts the other way round, so no model is always
		// measured at the same point of a repetition.
		first := (r - 1) * 3 % len(all)
		order := slices.Concat(all[first:], all[:first])
		threads := slices.Clone(cfg.threads)
		if r%2 == 0 {
			slices.Reverse(threads)
		}
		for _, t := range threads {
			dir := filepath.Join(cfg.out, fmt.Sprintf("t%d", t), fmt.Sprintf("rep%d", r))
			reps[t] = append(reps[t], profileOnce(cfg, order, t, dir))
		}
	}
	var rows []row
	for _, t := range cfg.threads {
		rows = append(rows, predict(cfg, all, t, reps[t], filepath.Join(cfg.out, fmt.Sprintf("t%d", t)))...)
	}
	printTable(os.Stdout, cfg, rows)
	printStability(os.Stdout, cfg, reps)
	if err := writeJSON(filepath.Join(cfg.out, "rows.json"), rows); err != nil {
		fatalf("%v", err)
	}
}

// row is one model at one thread count.
type row struct {
	Model      string  `json:"model"`
	Threads    int     `json:"threads"`
	Heldout    bool    `json:"heldout"`
	MeasuredMS float64 `json:"measured_ms"`
	SpreadPct  float64 `json:"spread_pct"` // (p90-p10)/median of the timed runs
	Matched    float64 `json:"matched_share"`
	// Predicted step, by (a) the CPU description, (b) the pooled profile,
	// (c) the model's own profile; 0 when the plan failed.
	Default float64 `json:"default_ms"`
	Pooled  float64 `json:"pooled_ms"`
	Own     float64 `json:"own_ms"`
	// LeaveOneOut is a fitting model's (b) with its own profile left out
	// of the pool: the held-out error inside the fitting set, which
	// choosing between calibration methods may look at (the held-out
	// models' errors must not steer that choice).
	LeaveOneOut float64 `json:"leave_one_out_ms,omitempty"`
	// LeaveOneOutCalibrated is the same pool's calibration alone (no
	// measured op reused) on the left-out model's measured ops: its
	// whole-model relative error and its median op error.
	LeaveOneOutCalibrated *holdoutCheck `json:"leave_one_out_calibrated,omitempty"`
	Err                   string        `json:"error,omitempty"`
	// PeakFLOPS is the peak the chosen run measured; Repeats every
	// repetition's median model run.
	PeakFLOPS float64   `json:"peak_flops"`
	Repeats   []float64 `json:"repeats_ms"`
}

// measurement is one profile run of one model at one thread count.
type measurement struct {
	profile, log string
	medianMS     float64
	spreadPct    float64
	matched      float64
	peakFLOPS    float64
	err          string
}

// profileOnce profiles every model at t threads into dir (repetition rep),
// writing the cluster file of the first model's run beside them.
func profileOnce(cfg config, all []modelCase, t int, dir string) map[string]measurement {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fatalf("%v", err)
	}
	got := map[string]measurement{}
	for i, c := range all {
		runs := cfg.runs
		if c.runs > 0 && c.runs < runs {
			runs = c.runs
		}
		m := measurement{profile: filepath.Join(dir, c.name+".profile.json"), log: filepath.Join(dir, c.name+".profile.log")}
		if cfg.reuse {
			if _, err := os.Stat(m.profile); err == nil {
				log, _ := os.ReadFile(m.log)
				got[c.name] = readMeasurement(m, log)
				continue
			}
		}
		args := append([]string{"profile", c.path}, c.args...)
		args = append(args, "--runtime", "onnxruntime", "--threads", strconv.Itoa(t), "--runs", strconv.Itoa(runs), "--out", m.profile)
		if cfg.lib != "" {
			args = append(args, "--onnxruntime-lib", cfg.lib)
		}
		if i == 0 {
			args = append(args, "--cluster-out", filepath.Join(dir, "cpu.yaml"))
		}
		stdout, stderr, err := run(cfg.bin, args...)
		if err != nil {
			m.err = err.Error()
			got[c.name] = m
			fmt.Fprintf(os.Stderr, "%s t=%d: %v\n", c.name, t, err)
			continue
		}
		log := append(stdout, stderr...)
		if err := os.WriteFile(m.log, log, 0o644); err != nil {
			fatalf("%v", err)
		}
		m = readMeasurement(m, log)
		got[c.name] = m
		fmt.Fprintf(os.Stderr, "%s t=%d: measured %.2f ms (spread %.1f%%), matched %.1f%%, peak %.3g FLOP/s\n", c.name, t, m.medianMS, m.spreadPct, 100*m.matched, m.peakFLOPS)
	}
	return got
}

func readMeasurement(m measurement, log []byte) measurement {
	m.matched = matchedShare(log)
	var p struct {
		Runtime struct {
			MedianMS float64 `json:"model_median_ms"`
			P10MS    float64 `json:"model_p10_ms"`
			P90MS    float64 `json:"model_p90_ms"`
		} `json:"runtime"`
		DeviceTypes []struct {
			PeakFLOPS float64 `json:"peak_flops"`
		} `json:"device_types"`
	}
	if err := readJSON(m.profile, &p); err != nil {
		fatalf("%v", err)
	}
	m.medianMS = p.Runtime.MedianMS
	if m.medianMS > 0 {
		m.spreadPct = 100 * (p.Runtime.P90MS - p.Runtime.P10MS) / m.medianMS
	}
	if len(p.DeviceTypes) > 0 {
		m.peakFLOPS = p.DeviceTypes[0].PeakFLOPS
	}
	return m
}

// predict pools the fitting models' profiles of each model's fastest
// repetition and predicts every model three ways.
func predict(cfg config, all []modelCase, t int, reps []map[string]measurement, dir string) []row {
	var rows []row
	var fitProfiles []string
	clusterFile := ""
	bestPeak := 0.0
	for r, rep := range reps {
		// The repetition's first model wrote its cluster file.
		if m := rep[all[r*3%len(all)].name]; m.err == "" && m.peakFLOPS > bestPeak {
			bestPeak, clusterFile = m.peakFLOPS, filepath.Join(dir, fmt.Sprintf("rep%d", r+1), "cpu.yaml")
		}
	}
	chosen := map[string]measurement{}
	for _, c := range all {
		r := row{Model: c.name, Threads: t, Heldout: !slices.Contains(cfg.fit, c.name)}
		var best *measurement
		for _, rep := range reps {
			m := rep[c.name]
			r.Repeats = append(r.Repeats, m.medianMS)
			if m.err == "" && (best == nil || m.medianMS < best.medianMS) {
				best = &m
			}
		}
		if best == nil {
			r.Err = reps[0][c.name].err
			rows = append(rows, r)
			continue
		}
		chosen[c.name] = *best
		r.MeasuredMS, r.SpreadPct, r.Matched, r.PeakFLOPS = best.medianMS, best.spreadPct, best.matched, best.peakFLOPS
		if !r.Heldout {
			fitProfiles = append(fitProfiles, best.profile)
		}
		rows = append(rows, r)
	}
	// The op features (FLOPs, bytes, working set) a pooled calibration
	// fits to are stored in each profile when it is measured; profiles
	// re-read with -reuse get them again from the current code, so a
	// change to the features is fitted as a fresh run would.
	refresh := filepath.Join(dir, "features")
	if err := os.MkdirAll(refresh, 0o755); err != nil {
		fatalf("%v", err)
	}
	for _, c := range all {
		m, ok := chosen[c.name]
		if !ok {
			continue
		}
		out := filepath.Join(refresh, c.name+".profile.json")
		args := append([]string{"profile", c.path}, c.args...)
		if _, _, err := run(cfg.bin, append(args, "--from", m.profile, "--out", out)...); err != nil {
			fatalf("refreshing %s's features: %v", c.name, err)
		}
		m.profile = out
		chosen[c.name] = m
	}
	fitProfiles = fitProfiles[:0]
	for _, r := range rows {
		if !r.Heldout && r.Err == "" {
			fitProfiles = append(fitProfiles, chosen[r.Model].profile)
		}
	}
	pooled := filepath.Join(dir, "pooled.json")
	args := []string{"profile"}
	for _, p := range fitProfiles {
		args = append(args, "--from", p)
	}
	args = append(args, "--out", pooled)
	for _, r := range rows {
		if r.Heldout && r.Err == "" {
			args = append(args, "--holdout", chosen[r.Model].profile)
		}
	}
	args = append(args, "--report")
	// The report (per family, in sample and held out) goes beside the
	// profiles.
	stdout, stderr, err := run(cfg.bin, args...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pooling t=%d: %v %s\n", t, err, stderr)
		pooled = ""
	} else if err := os.WriteFile(filepath.Join(dir, "pooled-report.txt"), append(stdout, stderr...), 0o644); err != nil {
		fatalf("%v", err)
	}
	for i := range rows {
		r := &rows[i]
		if r.Err != "" {
			continue
		}
		c := all[slices.IndexFunc(all, func(c modelCase) bool { return c.name == r.Model })]
		plan := func(profile string) float64 {
			args := append([]string{"plan", c.path}, c.args...)
			args = append(args, "--cluster", clusterFile, "--mode", "infer", "--fusion", cfg.fusion, "-o", "json")
			if profile != "" {
				args = append(args, "--profile", profile)
			}
			out, _, err := run(cfg.bin, args...)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s t=%d plan: %v\n", r.Model, t, err)
				return 0
			}
			var p struct {
				Step float64 `json:"predicted_step_ms"`
			}
			if err := json.Unmarshal(out, &p); err != nil {
				fmt.Fprintf(os.Stderr, "%s t=%d plan: %v\n", r.Model, t, err)
				return 0
			}
			return p.Step
		}
		r.Default = plan("")
		if pooled != "" {
			r.Pooled = plan(pooled)
		}
		r.Own = plan(chosen[r.Model].profile)
		if !r.Heldout {
			if p, check := poolWithout(cfg, fitProfiles, chosen[r.Model].profile, filepath.Join(dir, "loo-"+r.Model+".json")); p != "" {
				r.LeaveOneOut = plan(p)
				r.LeaveOneOutCalibrated = check
			}
		}
	}
	return rows
}

// poolWithout pools the fitting profiles other than leave into out and
// checks the pool's calibration on leave (profile --holdout); "" when
// pooling fails.
func poolWithout(cfg config, fit []string, leave, out string) (string, *holdoutCheck) {
	args := []string{"profile"}
	for _, p := range fit {
		if p != leave {
			args = append(args, "--from", p)
		}
	}
	stdout, stderr, err := run(cfg.bin, append(args, "--out", out, "--holdout", leave)...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pooling without %s: %v %s\n", leave, err, stderr)
		return "", nil
	}
	return out, readHoldout(append(stdout, stderr...))
}

// holdoutCheck is what profile --holdout reports of one held-out profile:
// the calibration's whole-model error and median op error.
type holdoutCheck struct {
	WholeErr float64 `json:"whole_rel_err"`
	OpsErr   float64 `json:"ops_median_rel_err"`
}

// readHoldout reads the "all ops" and "whole model" lines of a --holdout
// report with one held-out profile; nil when either is missing.
func readHoldout(out []byte) *holdoutCheck {
	var c holdoutCheck
	var ops, whole bool
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 5 && f[0] == "all" && f[1] == "ops":
			v, err := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
			ops = err == nil
			c.OpsErr = v / 100
		case strings.HasPrefix(strings.TrimSpace(line), "whole model:"):
			_, rest, _ := strings.Cut(line, "calibrated ")
			_, rest, _ = strings.Cut(rest, "(")
			v, _, _ := strings.Cut(rest, "%")
			x, err := strconv.ParseFloat(v, 64)
			whole = err == nil
			c.WholeErr = x / 100
		}
	}
	if !ops || !whole {
		return nil
	}
	return &c
}

// matchedShare reads "matched N% of the trace's kernel time" from
// profile's summary; 0 when absent.
func matchedShare(out []byte) float64 {
	for _, line := range strings.Split(string(out), "\n") {
		rest, ok := strings.CutPrefix(line, "matched ")
		if !ok {
			continue
		}
		v, _, ok := strings.Cut(rest, "%")
		if f, err := strconv.ParseFloat(v, 64); ok && err == nil {
			return f / 100
		}
	}
	return 0
}

func run(bin string, args ...string) (stdout, stderr []byte, err error) {
	cmd := exec.Command(bin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		return nil, e.Bytes(), fmt.Errorf("%s %s: %v: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(e.String()))
	}
	return o.Bytes(), e.Bytes(), nil
}

func relErr(pred, meas float64) float64 { return (pred - meas) / meas }

func printTable(w *os.File, cfg config, rows []row) {
	fmt.Fprintf(w, "Batch %d. Fitting set (pooled for b): %s. Predictions with --fusion %s.\n\n", cfg.batch, strings.Join(cfg.fit, ", "), cfg.fusion)
	fmt.Fprintln(w, "| model | set | threads | measured ms (spread) | matched | (a) description | (b) pooled calibration | (c) own trace |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	cell := func(pred, meas float64) string {
		if pred <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f (%+.0f%%)", pred, 100*relErr(pred, meas))
	}
	for _, r := range rows {
		set := "fit"
		if r.Heldout {
			set = "held out"
		}
		if r.Err != "" {
			fmt.Fprintf(w, "| %s | %s | %d | failed: %s | | | | |\n", r.Model, set, r.Threads, firstLine(r.Err))
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %d | %.2f (%.0f%%) | %.0f%% | %s | %s | %s |\n", r.Model, set, r.Threads, r.MeasuredMS, r.SpreadPct,
			100*r.Matched, cell(r.Default, r.MeasuredMS), cell(r.Pooled, r.MeasuredMS), cell(r.Own, r.MeasuredMS))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Median absolute error:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| set | threads | models | (a) description | (b) pooled calibration | (c) own trace |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, held := range []bool{false, true} {
		for _, t := range cfg.threads {
			var a, b, c []float64
			for _, r := range rows {
				if r.Heldout != held || r.Threads != t || r.Err != "" {
					continue
				}
				add := func(s *[]float64, pred float64) {
					if pred > 0 {
						*s = append(*s, math.Abs(relErr(pred, r.MeasuredMS)))
					}
				}
				add(&a, r.Default)
				add(&b, r.Pooled)
				add(&c, r.Own)
			}
			set := "fit (in sample)"
			if held {
				set = "held out"
			}
			fmt.Fprintf(w, "| %s | %d | %d | %s | %s | %s |\n", set, t, len(a), pct(a), pct(b), pct(c))
		}
	}
	// The fitting set's leave-one-model-out error of (b): the figure a
	// change to the calibration is chosen by.
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Leave one fitting model out (each fitting model predicted by the pool of the others; the figures calibration changes are chosen by):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| threads | models | (b) pooled, whole model | calibration alone, whole model | calibration alone, median op |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, t := range cfg.threads {
		var loo, whole, ops []float64
		for _, r := range rows {
			if r.Heldout || r.Threads != t || r.Err != "" {
				continue
			}
			if r.LeaveOneOut > 0 {
				loo = append(loo, math.Abs(relErr(r.LeaveOneOut, r.MeasuredMS)))
			}
			if c := r.LeaveOneOutCalibrated; c != nil {
				whole = append(whole, c.WholeErr)
				ops = append(ops, c.OpsErr)
			}
		}
		fmt.Fprintf(w, "| %d | %d | %s | %s | %s |\n", t, len(loo), pct(loo), pct(whole), pct(ops))
	}
}

// printStability says how much the machine moved: the peak every
// profile run measured, and how far apart one model's repetitions were.
func printStability(w *os.File, cfg config, reps map[int][]map[string]measurement) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Stability over the repetitions:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| threads | peak FLOP/s, every profile run: min / median / max | (max-min)/median | one model's median run, slowest / fastest repetition: median over models (worst) |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, t := range cfg.threads {
		var peaks, ratios []float64
		worst := 0.0
		names := map[string]bool{}
		for _, rep := range reps[t] {
			for name, m := range rep {
				if m.err == "" && m.peakFLOPS > 0 {
					peaks = append(peaks, m.peakFLOPS)
				}
				names[name] = true
			}
		}
		for name := range names {
			lo, hi := math.Inf(1), 0.0
			for _, rep := range reps[t] {
				if m := rep[name]; m.err == "" && m.medianMS > 0 {
					lo, hi = math.Min(lo, m.medianMS), math.Max(hi, m.medianMS)
				}
			}
			if hi > 0 {
				ratios = append(ratios, hi/lo)
				worst = math.Max(worst, hi/lo)
			}
		}
		if len(peaks) == 0 {
			continue
		}
		sort.Float64s(peaks)
		med := stats.Median(peaks)
		fmt.Fprintf(w, "| %d | %.3g / %.3g / %.3g (n=%d) | %.0f%% | %.2fx (%.2fx) |\n", t, peaks[0], med, peaks[len(peaks)-1], len(peaks),
			100*(peaks[len(peaks)-1]-peaks[0])/med, stats.Median(ratios), worst)
	}
}

func pct(v []float64) string {
	if len(v) == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f%% (n=%d)", 100*stats.Median(v), len(v))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "cpuaccuracy: "+format+"\n", args...)
	os.Exit(1)
}

// peakStability measures the peak n times per thread count with
// ort.DefaultSettle (what profile --runtime onnxruntime runs) and with
// the fixed 5 rounds it replaced, alternating, and prints for each the
// FLOP/s min / median / max, (max - min) / median and the share within
// 10% of the median (issue 19: a peak that moves more than 10% between
// two runs of the same command is a bug).
func peakStability(w io.Writer, lib, threads string, n int) error {
	if lib == "" {
		var err error
		if lib, err = ort.Find(""); err != nil {
			return err
		}
	}
	ways := []struct {
		name string
		st   ort.Settle
	}{{"fixed 5 rounds (before)", ort.FixedRounds(5)}, {"settled (profile now)", ort.DefaultSettle}}
	fmt.Fprintln(w, "| threads | repetition | runs | peak FLOP/s min / median / max | (max-min)/median | within 10% of median | rounds: median (max) | not settled | seconds per measurement (median) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, s := range strings.Split(threads, ",") {
		t, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return err
		}
		flops := make([][]float64, len(ways))
		rounds := make([][]float64, len(ways))
		secs := make([][]float64, len(ways))
		unsettled := make([]int, len(ways))
		for i := range n {
			for k := range ways {
				// Alternate which goes first, so neither always follows
				// the other.
				k = (k + i) % len(ways)
				began := time.Now()
				p, err := ort.MeasurePeakWith(context.Background(), ort.Options{Library: lib, Threads: t}, ways[k].st)
				if err != nil {
					return err
				}
				flops[k] = append(flops[k], p.FLOPS.Best)
				rounds[k] = append(rounds[k], float64(p.Rounds))
				secs[k] = append(secs[k], time.Since(began).Seconds())
				if !p.Settled {
					unsettled[k]++
				}
				fmt.Fprintf(os.Stderr, "threads %d run %d %s: %.4g FLOP/s, %d rounds, settled %v, spread %.1f%%\n", t, i+1, ways[k].name, p.FLOPS.Best, p.Rounds, p.Settled, 100*p.RoundSpread())
			}
		}
		for k, way := range ways {
			f := flops[k]
			med := stats.Median(f)
			within := 0
			for _, v := range f {
				if math.Abs(v-med) <= 0.1*med {
					within++
				}
			}
			fmt.Fprintf(w, "| %d | %s | %d | %.3g / %.3g / %.3g | %.1f%% | %d/%d | %.0f (%.0f) | %d | %.1f |\n", t, way.name, len(f),
				slices.Min(f), med, slices.Max(f), 100*(slices.Max(f)-slices.Min(f))/med, within, len(f),
				stats.Median(rounds[k]), slices.Max(rounds[k]), unsettled[k], stats.Median(secs[k]))
		}
	}
	return nil
}
