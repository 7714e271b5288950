// Package pipeline is opplace's compiler driver: one readable list of
// named, timed stages from a model file to a simulated, device-annotated
// plan. Command-line tools and Go programs call Run.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/partition"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/sim"
	"github.com/opplace/opplace/tf"
	"github.com/opplace/opplace/train"
)

// Auto is the strategy that runs every fast placer and keeps the best.
const Auto = "auto"

// AutoStrategies are the placers Auto tries, in tie-breaking order.
var AutoStrategies = []string{"single", "m-etf", "heft", "m-sct", "m-topo", "expert"}

// The modes a plan can be made for.
const (
	ModeTrain = "train"
	ModeInfer = "infer"
)

// Options says what to plan.
type Options struct {
	// ModelPath is the model file.
	ModelPath string
	// ClusterPath is the cluster file; Cluster, if set, is used instead.
	ClusterPath string
	Cluster     *cluster.Cluster
	// Strategy is a placer name or Auto.
	Strategy string
	// Import binds the model's dynamic dimensions.
	Import ImportOptions
	// Mode is ModeTrain (the default: forward, backward and optimizer
	// update of one step) or ModeInfer (one forward pass).
	Mode string
	// Optimizer names the training optimizer (sgd, momentum, adam; default
	// adam).
	Optimizer string
	// RespectDevices pins TensorFlow nodes to the cluster devices their
	// device fields name; DeviceTemplate renders a cluster device as a
	// TensorFlow device string (default tf.DefaultTemplate).
	RespectDevices bool
	DeviceTemplate string
	// Schedule (1f1b or gpipe), Objective (throughput or latency) and
	// MicroBatches (0: the best count under memory) tune the pipeline
	// strategies.
	Schedule     string
	Objective    string
	MicroBatches int
	// CostModel estimates op times; nil means the times the model file
	// carries, if any, else the default Roofline.
	CostModel cost.Model
	// Fusion is FusionAuto or a fusion mode (graph.FusionModes: none, vertical,
	// horizontal, hybrid); "" means FusionAuto. Placement then runs on the fused
	// graph and the plan lists every original op. See fusion.go.
	Fusion string
	// FusionReport, when set, receives what the fuse stage did.
	FusionReport *FusionReport
}

// Timing is how long one stage took.
type Timing struct {
	Stage    string
	Duration time.Duration
}

// Result is a finished plan and what it was made from.
type Result struct {
	Plan    *plan.Plan
	Graph   *graph.Graph
	Cluster *cluster.Cluster
	Sim     *sim.Result
	Timings []Timing
}

// InputError marks a failure caused by the user's input (an unreadable
// model or cluster file, an unbound dimension, a cyclic graph), as opposed
// to a model that does not fit (placer.InfeasibleError) or a bug.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// run carries state from one stage to the next.
type run struct {
	opts     Options
	model    *Model
	cluster  *cluster.Cluster
	problem  *placer.Problem
	bound    cost.Bound
	strategy string
	placed   sim.Placement
	sim      *sim.Result
	tried    []plan.Candidate
	plan     *plan.Plan
	// pipeline is the partition a pipeline strategy chose.
	pipeline *partition.Plan
	// fused carries the fuse stage's result to assemble.
	fused *fusedState
}

// stage is one step of the driver. Stages run in list order; each is
// timed.
type stage struct {
	name string
	fn   func(context.Context, *run) error
}

var stages = []stage{
	{"import", importModel},
	{"cluster", loadCluster},
	{"pins", resolvePins},
	{"train", buildTrainingStep},
	{"fuse", fuseGraph},
	{"cost", buildCosts},
	{"bound", lowerBound},
	{"place", place},
	{"assemble", assemble},
}

// withDefaults fills the options a caller left empty.
func (o Options) withDefaults() Options {
	if o.Strategy == "" {
		o.Strategy = Auto
	}
	if o.Mode == "" {
		o.Mode = ModeTrain
	}
	if o.Optimizer == "" {
		o.Optimizer = "adam"
	}
	return o
}

// Strategies lists every strategy name plan accepts besides auto: the
// placers, then the pipeline partitioners.
func Strategies() []string {
	names := placer.Names()
	for _, p := range partition.Names() {
		names = append(names, PipelineStrategy+":"+p)
	}
	return names
}

// Run plans a model on a cluster.
func Run(ctx context.Context, opts Options) (*Result, error) {
	opts = opts.withDefaults()
	r := &run{opts: opts}
	res := &Result{}
	for _, st := range stages {
		start := time.Now()
		err := st.fn(ctx, r)
		res.Timings = append(res.Timings, Timing{st.name, time.Since(start)})
		if err != nil {
			return res, err
		}
	}
	res.Plan, res.Graph, res.Cluster, res.Sim = r.plan, r.model.Graph, r.cluster, r.sim
	return res, nil
}

