// Package sweep predicts a model's training throughput over device types,
// device counts and batch sizes, for cluster schedulers (Gavel, Pollux)
// that need a job's throughput on every accelerator type and scale
// before it runs. Each point is the cluster a Template lays out for one
// type and count, planned by the auto strategy of package pipeline (the
// figures opplace plan gives on that cluster); the model is imported once
// per batch size and shared by every point of that batch.
package sweep

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/opplace/opplace/constraint"
	"github.com/opplace/opplace/partition"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/placer"
)

// Options says what to sweep.
type Options struct {
	// Model is the model file.
	Model string
	// Types are device type names: presets (cluster.PresetNames) or
	// types Custom declares.
	Types []string
	// Counts are device counts, each 1 or more.
	Counts []int
	// Batches are global batch sizes, bound as Import.Batch (plan
	// --batch); empty plans the batch the model file fixes.
	Batches []int64
	// Template lays out each point's cluster; nil: DefaultTemplate.
	Template *Template
	// Custom declares device types beyond the presets (LoadTypes); nil:
	// presets only.
	Custom *Types
	// Plan is what every point is planned with (mode, optimizer,
	// precision, strategy options, Import's other bindings); its
	// ModelPath, Model, ClusterPath, Cluster and Import.Batch are set per
	// point. An empty Strategy is auto.
	Plan pipeline.Options
	// Progress, when set, is called after each point.
	Progress func(done, total int, p Point)
}

// Point is one (type, count, batch) of a sweep and the best plan found.
type Point struct {
	Type    string `json:"type"`
	Devices int    `json:"devices"`
	Batch   int64  `json:"batch"`
	// Cluster names the generated cluster; Hosts counts its hosts.
	Cluster string `json:"cluster"`
	Hosts   int    `json:"hosts"`
	// Fits says a plan that fits the devices' memory was found; the
	// figures below are that plan's, zero when none fits.
	Fits                  bool    `json:"fits"`
	ThroughputSamplesPerS float64 `json:"throughput_samples_per_s"`
	StepsPerS             float64 `json:"steps_per_s"`
	StepMS                float64 `json:"step_ms"`
	Strategy              string  `json:"strategy,omitempty"`
	Family                string  `json:"family,omitempty"`
	// Shape summarises the plan: stages, replicas, tensor groups.
	Shape string `json:"shape,omitempty"`
	// PeakMemoryBytes is the largest device peak, MemoryBytes one
	// device's memory.
	PeakMemoryBytes int64 `json:"peak_memory_bytes"`
	MemoryBytes     int64 `json:"memory_bytes"`
	// PricePerHour is the cluster's price in dollars an hour and
	// SamplesPerDollar the throughput it buys, both 0 when the template
	// gives the type no price.
	PricePerHour     float64 `json:"price_per_hour,omitempty"`
	SamplesPerDollar float64 `json:"samples_per_dollar,omitempty"`
	// WhyNot says why no plan fits (Fits false): the model does not fit,
	// or the point's input is refused (Error true), like a precision the
	// type lacks.
	WhyNot string `json:"why_not,omitempty"`
	Error  bool   `json:"error,omitempty"`
	// Reason is the first clause of WhyNot, for tables.
	Reason string `json:"-"`
	// SolveMS is how long the point took to plan; it varies from run to
	// run, so JSON leaves it out.
	SolveMS float64 `json:"-"`
}

// StageTime is the time a sweep spent in one stage of the planning
// driver, summed over its points (import once per batch).
type StageTime struct {
	Stage    string        `json:"stage"`
	Duration time.Duration `json:"-"`
}

// Result is a finished sweep.
type Result struct {
	// Model is the model file, Job the job type name Gavel files use
	// (the model file's base name without its extension).
	Model  string  `json:"model"`
	Job    string  `json:"job"`
	Mode   string  `json:"mode"`
	Points []Point `json:"points"`
	// Clusters are the points' clusters, one per type and count, in
	// sweep order.
	Clusters []*Generated `json:"-"`
	// Stages and Wall time the sweep; they vary from run to run, so
	// JSON leaves them out.
	Stages []StageTime   `json:"-"`
	Wall   time.Duration `json:"-"`
}

