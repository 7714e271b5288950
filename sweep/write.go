package sweep

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// Formats WriteResult writes.
const (
	Table = "table"
	CSV   = "csv"
	JSON  = "json"
)

// Formats lists the formats of WriteResult.
func Formats() []string { return []string{Table, CSV, JSON} }

// WriteResult writes r in format (Table, CSV or JSON).
func WriteResult(w io.Writer, r *Result, format string) error {
	switch format {
	case Table:
		return WriteTable(w, r)
	case CSV:
		return WriteCSV(w, r)
	case JSON:
		return WriteJSON(w, r)
	}
	return fmt.Errorf("unknown format %q: use table, csv or json", format)
}

// jsonResult is the JSON form: the result and its format version.
type jsonResult struct {
	// Version is the form's version: fields are only ever added.
	Version int `json:"version"`
	*Result
}

// WriteJSON writes r as one indented JSON object: version, model, job,
// mode and points (docs/sweep.md#json), the same bytes for the same
// inputs.
func WriteJSON(w io.Writer, r *Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(jsonResult{Version: 1, Result: r})
}

// csvHeader are the CSV columns, the JSON field names.
var csvHeader = []string{"type", "devices", "batch", "cluster", "hosts", "fits", "throughput_samples_per_s", "steps_per_s", "step_ms",
	"strategy", "family", "shape", "peak_memory_bytes", "memory_bytes", "price_per_hour", "samples_per_dollar", "error", "why_not"}

// WriteCSV writes one row per point under a header row of the JSON
// field names.
func WriteCSV(w io.Writer, r *Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	for _, p := range r.Points {
		row := []string{p.Type, strconv.Itoa(p.Devices), strconv.FormatInt(p.Batch, 10), p.Cluster, strconv.Itoa(p.Hosts), strconv.FormatBool(p.Fits),
			f(p.ThroughputSamplesPerS), f(p.StepsPerS), f(p.StepMS), p.Strategy, p.Family, p.Shape,
			strconv.FormatInt(p.PeakMemoryBytes, 10), strconv.FormatInt(p.MemoryBytes, 10), f(p.PricePerHour), f(p.SamplesPerDollar),
			strconv.FormatBool(p.Error), p.WhyNot}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteTable writes one line per point for people; a point that does not
// fit shows why in its last column.
func WriteTable(w io.Writer, r *Result) error {
	priced := false
	for _, p := range r.Points {
		priced = priced || p.PricePerHour > 0
	}
	fmt.Fprintf(w, "model: %s (%s)\n\n", r.Model, r.Mode)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "TYPE\tDEVICES\tBATCH\tSAMPLES/S\tSTEP (ms)\tSTRATEGY\tSHAPE\tPEAK MEMORY\tFITS"
	if priced {
		head += "\t$/HOUR\tSAMPLES/$"
	}
	fmt.Fprintln(tw, head+"\tWHY NOT")
	for _, p := range r.Points {
		fits := "yes"
		if !p.Fits {
			fits = "no"
		}
		if p.Error {
			fits = "error"
		}
		line := fmt.Sprintf("%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s", p.Type, p.Devices, batch(p.Batch), num(p.ThroughputSamplesPerS, "%.1f"),
			num(p.StepMS, "%.3f"), dash(p.Strategy), dash(p.Shape), memory(p.PeakMemoryBytes, p.MemoryBytes), fits)
		if priced {
			line += "\t" + num(p.PricePerHour, "%.2f") + "\t" + num(p.SamplesPerDollar, "%.0f")
		}
		fmt.Fprintln(tw, line+"\t"+dash(p.Reason))
	}
	return tw.Flush()
}

// WriteTimes writes how long the sweep took and the stages that took
// 1% of it or more; the times vary from run to run.
func WriteTimes(w io.Writer, r *Result) {
	fmt.Fprintf(w, "%d points in %.2f s:", len(r.Points), r.Wall.Seconds())
	for _, s := range r.Stages {
		if s.Duration >= r.Wall/100 {
			fmt.Fprintf(w, " %s %.2f s,", s.Stage, s.Duration.Seconds())
		}
	}
	fmt.Fprintln(w, " others under 1% each")
}

func batch(b int64) string {
	if b == 0 {
		return "model's"
	}
	return strconv.FormatInt(b, 10)
}

func num(v float64, format string) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func memory(peak, capacity int64) string {
	if peak == 0 {
		return "-"
	}
	return fmt.Sprintf("%s of %s", formatGiB(peak), formatGiB(capacity))
}

// Gavel is a throughput file in the form Gavel's policies read
// (read_all_throughputs_json_v2 in Gavel's scheduler/utils.py): worker
// type → "('JOB TYPE', SCALE_FACTOR)" → {"null": steps per second}, the
// job type "JOB (batch size N)" and the scale factor the device count. A
// point with no plan that fits has 0, as Gavel's own files give a job
// that does not run on a worker type.
type Gavel map[string]map[string]map[string]float64

// GavelOf is r's Gavel file; job names the job type (r.Job when empty).
func GavelOf(r *Result, job string) Gavel {
	if job == "" {
		job = r.Job
	}
	g := Gavel{}
	for _, p := range r.Points {
		jt := job
		if p.Batch > 0 {
			jt = fmt.Sprintf("%s (batch size %d)", job, p.Batch)
		}
		if g[p.Type] == nil {
			g[p.Type] = map[string]map[string]float64{}
		}
		g[p.Type][fmt.Sprintf("('%s', %d)", jt, p.Devices)] = map[string]float64{"null": p.StepsPerS}
	}
	return g
}

// WriteGavel writes r's Gavel file (see Gavel), keys sorted.
func WriteGavel(w io.Writer, r *Result, job string) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "    ")
	enc.SetEscapeHTML(false)
	return enc.Encode(GavelOf(r, job))
}
