package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"

	"github.com/opplace/opplace/internal/output"
	"github.com/opplace/opplace/profile"
	"github.com/opplace/opplace/profile/driver"
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
	opts, err := f.options()
	if err != nil {
		return err
	}
	res, err := driver.Pool(driver.PoolOptions{From: f.from, Holdout: f.holdout, Model: modelPath, Import: opts,
		DeviceType: f.deviceType, Threads: f.threads, LoadModel: loadModel})
	for _, r := range res.Refits {
		if r.Err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s: cannot refit its features from its model: %v\n", r.Model, r.Err)
			continue
		}
		fmt.Fprintf(summary, "%s: profile without op features; %d measurements refitted from the model\n", r.Model, r.Refitted)
	}
	var b bytes.Buffer
	for _, pd := range res.Calibrated {
		dt, cal := pd.DeviceType, pd.Calibration
		fmt.Fprintf(summary, "calibrated %s on %d distinct ops of %d model(s): median relative error %.1f%% -> %.1f%%, p90 %.1f%% -> %.1f%%\n",
			dt.ThreadsLabel(), cal.After.Samples, len(cal.Models), 100*cal.Before.MedianRelErr, 100*cal.After.MedianRelErr,
			100*cal.Before.P90RelErr, 100*cal.After.P90RelErr)
		if f.report {
			fmt.Fprintf(&b, "\n== %s\n", dt.ThreadsLabel())
			writeCalibration(&b, cal)
		}
		for _, h := range pd.Holdouts {
			writeHoldout(&b, h.Path, h.Calibrated, h.Roofline, dt)
		}
	}
	var nm *driver.NoMatchError
	if errors.As(err, &nm) {
		return usageError{fmt.Errorf("no device type of the --from profiles matches --device-type %q --threads %d", f.deviceType, f.threads)}
	}
	if err != nil {
		return err
	}
	if _, err := summary.Write(b.Bytes()); err != nil {
		return err
	}
	out := f.out
	if out == "" {
		out = "/dev/stdout"
	}
	return run.Commit(output.File{What: "--out", Path: out, Write: res.Profile.Write})
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