// inputErr marks an error in the sweep's own input: a type, count or
// batch that no point can be made of.
func inputErr(format string, args ...any) error {
	return &pipeline.InputError{Err: fmt.Errorf(format, args...)}
}

// Run sweeps every type x count x batch of opts, in that order (types
// outermost, batches innermost in the result). A point whose plan does
// not fit, or whose input the planner refuses (a precision the type
// lacks), is reported in its Point; a bad type, count, template or model
// fails the whole sweep before any planning with a *pipeline.InputError
// (or the template's *yamlfile.Error).
func Run(ctx context.Context, opts Options) (*Result, error) {
	if len(opts.Types) == 0 || len(opts.Counts) == 0 {
		return nil, inputErr("a sweep needs device types and counts (--types A100-80GB,T4 --counts 1,2,4,8)")
	}
	tmpl := opts.Template
	if tmpl == nil {
		tmpl = DefaultTemplate()
	}
	// Every cluster is made (and checked) before any planning.
	var types []string
	for _, name := range opts.Types {
		t, err := opts.Custom.Resolve(name)
		if err != nil {
			return nil, &pipeline.InputError{Err: err}
		}
		if slices.Contains(types, t) {
			return nil, inputErr("device type %s is given twice", t)
		}
		types = append(types, t)
	}
	for i, c := range opts.Counts {
		if c < 1 {
			return nil, inputErr("device count %d: want 1 or more", c)
		}
		if slices.Contains(opts.Counts[:i], c) {
			return nil, inputErr("device count %d is given twice", c)
		}
	}
	for i, b := range opts.Batches {
		if b < 1 {
			return nil, inputErr("batch size %d: want 1 or more", b)
		}
		if slices.Contains(opts.Batches[:i], b) {
			return nil, inputErr("batch size %d is given twice", b)
		}
	}
	clusters := map[string]*Generated{}
	var gens []*Generated
	for _, t := range types {
		for _, c := range opts.Counts {
			g, err := tmpl.Cluster(t, c, opts.Custom)
			if err != nil {
				return nil, &pipeline.InputError{Err: err}
			}
			clusters[key(t, c)] = g
			gens = append(gens, g)
		}
	}
	batches := opts.Batches
	if len(batches) == 0 {
		batches = []int64{0}
	}
	start := time.Now()
	res := &Result{Model: opts.Model, Job: JobName(opts.Model), Mode: opts.Plan.Mode, Clusters: gens}
	if res.Mode == "" {
		res.Mode = pipeline.ModeTrain
	}
	stages := map[string]time.Duration{}
	var order []string
	addTime := func(stage string, d time.Duration) {
		if _, ok := stages[stage]; !ok {
			order = append(order, stage)
		}
		stages[stage] += d
	}
	points := make([][]Point, len(types)*len(opts.Counts)) // by type, count; batches within
	total, done := len(types)*len(opts.Counts)*len(batches), 0
	for _, b := range batches {
		imp := opts.Plan.Import
		imp.Batch = b
		t0 := time.Now()
		model, err := pipeline.LoadModel(opts.Model, imp)
		addTime(pipeline.StageImport, time.Since(t0))
		if err != nil {
			return nil, err
		}
		if got := model.Graph.Batch(); b > 0 && got != b {
			return nil, inputErr("%s: batch size %d binds no input: the model's batch is fixed at %d; sweep it without batch sizes, or bind its dimensions with --dim", opts.Model, b, got)
		}
		for ti, t := range types {
			for ci, c := range opts.Counts {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				g := clusters[key(t, c)]
				p, timings, err := planPoint(ctx, opts.Plan, opts.Model, model, imp, g)
				if err != nil {
					return nil, err
				}
				for _, tm := range timings {
					if tm.Stage != pipeline.StageImport {
						addTime(tm.Stage, tm.Duration)
					}
				}
				p.Type, p.Devices, p.Batch = t, c, b
				k := ti*len(opts.Counts) + ci
				points[k] = append(points[k], p)
				done++
				if opts.Progress != nil {
					opts.Progress(done, total, p)
				}
			}
		}
	}
	for _, ps := range points {
		res.Points = append(res.Points, ps...)
	}
	for _, s := range order {
		res.Stages = append(res.Stages, StageTime{s, stages[s]})
	}
	res.Wall = time.Since(start)
	return res, nil
}