func importModel(_ context.Context, r *run) error {
	m, err := LoadModel(r.opts.ModelPath, r.opts.Import)
	if err != nil {
		return err
	}
	r.model = m
	return nil
}

// buildTrainingStep replaces the forward graph by one training step's:
// backward ops colocated with their forward ops, weight gradients and the
// optimizer update. A costed graph that already carries backward ops is
// taken as it is.
func buildTrainingStep(_ context.Context, r *run) error {
	switch r.opts.Mode {
	case ModeInfer:
		return nil
	case ModeTrain:
	default:
		return &InputError{fmt.Errorf("unknown mode %q: use train or infer", r.opts.Mode)}
	}
	if r.model.Costs != nil {
		// Measured graphs are planned as given: their backward ops, if any,
		// come from the file, and synthesised ones would have no times.
		if !hasPhase(r.model.Graph, graph.Backward) {
			r.model.Warnings = append(r.model.Warnings, "the costed graph has no backward ops: it is planned as given, a forward pass")
			r.opts.Mode = ModeInfer
		}
		return nil
	}
	if hasPhase(r.model.Graph, graph.Backward) {
		return nil
	}
	opt, err := train.ParseOptimizer(r.opts.Optimizer)
	if err != nil {
		return &InputError{err}
	}
	g, _, err := train.Build(r.model.Graph, train.Options{Optimizer: opt})
	if err != nil {
		return &InputError{fmt.Errorf("%s: %w", r.opts.ModelPath, err)}
	}
	r.model.Graph = g
	return nil
}

// resolvePins turns the device fields a TensorFlow graph carries (the
// "_device" attribute of its ops) into pins on cluster devices, before the
// training step copies them to gradients.
func resolvePins(_ context.Context, r *run) error {
	if !r.opts.RespectDevices {
		return nil
	}
	tmpl := r.opts.DeviceTemplate
	if tmpl == "" {
		tmpl = tf.DefaultTemplate
	}
	resolve, err := tf.NewPinResolver(r.cluster, tmpl)
	if err != nil {
		return &InputError{err}
	}
	g := r.model.Graph
	for i := range g.Ops {
		dev := g.Ops[i].Attrs.String("_device", "")
		if dev == "" {
			continue
		}
		name, err := resolve(dev)
		if err != nil {
			return &InputError{fmt.Errorf("%s: op %q: device %q: %v", r.opts.ModelPath, g.Ops[i].Name, dev, err)}
		}
		g.Ops[i].Device = name
	}
	return nil
}

func hasPhase(g *graph.Graph, p graph.Phase) bool {
	for i := range g.Ops {
		if g.Ops[i].Phase == p {
			return true
		}
	}
	return false
}

func loadCluster(_ context.Context, r *run) error {
	if r.opts.Cluster != nil {
		r.cluster = r.opts.Cluster
		return nil
	}
	if r.opts.ClusterPath == "" {
		return &InputError{errors.New("no cluster given: pass --cluster FILE (see testdata/clusters/ for examples)")}
	}
	c, err := cluster.Load(r.opts.ClusterPath)
	if err != nil {
		return &InputError{err}
	}
	r.cluster = c
	return nil
}

// costModel is the model op times come from: the caller's (or the fuse
// stage's), else the times the model file carries, else the roofline.
func (r *run) costModel() cost.Model {
	switch {
	case r.opts.CostModel != nil:
		return r.opts.CostModel
	case r.model.Costs != nil:
		return r.model.Costs
	}
	return cost.Roofline{}
}

func buildCosts(_ context.Context, r *run) error {
	model := r.costModel()
	if check, ok := model.(interface {
		CheckCluster(*graph.Graph, *cluster.Cluster) error
	}); ok {
		if err := check.CheckCluster(r.model.Graph, r.cluster); err != nil {
			return &InputError{err}
		}
	}
	table := cost.NewTable(r.model.Graph, r.cluster, model)
	p, err := placer.NewProblem(r.model.Graph, table)
	if err != nil {
		return &InputError{fmt.Errorf("%s: %w", r.opts.ModelPath, err)}
	}
	r.problem = p
	return nil
}

func lowerBound(_ context.Context, r *run) error {
	r.bound = cost.LowerBound(r.problem.Costs, r.problem.Adj, r.problem.Order)
	return nil
}

