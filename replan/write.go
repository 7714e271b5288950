package replan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/plan"
)

// Formats WriteResult writes.
const (
	Table = "table"
	JSON  = "json"
	YAML  = "yaml"
)

// Formats lists the formats of WriteResult.
func Formats() []string { return []string{Table, JSON, YAML} }

// WriteResult writes r in format (Table, JSON or YAML).
func WriteResult(w io.Writer, r *Result, format string) error {
	switch format {
	case Table:
		return WriteTable(w, r)
	case JSON:
		return WriteJSON(w, r)
	case YAML:
		return WriteYAML(w, r)
	}
	return fmt.Errorf("unknown format %q: use table, json or yaml", format)
}

// jsonResult is the JSON form: the result and its format version.
type jsonResult struct {
	// Version is the form's version: fields are only ever added.
	Version int `json:"version"`
	*Result
}

// WriteJSON writes r as one indented JSON object (docs/replan.md#json),
// the same bytes for the same inputs.
func WriteJSON(w io.Writer, r *Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(jsonResult{Version: 1, Result: r})
}

// WriteYAML writes the JSON form as YAML, its fields in the same order
// under the same names.
func WriteYAML(w io.Writer, r *Result) error {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, r); err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(buf.Bytes(), &doc); err != nil {
		return err
	}
	plainStyle(&doc)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return err
	}
	return enc.Close()
}

// plainStyle drops the flow style JSON's brackets give the nodes, so
// the YAML reads as block YAML.
func plainStyle(n *yaml.Node) {
	n.Style &^= yaml.FlowStyle
	if n.Kind == yaml.ScalarNode && n.Style&(yaml.DoubleQuotedStyle) != 0 && !needsQuotes(n.Value) {
		n.Style &^= yaml.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		plainStyle(c)
	}
}

// needsQuotes says a string would read back as something else unquoted.
func needsQuotes(s string) bool {
	var v any
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		return true
	}
	str, ok := v.(string)
	return !ok || str != s
}

