package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/opplace/opplace/internal/output"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/profile"
)

// runPooled is profile --from A --from B ...: one profile holding every
// measurement of A, B, ... and per device type entry (name, threads) one
// calibration fitted to all of them. MODEL, when given, fills the op
// features of profiles (and held-out ones) written without them.
func runPooled(cmd *cobra.Command, modelPath string, f *profileFlags) error {
	switch {
	case f.importFile != "":
		return usageError{errors.New("--import and --from exclude each other")}
	case f.clusterOut != "":
		return usageError{errors.New("--cluster-out writes the measured CPU's cluster; it needs a measurement, not --from")}
	case f.threads < 0:
		return usageError{errors.New("--threads must be non-negative")}
	}
	inputs := []output.Input{{What: "the model", Path: modelPath}}
	for _, p := range f.from {
		inputs = append(inputs, output.Input{What: "a --from profile", Path: p})
	}
	for _, p := range f.holdout {
		inputs = append(inputs, output.Input{What: "a --holdout profile", Path: p})
	}
	run := output.Run{Inputs: inputs, Stdout: cmd.OutOrStdout()}
	if err := run.Check(output.File{What: "--out", Path: f.out}); err != nil {
		return err
	}
	summary := cmd.ErrOrStderr()
	if f.out != "" {
		summary = cmd.OutOrStdout()
	}
	var ps []*profile.Profile
	named := map[*profile.Profile]bool{} // profiles that name their model
	for _, path := range f.from {
		p, err := profile.Load(path)
		if err != nil {
			return &pipeline.InputError{Err: err}
		}
		named[p] = p.Model != ""
		if p.Model == "" {
			p.Model = path
		}
		ps = append(ps, p)
	}
	var holdouts []*profile.Profile
	for _, path := range f.holdout {
		p, err := profile.Load(path)
		if err != nil {
			return &pipeline.InputError{Err: err}
		}
		named[p] = p.Model != ""
		holdouts = append(holdouts, p)
	}
	if modelPath != "" {
		opts, err := f.options()
		if err != nil {
			return err
		}
		m, err := loadModel(modelPath, opts)
		if err != nil {
			return err
		}
		for _, p := range append(slices.Clone(ps), holdouts...) {
			profile.FillFeatures(p, m.Graph)
		}
	}
	// Profiles written before measurements carried their op's features
	// are refitted from the model they name, at their batch (or the shape
	// flags given); ops whose shapes then differ keep none, and the
	// calibration's error says how to refit by hand.
	for _, p := range append(slices.Clone(ps), holdouts...) {
		if p.MissingFeatures() == 0 || !named[p] {
			continue
		}
		if st, err := os.Stat(p.Model); err != nil || st.IsDir() {
			continue
		}
		opts, err := f.options()
		if err != nil {
			return err
		}
		if opts.Batch == 0 && p.Batch > 0 {
			opts.Batch = p.Batch
		}
		m, err := loadModel(p.Model, opts)
		if err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s: cannot refit its features from its model: %v\n", p.Model, err)
			continue
		}
		n := profile.FillFeatures(p, m.Graph)
		fmt.Fprintf(summary, "%s: profile without op features; %d measurements refitted from the model\n", p.Model, n)
	}
	merged := profile.Merge(ps)
	var b bytes.Buffer
	fitted := 0
	for i := range merged.DeviceTypes {
		dt := &merged.DeviceTypes[i]
		if f.deviceType != "" && dt.Name != f.deviceType || f.threads != 0 && dt.Threads != f.threads {
			continue
		}
		cal, err := profile.CalibratePooled(ps, dt.Name, dt.Threads)
		if err != nil {
			return &pipeline.InputError{Err: err}
		}
		dt.Calibration = cal
		fitted++
		fmt.Fprintf(summary, "calibrated %s on %d distinct ops of %d model(s): median relative error %.1f%% -> %.1f%%, p90 %.1f%% -> %.1f%%\n",
			dt.ThreadsLabel(), cal.After.Samples, len(cal.Models), 100*cal.Before.MedianRelErr, 100*cal.After.MedianRelErr,
			100*cal.Before.P90RelErr, 100*cal.After.P90RelErr)
		if f.report {
			fmt.Fprintf(&b, "\n== %s\n", dt.ThreadsLabel())
			writeCalibration(&b, cal)
		}
		for j, h := range holdouts {
			hd := h.DeviceTypeAt(dt.Name, dt.Threads)
			if hd == nil {
				continue
			}
			// The held-out profile's measurements, priced on the pooled
			// roofline.
			q := h.Relabel(hd, dt)
			writeHoldout(&b, f.holdout[j], profile.CheckCalibration(cal, dt, q), profile.CheckCalibration(nil, dt, q), dt)
		}
	}
	if fitted == 0 {
		return usageError{fmt.Errorf("no device type of the --from profiles matches --device-type %q --threads %d", f.deviceType, f.threads)}
	}
	if _, err := summary.Write(b.Bytes()); err != nil {
		return err
	}
	out := f.out
	if out == "" {
		out = "/dev/stdout"
	}
	return run.Commit(output.File{What: "--out", Path: out, Write: merged.Write})
}

// writeHoldout prints how a calibration priced a held-out profile, next to
// the uncalibrated roofline.
func writeHoldout(w io.Writer, path string, c, roof profile.Check, dt *profile.DeviceType) {
	fmt.Fprintf(w, "\nheld out %s on %s: %d distinct ops\n", path, dt.ThreadsLabel(), c.Ops.Samples)
	fmt.Fprintf(w, "  %-12s %5s  %14s  %14s\n", "family", "ops", "roofline med", "calibrated med")
	var fams []string
	for k := range c.Families {
		fams = append(fams, k)
	}
	slices.Sort(fams)
	for _, k := range fams {
		fmt.Fprintf(w, "  %-12s %5d  %13.1f%%  %13.1f%%\n", k, c.Families[k].Samples, 100*roof.Families[k].MedianRelErr, 100*c.Families[k].MedianRelErr)
	}
	fmt.Fprintf(w, "  %-12s %5d  %13.1f%%  %13.1f%%\n", "all ops", c.Ops.Samples, 100*roof.Ops.MedianRelErr, 100*c.Ops.MedianRelErr)
	fmt.Fprintf(w, "  whole model: measured %.3f ms, calibrated %.3f ms (%.1f%% error), roofline %.3f ms (%.1f%% error)\n",
		c.MeasuredS*1e3, c.PredictedS*1e3, 100*c.WholeRelErr, roof.PredictedS*1e3, 100*roof.WholeRelErr)
}
