package plan

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/internal/printable"
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
		return writeJSON(w, p)
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
	// Names come from model and cluster files: what a terminal would act
	// on (controls, bidi overrides) is escaped, before the columns are
	// aligned.
	w = printable.Writer(w)
	var b strings.Builder
	fmt.Fprintf(&b, "model:      %s (%s)\n", p.Model, p.Mode)
	if p.Precision != "" {
		fmt.Fprintf(&b, "precision:  %s\n", p.Precision)
	}
	if p.Runtime != "" {
		fmt.Fprintf(&b, "runtime:    %s\n", p.Runtime)
	}
	fmt.Fprintf(&b, "cluster:    %s, %d devices\n", p.Cluster, len(p.Devices))
	fmt.Fprintf(&b, "strategy:   %s\n", p.Strategy)
	if p.Family != "" {
		fmt.Fprintf(&b, "family:     %s\n", p.Family)
	}
	bound := "lower bound"
	if p.LowerBoundKind != "" {
		bound += " (" + p.LowerBoundKind + ")"
	}
	fmt.Fprintf(&b, "step:       %.3f ms predicted, %.3f ms %s, gap %.1f%%\n", p.PredictedStepMS, p.LowerBoundMS, bound, 100*p.Gap)
	if p.ThroughputSamplesPerS > 0 {
		fmt.Fprintf(&b, "throughput: %.1f samples/s (batch %d)\n", p.ThroughputSamplesPerS, p.Batch)
	}
	if p.EstimatedStepMS > 0 {
		fmt.Fprintf(&b, "estimate:   %.3f ms by the strategy's own model (%+.1f%% against the simulator)\n", p.EstimatedStepMS, 100*(p.EstimatedStepMS/p.PredictedStepMS-1))
	}
	fmt.Fprintf(&b, "transfers:  %d, %s across devices\n", len(p.Transfers), cluster.FormatBytes(p.CrossDeviceBytes))
	if len(p.AllReduces) > 0 {
		var bytes int64
		for _, a := range p.AllReduces {
			bytes += a.Bytes
		}
		if kinds := collectiveKinds(p.AllReduces); kinds != "" {
			fmt.Fprintf(&b, "collectives: %s, %s in all\n", kinds, cluster.FormatBytes(bytes))
		} else {
			fmt.Fprintf(&b, "all-reduce: %d buckets, %s of gradients per replica\n", len(p.AllReduces), cluster.FormatBytes(bytes))
		}
	}
	fits := "yes"
	if !p.Fits {
		fits = "NO: a device exceeds its memory"
	}
	fmt.Fprintf(&b, "fits:       %s\n\n", fits)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "DEVICE\tTYPE\tHOST\tOPS\tBUSY (ms)\tUTIL\tPEAK MEMORY\tCAPACITY\tUSED")
	// A row's figures after the host, and the device type with them to
	// tell runs of alike devices.
	figures := make([]string, len(p.Devices))
	alike := make([]string, len(p.Devices))
	for i, d := range p.Devices {
		util, used := 0.0, 0.0
		if p.PredictedStepMS > 0 {
			util = d.BusyMS / p.PredictedStepMS
		}
		if d.MemoryBytes > 0 {
			used = float64(d.PeakMemoryBytes) / float64(d.MemoryBytes)
		}
		figures[i] = fmt.Sprintf("%d\t%.3f\t%.0f%%\t%s\t%s\t%.0f%%",
			d.Ops, d.BusyMS, 100*util, cluster.FormatBytes(d.PeakMemoryBytes), cluster.FormatBytes(d.MemoryBytes), 100*used)
		alike[i] = d.Type + "\t" + figures[i]
	}
	for _, run := range alikeRuns(alike) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", runName(p.Devices, run, func(d Device) string { return d.Name }), p.Devices[run[0]].Type,
			runName(p.Devices, run, func(d Device) string { return d.Host }), figures[run[0]])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if slices.ContainsFunc(p.Devices, func(d Device) bool { return d.Breakdown != nil }) {
		fmt.Fprintf(w, "\nweights held per device (%s; activations are the rest of the peak):\n", p.Precision)
		tw := newTable(w)
		fmt.Fprintln(tw, "DEVICE\tWEIGHTS\tHALF COPY\tGRADIENTS\tOPTIMIZER STATE")
		var held []Device
		var rows []string
		for _, d := range p.Devices {
			if b := d.Breakdown; b != nil && *b != (MemoryBreakdown{}) {
				held = append(held, d)
				rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%s", cluster.FormatBytes(b.WeightBytes), cluster.FormatBytes(b.HalfWeightBytes),
					cluster.FormatBytes(b.GradientBytes), cluster.FormatBytes(b.OptimizerStateBytes)))
			}
		}
		for _, run := range alikeRuns(rows) {
			fmt.Fprintf(tw, "%s\t%s\n", runName(held, run, func(d Device) string { return d.Name }), rows[run[0]])
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(p.Stages) > 1 || len(p.Stages) == 1 && (p.Stages[0].Replicas > 1 || p.MicroBatches > 1) {
		fmt.Fprintf(w, "\nstages: %d", len(p.Stages))
		if p.Schedule != "" {
			fmt.Fprintf(w, ", %s schedule", p.Schedule)
		}
		if p.Schedule != "" || p.Batch > 0 {
			fmt.Fprintf(w, ", %s", Count(max(p.MicroBatches, 1), "micro-batch", "micro-batches"))
		}
		if sizes := microBatchSizes(p.Stages); sizes != "" {
			fmt.Fprintf(w, " of %s per replica", sizes)
		}
		fmt.Fprintf(w, ", bottleneck %.3f ms per micro-batch", p.BottleneckMS)
		if len(p.Stages) > 1 {
			fmt.Fprintf(w, ", bubble %.1f%%", 100*p.BubbleFraction)
		}
		fmt.Fprintln(w)
		tw := newTable(w)
		fmt.Fprintln(tw, "STAGE\tDEVICES\tREPLICAS\tOPS\tTIME (ms)\tCOMPUTE\tCOMM\tSYNC\tALL-REDUCE\tSENDS\tPEAK MEMORY\tFIRST OP\tLAST OP")
		for _, s := range p.Stages {
			reps := fmt.Sprint(s.Replicas)
			if s.Sharding != "" {
				reps += " (" + s.Sharding + ")"
			}
			if s.Recompute {
				reps += " (recompute)"
			}
			if s.TensorParallel > 1 {
				reps += fmt.Sprintf(" × tensor %d", s.TensorParallel)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%s\t%s\t%s\t%s\t%s\n", s.Index, devices(s.Devices), reps, len(s.Ops),
				s.TimeMS, s.ComputeMS, s.CommMS, s.SyncMS, cluster.FormatBytes(s.AllReduceBytes), cluster.FormatBytes(s.SendBytes), cluster.FormatBytes(s.PeakMemoryBytes), s.FirstOp, s.LastOp)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(p.Candidates) > 1 {
		fmt.Fprintln(w, "\ncandidates (solve times vary from run to run):")
		tw := newTable(w)
		fmt.Fprintln(tw, "STRATEGY\tFAMILY\tSHAPE\tSTEP (ms)\tSAMPLES/S\tPEAK MEMORY\tFITS\tSOLVE (ms)\tWHY NOT CHOSEN")
		for _, c := range p.Candidates {
			step, tput, peak, fits := "-", "-", "-", "-"
			if c.PredictedStepMS > 0 {
				step, peak = fmt.Sprintf("%.3f", c.PredictedStepMS), cluster.FormatBytes(c.PeakMemoryBytes)
				fits = "yes"
				if !c.Fits {
					fits = "no"
				}
				if c.ThroughputSamplesPerS > 0 {
					tput = fmt.Sprintf("%.1f", c.ThroughputSamplesPerS)
				}
			}
			why := c.Why
			if why == "" {
				why = "chosen"
			}
			switch {
			case why == "not applicable":
				why = firstClause(c.Error)
			case c.Error != "" && why != "does not fit":
				why += ": " + firstClause(c.Error)
			}
			shape := c.Shape
			if shape == "" {
				shape = "-"
			}
			solve := fmt.Sprintf("%.0f", c.SolveMS)
			if strings.HasPrefix(why, "pruned") {
				solve = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Strategy, c.Family, shape, step, tput, peak, fits, solve, why)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(p.Rules) > 0 {
		fmt.Fprintln(w, "\nrules (every hard rule holds in this plan):")
		tw := newTable(w)
		fmt.Fprintln(tw, "RULE\tFROM\tOPS\tDEVICES\tEFFECT")
		for _, r := range p.Rules {
			rule := r.Rule
			if !r.Hard {
				rule += " (soft)"
			}
			ops := "-"
			if r.Ops > 0 {
				ops = fmt.Sprintf("%d", r.Ops)
				if len(r.Examples) > 0 {
					ops += " (" + strings.Join(r.Examples, ", ")
					if r.Ops > len(r.Examples) {
						ops += ", ..."
					}
					ops += ")"
				}
			}
			devs := "-"
			if len(r.Devices) > 0 {
				devs = devices(r.Devices)
			}
			effect := r.Effect
			if r.PenaltyMS > 0 {
				effect += fmt.Sprintf(", +%.3f ms", r.PenaltyMS)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", rule, r.Source, ops, devs, effect)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, note := range p.Notes {
		if _, err := fmt.Fprintf(w, "note: %s: %s\n", p.Strategy, note); err != nil {
			return err
		}
	}
	if p.PrecisionHint != "" {
		if _, err := fmt.Fprintf(w, "precision: %s\n", p.PrecisionHint); err != nil {
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

// newTable aligns the columns of what is written to it, escaped first
// (see printable.Columns).
func newTable(w io.Writer) printable.Columns {
	return printable.NewColumns(tabwriter.NewWriter(w, 0, 4, 2, ' ', 0))
}

// devices shortens a long device list for the table: the first three and
// a count.
func devices(names []string) string {
	if len(names) <= 4 {
		return strings.Join(names, ",")
	}
	return fmt.Sprintf("%s,... (%d)", strings.Join(names[:3], ","), len(names))
}

// firstClause is an error message up to its first "; ", so a table row
// stays one readable line; the plan's JSON keeps the whole message.
func firstClause(msg string) string {
	if i := strings.Index(msg, "; "); i > 0 {
		return msg[:i]
	}
	return msg
}

// writeJSON renders p exactly as a json.Encoder with SetIndent("", "  ")
// would (same bytes, HTML escaping included, trailing newline), but a
// field at a time and the top-level arrays an element at a time through
// a buffered writer, so a plan of 10^6 ops is never held in memory as
// one document (the encoder buffers it twice).
func writeJSON(w io.Writer, p *Plan) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	var top valueEncoder
	encode := func(v reflect.Value, prefix string) error {
		b, err := top.encode(v, prefix)
		if err == nil {
			_, err = bw.Write(b)
		}
		return err
	}
	v := reflect.ValueOf(p).Elem()
	t := v.Type()
	first := true
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" || !sf.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = sf.Name
		}
		fv := v.Field(i)
		if strings.Contains(","+opts+",", ",omitempty,") && emptyJSON(fv) {
			continue
		}
		if first {
			bw.WriteString("{\n  ")
			first = false
		} else {
			bw.WriteString(",\n  ")
		}
		key, err := json.Marshal(name)
		if err != nil {
			return err
		}
		bw.Write(key)
		bw.WriteString(": ")
		if fv.Kind() != reflect.Slice || fv.Len() == 0 || fv.Type().Elem().Kind() == reflect.Uint8 {
			if err := encode(fv, "  "); err != nil {
				return err
			}
			continue
		}
		bw.WriteString("[\n    ")
		if err := encodeElements(bw, fv); err != nil {
			return err
		}
		bw.WriteString("\n  ]")
	}
	if first {
		bw.WriteString("{}\n")
	} else {
		bw.WriteString("\n}\n")
	}
	return bw.Flush()
}

// valueEncoder renders values as a json.Encoder with SetIndent(prefix,
// "  ") does, without the trailing newline, reusing its buffers.
type valueEncoder struct {
	buf  bytes.Buffer
	enc  *json.Encoder
	out  []byte
	runs []byte // writeOp's
}

// encode renders v at an indentation depth: lines after the first start
// with prefix. The bytes are valid until the next call.
func (e *valueEncoder) encode(v reflect.Value, prefix string) ([]byte, error) {
	if e.enc == nil {
		e.enc = json.NewEncoder(&e.buf)
	}
	e.buf.Reset()
	if err := e.enc.Encode(v.Interface()); err != nil {
		return nil, err
	}
	b := e.buf.Bytes()
	e.out = indent(e.out[:0], b[:len(b)-1], prefix, "  ")
	return e.out, nil
}

// indent appends the compact JSON src to dst as json.Indent lays it out
// (an empty object or array stays {} or []), in one pass over the bytes
// where json.Indent runs its scanner on each: src is the encoder's own
// output, valid and without spaces outside strings. A plan of a large
// step lists millions of op runs.
func indent(dst, src []byte, prefix, unit string) []byte {
	depth := 0
	open := false // after { or [: the line break waits for what comes
	newline := func() {
		dst = append(dst, '\n')
		dst = append(dst, prefix...)
		for range depth {
			dst = append(dst, unit...)
		}
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		if open && c != '}' && c != ']' {
			open = false
			depth++
			newline()
		}
		switch c {
		case '"':
			j := i + 1
			for ; j < len(src) && src[j] != '"'; j++ {
				if src[j] == '\\' {
					j++
				}
			}
			dst = append(dst, src[i:j+1]...)
			i = j
		case '{', '[':
			open = true
			dst = append(dst, c)
		case ',':
			dst = append(dst, c)
			newline()
		case ':':
			dst = append(dst, c, ' ')
		case '}', ']':
			if open {
				open = false
			} else {
				depth--
				newline()
			}
			dst = append(dst, c)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// elementChunk is how many elements of a top-level array one goroutine
// renders at a time.
const elementChunk = 2048

// encodeElements writes the elements of the slice fv, separated as the
// encoder separates them, to w. The arrays of a large plan (an op list of
// 10^6 entries) are rendered in chunks on one goroutine per core, a
// window of chunks at a time, and written in order: the same bytes, in a
// fraction of the time reflection takes on one core.
func encodeElements(w *bufio.Writer, fv reflect.Value) error {
	n := fv.Len()
	workers := min(runtime.GOMAXPROCS(0), (n+elementChunk-1)/elementChunk)
	if workers < 2 {
		return encodeRange(w, fv, 0, n)
	}
	type chunk struct {
		out bytes.Buffer
		err error
	}
	chunks := make([]chunk, workers)
	for start := 0; start < n; start += workers * elementChunk {
		var wg sync.WaitGroup
		for c := range chunks {
			lo := start + c*elementChunk
			hi := min(lo+elementChunk, n)
			ch := &chunks[c]
			ch.out.Reset()
			if lo >= hi {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ch.err = encodeRange(&ch.out, fv, lo, hi)
			}()
		}
		wg.Wait()
		for c := range chunks {
			if chunks[c].err != nil {
				return chunks[c].err
			}
			if _, err := w.Write(chunks[c].out.Bytes()); err != nil {
				return err
			}
		}
	}
	return nil
}

// encodeRange writes elements lo..hi-1 of the slice fv to w, each after
// the separator the encoder puts before it (none before element 0).
func encodeRange(w interface {
	io.Writer
	io.StringWriter
}, fv reflect.Value, lo, hi int) error {
	var e valueEncoder
	ops, _ := fv.Interface().([]Op)
	for k := lo; k < hi; k++ {
		if k > 0 {
			w.WriteString(",\n    ")
		}
		if ops != nil && len(ops[k].Runs) > 0 {
			if err := e.writeOp(w, &ops[k]); err != nil {
				return err
			}
			continue
		}
		b, err := e.encode(fv.Index(k), "    ")
		if err != nil {
			return err
		}
		w.Write(b)
	}
	return nil
}

// writeOp writes an element of the plan's op list that has runs as the
// encoder would: the op without its runs through the encoder, and its
// runs, which a step of many micro-batches holds millions of, rendered
// directly into the place the encoder gives them (after end_ms).
func (e *valueEncoder) writeOp(w io.Writer, op *Op) error {
	c := *op
	c.Runs = nil
	b, err := e.encode(reflect.ValueOf(c), "    ")
	if err != nil {
		return err
	}
	const endKey = "\n      \"end_ms\": "
	i := bytes.Index(b, []byte(endKey))
	if i < 0 {
		return fmt.Errorf("plan: op %q rendered without end_ms", op.Name)
	}
	i += len(endKey)
	for i < len(b) && b[i] != ',' && b[i] != '\n' {
		i++
	}
	out := append(e.runs[:0], b[:i]...)
	out = append(out, ",\n      \"runs\": ["...)
	for k, r := range op.Runs {
		if k > 0 {
			out = append(out, ',')
		}
		out = append(out, "\n        {\n          \"micro_batch\": "...)
		out = strconv.AppendInt(out, int64(r.MicroBatch), 10)
		out = append(out, ",\n          \"start_ms\": "...)
		out = appendJSONFloat(out, r.StartMS)
		out = append(out, ",\n          \"end_ms\": "...)
		out = appendJSONFloat(out, r.EndMS)
		out = append(out, "\n        }"...)
	}
	out = append(out, "\n      ]"...)
	out = append(out, b[i:]...)
	e.runs = out
	_, err = w.Write(out)
	return err
}

// appendJSONFloat appends f as encoding/json writes a float64: the
// shortest decimal that reads back as f, in exponent form below 1e-6 and
// from 1e21, with the exponent's leading zero dropped.
func appendJSONFloat(b []byte, f float64) []byte {
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1]
		b = b[:n-1]
	}
	return b
}

// emptyJSON is encoding/json's test for omitempty.
func emptyJSON(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Interface, reflect.Pointer:
		return v.IsNil()
	}
	return false
}

// collectiveKinds counts the buckets of each kind ("3 reduce-scatter, 3
// all-gather"), or is "" when every one is an all-reduce (or unnamed).
func collectiveKinds(cs []AllReduce) string {
	var order []string
	n := map[string]int{}
	for _, c := range cs {
		k := c.Kind
		if k == "" {
			k = "all-reduce"
		}
		if n[k] == 0 {
			order = append(order, k)
		}
		n[k]++
	}
	if len(order) == 1 && order[0] == "all-reduce" {
		return ""
	}
	parts := make([]string, len(order))
	for i, k := range order {
		parts[i] = fmt.Sprintf("%d %s", n[k], k)
	}
	return strings.Join(parts, ", ")
}

// microBatchSizes says how many samples each replica runs per
// micro-batch: one count when every stage runs the same, else each
// stage's; "" when the batch is unknown.
func microBatchSizes(stages []Stage) string {
	if len(stages) == 0 || stages[0].MicroBatchSize <= 0 {
		return ""
	}
	same := true
	for _, s := range stages {
		same = same && s.MicroBatchSize == stages[0].MicroBatchSize
	}
	if same {
		return Count(int(stages[0].MicroBatchSize), "sample", "samples")
	}
	parts := make([]string, len(stages))
	for i, s := range stages {
		parts[i] = fmt.Sprintf("%d (stage %d)", s.MicroBatchSize, i)
	}
	return strings.Join(parts, ", ") + " samples"
}

// alikeRun is how many consecutive devices with the same row a table
// prints as one: clusters of hundreds of devices would otherwise print a
// line per device, all alike. Shorter runs print a row per device.
const alikeRun = 16

// alikeRuns splits the rows of a device table into runs to print, each
// [first, last]: a run of at least alikeRun consecutive equal rows, or a
// single row.
func alikeRuns(rows []string) [][2]int {
	var out [][2]int
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j] == rows[i] {
			j++
		}
		if j-i >= alikeRun {
			out = append(out, [2]int{i, j - 1})
		} else {
			for k := i; k < j; k++ {
				out = append(out, [2]int{k, k})
			}
		}
		i = j
	}
	return out
}

// runName names a run of alikeRuns by field: the one value, or the first
// and last and how many devices the run holds.
func runName(devs []Device, run [2]int, field func(Device) string) string {
	first, last := field(devs[run[0]]), field(devs[run[1]])
	if run[0] == run[1] {
		return first
	}
	if first == last {
		return fmt.Sprintf("%s (%d devices)", first, run[1]-run[0]+1)
	}
	return fmt.Sprintf("%s … %s (%d devices)", first, last, run[1]-run[0]+1)
}