// WriteTable writes the re-plan for people: the change, the chosen plan
// against the old and the from-scratch one, the chosen plan's moves, and
// every candidate scored.
func WriteTable(w io.Writer, r *Result) error {
	b := r.Before
	fmt.Fprintf(w, "old plan:     %s: %s on %s, step %.3f ms\n", r.OldPlan, b.Strategy, r.OldCluster, b.StepMS)
	fmt.Fprintf(w, "model:        %s (%s%s)\n", r.Model, r.Mode, batchText(r.Batch))
	fmt.Fprintf(w, "new cluster:  %s: %d kept, lost %s, added %s\n", r.Cluster, len(r.Devices.Kept), list(r.Devices.Lost), list(r.Devices.Added))
	if b.RunsOnNew {
		fmt.Fprintf(w, "old plan now: runs as it is, step %.3f ms\n", b.NewStepMS)
	} else {
		fmt.Fprintf(w, "old plan now: cannot run: %s\n", oneLine(b.Why))
	}
	state := fmt.Sprintf("weights %s, optimizer state %s", cluster.FormatBytes(r.StateBytes.Weights), cluster.FormatBytes(r.StateBytes.Optimizer))
	if r.Gradients {
		state += ", gradients " + cluster.FormatBytes(r.StateBytes.Gradients)
	}
	fmt.Fprintf(w, "state:        %s\n", state)
	fmt.Fprintf(w, "objective:    step x %s + migration; the checkpoint read at %s/s\n\n", steps(r.AmortizeSteps), rate(r.CheckpointBandwidth))

	fmt.Fprintf(w, "chosen:       %s\n", describe(&r.Chosen))
	fmt.Fprintf(w, "              step %.3f ms, migration %s, objective %s\n", r.Chosen.StepMS, migrationText(&r.Chosen), plan.FormatMS(r.Chosen.ObjectiveMS))
	if r.ChosenIsFromScratch {
		fmt.Fprintf(w, "from scratch: the chosen plan\n")
	} else {
		fmt.Fprintf(w, "from scratch: %s\n", describe(&r.FromScratch))
		fmt.Fprintf(w, "              step %.3f ms, migration %s, objective %s\n", r.FromScratch.StepMS, migrationText(&r.FromScratch), plan.FormatMS(r.FromScratch.ObjectiveMS))
	}
	switch {
	case r.BreakEvenSteps == nil:
		fmt.Fprintf(w, "break-even:   never: the from-scratch plan's step is no shorter\n")
	case *r.BreakEvenSteps == 0 && !r.ChosenIsFromScratch:
		fmt.Fprintf(w, "break-even:   -: the from-scratch plan ties the chosen\n")
	case *r.BreakEvenSteps == 0:
		fmt.Fprintf(w, "break-even:   -\n")
	default:
		fmt.Fprintf(w, "break-even:   the from-scratch plan pays off after %d steps (K is %d)\n", *r.BreakEvenSteps, r.AmortizeSteps)
	}
	fmt.Fprintf(w, "step:         %.3f ms before (%s), %.3f ms after\n", b.StepMS, r.OldCluster, r.Chosen.StepMS)

	if len(r.Chosen.Moves) > 0 {
		fmt.Fprintf(w, "\nmoves of the chosen plan:\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		head := "FROM\tTO\tBYTES\tWEIGHTS\tOPTIMIZER"
		if r.Gradients {
			head += "\tGRADIENTS"
		}
		fmt.Fprintln(tw, head+"\tSTART (ms)\tEND (ms)")
		for _, m := range r.Chosen.Moves {
			from := m.From
			if m.Relayed {
				from += " (relay)"
			}
			line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s", from, m.To, cluster.FormatBytes(m.Bytes), cluster.FormatBytes(m.WeightBytes), cluster.FormatBytes(m.OptimizerBytes))
			if r.Gradients {
				line += "\t" + cluster.FormatBytes(m.GradientBytes)
			}
			fmt.Fprintf(tw, "%s\t%.3f\t%.3f\n", line, m.StartMS, m.EndMS)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	fmt.Fprintf(w, "\ncandidates (objective = step x %d + migration):\n", r.AmortizeSteps)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STRATEGY\tFAMILY\tSHAPE\tSTEP (ms)\tMIGRATION\tOVER LINKS\tFROM CHECKPOINT\tOBJECTIVE\tFITS\tWHY NOT CHOSEN")
	for i := range r.Candidates {
		o := &r.Candidates[i]
		name := o.Strategy
		if o.Renamed {
			name += " (renamed)"
		}
		why := o.Why
		if o.Strategy == r.Chosen.Strategy && o.Keep == r.Chosen.Keep {
			why = "chosen"
		}
		if !o.Fits {
			step := "-"
			if o.StepMS > 0 {
				step = fmt.Sprintf("%.3f", o.StepMS)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t-\t-\t-\t-\tno\t%s\n", name, dash(o.Family), dash(o.Shape), step, dash(why))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3f\t%s\t%s\t%s\t%s\tyes\t%s\n", name, dash(o.Family), dash(o.Shape), o.StepMS, plan.FormatMS(o.MigrationMS),
			cluster.FormatBytes(o.LinkBytes), cluster.FormatBytes(o.CheckpointBytes), plan.FormatMS(o.ObjectiveMS), dash(why))
	}
	// The pruned strategies of one family share its bound: one line.
	for i := 0; i < len(r.Pruned); {
		j := i + 1
		for j < len(r.Pruned) && r.Pruned[j].Family == r.Pruned[i].Family && r.Pruned[j].BoundMS == r.Pruned[i].BoundMS {
			j++
		}
		p := r.Pruned[i]
		name := p.Strategy
		switch n := j - i; {
		case n == 2:
			name += ", " + r.Pruned[i+1].Strategy
		case n > 2:
			name += fmt.Sprintf(" and %d more", n-1)
		}
		fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\tpruned: at least %.3f ms a step, %s over %s\n", name, p.Family, p.BoundMS,
			plan.FormatMS(p.BoundMS*float64(r.AmortizeSteps)), steps(r.AmortizeSteps))
		i = j
	}
	return tw.Flush()
}

// WriteTimes writes how long the re-plan took, part by part; the times
// vary from run to run.
func WriteTimes(w io.Writer, r *Result) {
	fmt.Fprintf(w, "re-planned in %.3f s:", r.Wall.Seconds())
	for i, s := range r.Stages {
		sep := ","
		if i == len(r.Stages)-1 {
			sep = ""
		}
		fmt.Fprintf(w, " %s %.3f s%s", s.Stage, s.Duration.Seconds(), sep)
	}
	fmt.Fprintln(w)
}

func describe(o *Option) string {
	s := o.Strategy
	if o.Keep {
		s = "the old plan as it is"
	}
	s += " (" + o.Family
	if o.Shape != "" {
		s += ", " + o.Shape
	}
	s += ")"
	if o.Renamed {
		s += ", devices renamed to keep state in place"
	}
	return s
}

func migrationText(o *Option) string {
	if o.LinkBytes+o.CheckpointBytes == 0 {
		return "none"
	}
	return fmt.Sprintf("%s (%s over links, %s from the checkpoint)", plan.FormatMS(o.MigrationMS), cluster.FormatBytes(o.LinkBytes), cluster.FormatBytes(o.CheckpointBytes))
}

func batchText(b int64) string {
	if b == 0 {
		return ""
	}
	return fmt.Sprintf(", batch %d", b)
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// rate prints bytes per second with a decimal unit, as cluster files
// give bandwidths: "1.20 GB".
func rate(bps float64) string {
	units := []string{"B", "KB", "MB", "GB", "TB"}
	i := 0
	for bps >= 1000 && i < len(units)-1 {
		bps /= 1000
		i++
	}
	return fmt.Sprintf("%.2f %s", bps, units[i])
}

// oneLine keeps a message on one line of the table.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func steps(k int64) string {
	if k == 1 {
		return "1 step"
	}
	return fmt.Sprintf("%d steps", k)
}
