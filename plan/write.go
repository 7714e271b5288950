package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"

	"github.com/opplace/opplace/cluster"
)

// Format is an output format for a plan.
type Format string

// The formats -o accepts.
const (
	JSON  Format = "json"
	YAML  Format = "yaml"
	Table Format = "table"
)

// ParseFormat reads a -o value.
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(s)); f {
	case JSON, YAML, Table:
		return f, nil
	}
	return "", fmt.Errorf("unknown output format %q: use json, yaml or table", s)
}

// Write renders p in format f.
func Write(w io.Writer, p *Plan, f Format) error {
	switch f {
	case JSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(p)
	case YAML:
		enc := yaml.NewEncoder(w)
		enc.SetIndent(2)
		if err := enc.Encode(p); err != nil {
			return err
		}
		return enc.Close()
	case Table:
		return WriteTable(w, p)
	}
	return fmt.Errorf("unknown output format %q", f)
}

// WriteTable renders the human summary: the prediction beside its bound,
// then one row per device.
func WriteTable(w io.Writer, p *Plan) error {
	var b strings.Builder
	fmt.Fprintf(&b, "model:      %s (%s)\n", p.Model, p.Mode)
	fmt.Fprintf(&b, "cluster:    %s, %d devices\n", p.Cluster, len(p.Devices))
	fmt.Fprintf(&b, "strategy:   %s\n", p.Strategy)
	if len(p.Candidates) > 1 {
		var parts []string
		for _, c := range p.Candidates {
			switch {
			case c.Error != "":
				parts = append(parts, c.Strategy+" failed")
			case !c.Fits:
				parts = append(parts, fmt.Sprintf("%s %.3f ms (does not fit)", c.Strategy, c.PredictedStepMS))
			default:
				parts = append(parts, fmt.Sprintf("%s %.3f ms", c.Strategy, c.PredictedStepMS))
			}
		}
		fmt.Fprintf(&b, "tried:      %s\n", strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, "step:       %.3f ms predicted, %.3f ms lower bound, gap %.1f%%\n", p.PredictedStepMS, p.LowerBoundMS, 100*p.Gap)
	fmt.Fprintf(&b, "transfers:  %d, %s across devices\n", len(p.Transfers), cluster.FormatBytes(p.CrossDeviceBytes))
	fits := "yes"
	if !p.Fits {
		fits = "NO: a device exceeds its memory"
	}
	fmt.Fprintf(&b, "fits:       %s\n\n", fits)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tTYPE\tHOST\tOPS\tBUSY (ms)\tUTIL\tPEAK MEMORY\tCAPACITY\tUSED")
	for _, d := range p.Devices {
		util, used := 0.0, 0.0
		if p.PredictedStepMS > 0 {
			util = d.BusyMS / p.PredictedStepMS
		}
		if d.MemoryBytes > 0 {
			used = float64(d.PeakMemoryBytes) / float64(d.MemoryBytes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.3f\t%.0f%%\t%s\t%s\t%.0f%%\n",
			d.Name, d.Type, d.Host, d.Ops, d.BusyMS, 100*util, cluster.FormatBytes(d.PeakMemoryBytes), cluster.FormatBytes(d.MemoryBytes), 100*used)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(p.Stages) > 0 {
		fmt.Fprintf(w, "\npipeline: %s schedule, %d micro-batches, bottleneck %.3f ms per micro-batch, bubble %.1f%%\n",
			p.Schedule, p.MicroBatches, p.BottleneckMS, 100*p.BubbleFraction)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "STAGE\tDEVICES\tOPS\tTIME (ms)\tCOMPUTE\tCOMM\tSYNC\tSENDS\tPEAK MEMORY\tFIRST OP\tLAST OP")
		for _, s := range p.Stages {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%s\t%s\t%s\t%s\n", s.Index, strings.Join(s.Devices, ","), len(s.Ops),
				s.TimeMS, s.ComputeMS, s.CommMS, s.SyncMS, cluster.FormatBytes(s.SendBytes), cluster.FormatBytes(s.PeakMemoryBytes), s.FirstOp, s.LastOp)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, warn := range p.Warnings {
		if _, err := fmt.Fprintf(w, "warning: %s\n", warn); err != nil {
			return err
		}
	}
	return nil
}

// WriteFileAtomic writes a file through a temporary file in the same
// directory and renames it into place, so a failed or interrupted run
// never leaves a partial file behind.
func WriteFileAtomic(path string, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = write(tmp); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
