package pipeline

import (
	"fmt"
	"github.com/opplace/opplace/internal/printable"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/strategy"
)

// WriteComparisonTable renders c as opplace compare's table: the model,
// cluster and bound, one row per strategy, then the rows' errors and
// notes and the warnings.
func WriteComparisonTable(w io.Writer, c *Comparison) {
	w = printable.Writer(w) // names from the model and cluster files
	fmt.Fprintf(w, "model:       %s, %s (%d ops; %s)\n", c.Model, c.Mode, c.Ops, c.Groups)
	if c.Precision != "" {
		fmt.Fprintf(w, "precision:   %s\n", c.Precision)
	}
	if c.Runtime != "" {
		fmt.Fprintf(w, "runtime:     %s\n", c.Runtime)
	}
	fmt.Fprintf(w, "cluster:     %s\n", c.Cluster)
	if len(c.Rules) > 0 {
		fmt.Fprintf(w, "rules:       %d, every row keeps the hard ones: %s\n", len(c.Rules), strings.Join(c.Rules, "; "))
	}
	fmt.Fprintf(w, "lower bound: %.3f ms (every plan of the space", c.LowerBoundMS)
	if c.LowerBoundKind != "" {
		fmt.Fprintf(w, "; %s", c.LowerBoundKind)
	}
	fmt.Fprint(w, ")")
	for _, st := range c.Strategies {
		if st.Family == strategy.FamilyPlacement && st.Fits && st.LowerBoundMS > c.LowerBoundMS {
			// A placement runs the whole batch along the critical path.
			fmt.Fprintf(w, "; placement rows: %.3f ms, with the %s", st.LowerBoundMS, st.LowerBoundKind)
			break
		}
	}
	fmt.Fprint(w, "\n\n")
	tw := printable.NewColumns(tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight))
	head := []string{"strategy", "family", "shape", "step ms", "samples/s", "gap", "fits"}
	for _, d := range c.Devices {
		head = append(head, d.Name+" peak")
	}
	head = append(head, "cross-device", "solve ms")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	var notes []string
	for _, s := range c.Strategies {
		row := []string{s.Strategy, s.Family, s.Shape}
		if s.PeakMemoryBytes == nil {
			row = append(row, "-", "-", "-", "failed")
			for range c.Devices {
				row = append(row, "-")
			}
			row = append(row, "-")
		} else {
			fits := "yes"
			if !s.Fits {
				fits = "NO"
			}
			row = append(row, fmt.Sprintf("%.3f", s.PredictedStepMS), fmt.Sprintf("%.1f", s.ThroughputSamplesPerS), fmt.Sprintf("%+.1f%%", 100*s.Gap), fits)
			for _, b := range s.PeakMemoryBytes {
				row = append(row, cluster.FormatBytes(b))
			}
			row = append(row, cluster.FormatBytes(s.CrossDeviceBytes))
		}
		row = append(row, fmt.Sprintf("%.1f", s.SolveMS))
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		if s.Error != "" {
			notes = append(notes, s.Strategy+": "+s.Error)
		}
		for _, n := range s.Notes {
			notes = append(notes, s.Strategy+": "+n)
		}
	}
	tw.Flush()
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
	}
	for _, wn := range c.Warnings {
		fmt.Fprintf(w, "warning: %s\n", wn)
	}
}