func key(typ string, count int) string { return fmt.Sprintf("%s\x00%d", typ, count) }

// PlanOptions are the options opplace plan would be given for one point:
// base with the model, its import bindings and the point's cluster set.
// A sweep's figures are those of pipeline.Run on these options.
func PlanOptions(base pipeline.Options, modelPath string, model *pipeline.Model, imp pipeline.ImportOptions, g *Generated) pipeline.Options {
	o := base
	o.ModelPath, o.Model, o.Import = modelPath, model, imp
	o.ClusterPath, o.Cluster = "", g.Cluster
	return o
}

// planPoint plans one point.
func planPoint(ctx context.Context, base pipeline.Options, path string, model *pipeline.Model, imp pipeline.ImportOptions, g *Generated) (Point, []pipeline.Timing, error) {
	t0 := time.Now()
	res, err := pipeline.Run(ctx, PlanOptions(base, path, model, imp, g))
	p := Point{Cluster: g.Name, Hosts: g.Hosts, PricePerHour: g.PricePerHour, SolveMS: float64(time.Since(t0).Microseconds()) / 1e3}
	if len(g.Cluster.Devices) > 0 {
		p.MemoryBytes = g.Cluster.Devices[0].Memory
	}
	var timings []pipeline.Timing
	if res != nil {
		timings = res.Timings
	}
	if err != nil {
		var inf *placer.InfeasibleError
		var pinf *partition.InfeasibleError
		var conflict *constraint.ConflictError
		var in *pipeline.InputError
		switch {
		case errors.As(err, &inf), errors.As(err, &pinf), errors.As(err, &conflict):
		case errors.As(err, &in):
			p.Error = true
		default:
			return p, timings, fmt.Errorf("%s on %s: %w", path, g.Name, err)
		}
		p.WhyNot = err.Error()
		p.Reason = reason(p.WhyNot)
		return p, timings, nil
	}
	pl := res.Plan
	p.Fits = pl.Fits
	p.Strategy, p.Family = pl.Strategy, pl.Family
	p.StepMS = pl.PredictedStepMS
	if p.StepMS > 0 {
		p.StepsPerS = 1000 / p.StepMS
	}
	p.ThroughputSamplesPerS = pl.ThroughputSamplesPerS
	for _, d := range pl.Devices {
		p.PeakMemoryBytes = max(p.PeakMemoryBytes, d.PeakMemoryBytes)
	}
	for _, c := range pl.Candidates {
		if pl.Strategy == pipeline.Auto+":"+c.Strategy || pl.Strategy == c.Strategy {
			p.Shape = c.Shape
			break
		}
	}
	if !p.Fits {
		p.WhyNot = fmt.Sprintf("the fastest plan (%s) peaks at %s on a device of %s", p.Strategy, formatGiB(p.PeakMemoryBytes), formatGiB(p.MemoryBytes))
		p.Reason = p.WhyNot
		p.ThroughputSamplesPerS, p.StepsPerS, p.StepMS = 0, 0, 0
	}
	if p.Fits && p.PricePerHour > 0 {
		p.SamplesPerDollar = p.ThroughputSamplesPerS * 3600 / p.PricePerHour
	}
	return p, timings, nil
}

// reason is the first clause of a planner's message: up to "; each
// strategy tried" or the first ": " list.
func reason(msg string) string {
	for _, cut := range []string{"; each strategy tried", " (parameters once"} {
		if i := strings.Index(msg, cut); i > 0 {
			msg = msg[:i]
		}
	}
	const most = 160
	if r := []rune(msg); len(r) > most {
		msg = string(r[:most-3]) + "..."
	}
	return msg
}

func formatGiB(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }

// JobName is the job type a model file's sweep is named by in Gavel
// files: its base name without the extension.
func JobName(model string) string {
	base := filepath.Base(model)
	return strings.TrimSuffix(base, filepath.Ext(base))
}