// place runs the chosen strategy, or for Auto every fast strategy, and
// keeps the fitting plan with the shortest simulated step.
func place(ctx context.Context, r *run) error {
	if name, ok := pipelinePartitioner(r.opts.Strategy); ok {
		o := evaluatePipeline(ctx, r, name)
		if o.Err != nil {
			return o.Err
		}
		if !o.Fits {
			return overflow(r, o.Strategy, o.Sim)
		}
		r.bound = pipelineBound(r.bound)
		r.sim, r.placed, r.pipeline, r.strategy = o.Sim, o.Placement, o.Pipeline, o.Strategy
		return nil
	}
	names := []string{r.opts.Strategy}
	if r.opts.Strategy == Auto {
		names = AutoStrategies
	} else if !slices.Contains(placer.Names(), r.opts.Strategy) {
		return &InputError{fmt.Errorf("unknown strategy %q: use auto, pipeline or one of %v", r.opts.Strategy, Strategies())}
	}
	var fails []placer.Failure
	for _, name := range names {
		pl, err := placer.New(name)
		if err != nil {
			return err
		}
		o := evaluate(ctx, r, name, pl)
		if o.Sim != nil {
			r.tried = append(r.tried, plan.Candidate{Strategy: name, PredictedStepMS: plan.MS(o.Sim.Step), Fits: o.Fits})
			if o.Fits && (r.sim == nil || o.Sim.Step < r.sim.Step) {
				r.sim, r.placed, r.strategy = o.Sim, o.Placement, name
			}
		}
		if o.Err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// evaluate gives a placement that overflows memory an error too.
			fails = append(fails, placer.Failure{Strategy: name, Err: o.Err})
			if o.Sim == nil {
				r.tried = append(r.tried, plan.Candidate{Strategy: name, Error: o.Err.Error()})
			}
		}
	}
	if r.sim == nil {
		return placer.CombineFailures(fails)
	}
	if r.opts.Strategy == Auto {
		r.strategy = Auto + ":" + r.strategy
	}
	return nil
}

// overflow explains a placement whose simulated peak exceeds a device.
func overflow(r *run, strategy string, res *sim.Result) error {
	worst, over := -1, int64(0)
	for d, peak := range res.PeakMemory {
		if o := peak - r.cluster.Devices[d].Memory; o > over {
			worst, over = d, o
		}
	}
	d := r.cluster.Devices[worst]
	return placer.Infeasible(r.problem, fmt.Sprintf("%s's placement peaks at %s on %s, which holds %s",
		strategy, cluster.FormatBytes(res.PeakMemory[worst]), d.Name, cluster.FormatBytes(d.Memory)))
}

func assemble(_ context.Context, r *run) error {
	g, c, res := r.model.Graph, r.cluster, r.sim
	p := &plan.Plan{
		Model:           r.opts.ModelPath,
		Cluster:         c.Name,
		Strategy:        r.strategy,
		Mode:            r.opts.Mode,
		PredictedStepMS: plan.MS(res.Step),
		LowerBoundMS:    plan.MS(r.bound.Seconds()),
		Fits:            r.problem.Fits(res),
		Warnings:        r.model.Warnings,
	}
	if lb := r.bound.Seconds(); lb > 0 {
		p.Gap = plan.Fraction(res.Step/lb - 1)
	}
	if len(r.tried) > 1 {
		p.Candidates = slices.Clone(r.tried)
		slices.SortStableFunc(p.Candidates, func(a, b plan.Candidate) int {
			ra, rb := candidateRank(a), candidateRank(b)
			if ra != rb {
				return ra - rb
			}
			switch {
			case a.PredictedStepMS < b.PredictedStepMS:
				return -1
			case a.PredictedStepMS > b.PredictedStepMS:
				return 1
			}
			return 0
		})
	}
	opsOn := make([]int, len(c.Devices))
	for _, d := range r.placed.Device {
		opsOn[d]++
	}
	for i, d := range c.Devices {
		p.Devices = append(p.Devices, plan.Device{
			Name: d.Name, Type: d.Type.Name, Host: c.Hosts[d.Host].Name,
			MemoryBytes: d.Memory, PeakMemoryBytes: res.PeakMemory[i], ResidentBytes: res.ResidentMemory[i],
			BusyMS: plan.MS(res.Busy[i]), Ops: opsOn[i],
		})
	}
	for _, id := range r.problem.Order {
		op := &g.Ops[id]
		p.Ops = append(p.Ops, plan.Op{
			Name: op.Name, Type: op.Type, Phase: op.Phase.String(), Device: c.Devices[r.placed.Device[id]].Name,
			StartMS: plan.MS(res.Start[id]), EndMS: plan.MS(res.End[id]),
		})
	}
	p.Transfers = make([]plan.Transfer, 0, len(res.Transfers))
	for _, t := range res.Transfers {
		p.CrossDeviceBytes += t.Bytes
		p.Transfers = append(p.Transfers, plan.Transfer{
			Tensor: g.Tensors[t.Tensor].Name, From: c.Devices[t.From].Name, To: c.Devices[t.To].Name,
			Bytes: t.Bytes, StartMS: plan.MS(t.Start), EndMS: plan.MS(t.End),
		})
	}
	r.plan = p
	if err := expandFusion(r); err != nil {
		return err
	}
	addPipeline(r)
	return nil
}

// candidateRank orders fitting plans first, then ones that do not fit,
// then failures.
func candidateRank(c plan.Candidate) int {
	switch {
	case c.Error != "":
		return 2
	case !c.Fits:
		return 1
	}
	return 0
}
