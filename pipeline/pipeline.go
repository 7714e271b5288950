// Package pipeline is opplace's compiler driver: one readable list of
// named, timed stages from a model file to a simulated, device-annotated
// plan. Command-line tools and Go programs call Run.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/constraint"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/tfdevice"
	"github.com/opplace/opplace/partition"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/sim"
	"github.com/opplace/opplace/strategy"
	"github.com/opplace/opplace/train"
)

// Auto is the strategy that searches the whole plan space (see
// strategy.Search) and keeps the fastest plan that fits.
const Auto = strategy.Auto

// The modes a plan can be made for.
const (
	ModeTrain = "train"
	ModeInfer = "infer"
)

// Options says what to plan.
type Options struct {
	// ModelPath is the model file.
	ModelPath string
	// Model, when set, is the model already imported (LoadModel) with
	// Import's bindings: Run plans it instead of reading ModelPath, which
	// still names it in messages and in the plan. Run leaves it as it
	// was, so one import serves many runs (package sweep).
	Model *Model
	// ClusterPath is the cluster file; Cluster, if set, is used instead.
	ClusterPath string
	Cluster     *cluster.Cluster
	// Strategy is a strategy name (strategy.Names), "pipeline" (the
	// default partitioner) or Auto.
	Strategy string
	// Strategies configures the strategies that take options (ilp's
	// groups and time limit); the pipeline fields below override its
	// Pipeline options.
	Strategies strategy.Config
	// Import binds the model's dynamic dimensions.
	Import ImportOptions
	// Mode is ModeTrain (the default: forward, backward and optimizer
	// update of one step) or ModeInfer (one forward pass).
	Mode string
	// Optimizer names the training optimizer (sgd, momentum, adam; default
	// adam).
	Optimizer string
	// Precision is the numeric precision of the step (train.Precisions:
	// fp32, tf32, amp-bf16, amp-fp16); "" keeps the model file's element
	// types. See applyPrecision.
	Precision string
	// RespectDevices pins TensorFlow nodes to the cluster devices their
	// device fields name; DeviceTemplate renders a cluster device as a
	// TensorFlow device string (default tfdevice.DefaultTemplate).
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
	// Runtime names the runtime the plan runs under (RuntimeNames; see
	// Runtime): its fusion mode, which a Fusion given beside it must
	// match, and whether attention runs as one fused kernel. "" means
	// RuntimeAuto.
	Runtime string
	// Placement is a placement file to plan as given (strategy given,
	// which a Strategy left empty or auto becomes): a map from op names,
	// module paths (ModulePrefix) or path.Match patterns to cluster
	// devices, or the plan file of an earlier run (see ReadPlacement).
	// Ops it leaves out follow their colocation group (a training step's
	// gradients and updates their forward ops), else the model's pins
	// (RespectDevices), else Fill places them.
	Placement string
	// Fill names the placer that places the ops a given placement leaves
	// out, the given ones pinned; "" makes such ops an error.
	Fill string
	// Constraints are the user's rules (see package constraint and
	// docs/constraints.md): every strategy honours the hard ones, and the
	// soft ones weigh on which plan is kept. Nil: none.
	Constraints *constraint.Set
	// PlacementFile, when set, is a placement file already read
	// (ReadPlacement, or a plan built in Go), planned as Placement would
	// be; Placement then only names it in messages.
	PlacementFile *PlacementFile
	// Choose, when set, picks the plan auto keeps from every plan its
	// search found (see Choice), in place of the fastest that fits; the
	// plan is then written as auto writes its own. Other strategies
	// ignore it.
	Choose func(context.Context, *Choice) (Pick, error)
	// AroundStage, when set, is called as each stage starts with its
	// name (StageImport, ...); the function it returns, if any, is called
	// as the stage ends. The command uses it to tune the Go runtime for
	// one stage (see cmd/opplace/gc.go).
	AroundStage func(stage string) (end func())
}

// StageImport is the name of the first stage, which reads the model.
const StageImport = "import"

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
	opts    Options
	model   *Model
	cluster *cluster.Cluster
	problem *strategy.Problem
	bound   strategy.Bound
	// boundKind names the part of the bound that binds.
	boundKind string
	strategy  string
	// outcomes are every strategy run, chosen the index of the kept one.
	outcomes []strategy.Outcome
	chosen   int
	// why is Options.Choose's say on why each strategy was not kept.
	why map[string]string
	// plan of the kept outcome, on the graph the plan lists (expanded
	// back to the original ops after fusion); sim its simulated step.
	placed *sim.Plan
	sim    *sim.Result
	plan   *plan.Plan
	// fused carries the fuse stage's result to assemble.
	fused *fusedState
	// wantGiven asks the placement stage to resolve a given placement,
	// given its result.
	wantGiven bool
	given     *givenState
	// rules are the user's rules resolved; nil without any.
	rules *rulesState
	// precision is the parsed Options.Precision; forward the forward
	// graph of a float32 plan, for precisionHint.
	precision train.Precision
	forward   *graph.Graph
	// attention lists the attention cores the runtime runs fused.
	attention []graph.FusedAttention
}

// stage is one step of the driver. Stages run in list order; each is
// timed, and with CheckStages on, each that writes the graph is followed
// by graph.Check.
//
// reads and writes declare the state the stage shares with the others,
// as space-separated names of run's fields: "opts.X" and "model.X" name
// a field of the options or the model, "model.Graph.Device" and
// "model.Graph.Colocate" the ops' pins and colocation keys alone, and a
// name covers the names below it ("model" covers "model.Graph"). A stage
// reads only what the user gives (opts, wantGiven) or an earlier stage
// writes, and writes only what it declares (TestStageDeclarations).
type stage struct {
	name          string
	fn            func(context.Context, *run) error
	reads, writes string
}

var stages = []stage{
	{StageImport, importModel,
		"opts.ModelPath opts.Import",
		"model"},
	{"cluster", loadCluster,
		"opts.Cluster opts.ClusterPath",
		"cluster"},
	{"pins", resolvePins,
		"opts.ModelPath opts.RespectDevices opts.DeviceTemplate model.Graph cluster",
		"model.Graph.Device"},
	{"train", buildTrainingStep,
		"opts.ModelPath opts.Mode opts.Optimizer opts.Precision opts.Runtime opts.Fusion opts.CostModel model.Graph model.Costs cluster",
		"opts.Mode model.Graph model.Warnings precision forward attention"},
	{"rules", resolveRules,
		"opts.ModelPath opts.Constraints opts.Strategies model.Graph cluster",
		"model.Graph.Colocate cluster rules"},
	{"placement", resolvePlacement,
		"wantGiven opts.ModelPath opts.Placement opts.PlacementFile opts.Fill opts.CostModel model.Graph model.Costs cluster precision",
		"model.Warnings given"},
	{"fuse", fuseGraph,
		"opts.ModelPath opts.Fusion opts.Runtime opts.FusionReport opts.CostModel model.Graph model.Costs cluster precision given rules",
		"opts.FusionReport opts.CostModel model.Graph fused"},
	{"cost", buildCosts,
		"opts.ModelPath opts.Mode opts.CostModel model.Graph model.Costs model.Warnings cluster precision given rules fused",
		"model.Warnings rules problem"},
	{"bound", lowerBound,
		"opts.Strategy problem",
		"bound boundKind"},
	{"place", placeUnderRules,
		"opts.Strategy opts.Strategies opts.Schedule opts.Objective opts.MicroBatches opts.Choose model.Graph cluster problem rules fused",
		"outcomes chosen why strategy placed sim"},
	{"assemble", assemble,
		"opts.ModelPath opts.Mode opts.Runtime opts.Fusion model.Graph model.Warnings cluster precision forward attention given rules fused problem bound boundKind outcomes chosen why strategy placed sim",
		"model.Graph bound boundKind placed sim plan"},
}

// withDefaults fills the options a caller left empty.
func (o Options) withDefaults() Options {
	if (o.Placement != "" || o.PlacementFile != nil) && (o.Strategy == "" || o.Strategy == Auto) {
		o.Strategy = strategy.GivenStrategy
	}
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

// Strategies lists every strategy name plan accepts besides auto and
// the "pipeline" shorthand, sorted.
func Strategies() []string { return strategy.Names() }

// Run plans a model on a cluster.
func Run(ctx context.Context, opts Options) (*Result, error) {
	opts = opts.withDefaults()
	if (opts.Placement != "" || opts.PlacementFile != nil) && opts.Strategy != strategy.GivenStrategy {
		return nil, &InputError{fmt.Errorf("a placement file is planned as given, by strategy %s, not %s", strategy.GivenStrategy, opts.Strategy)}
	}
	r := &run{opts: opts, wantGiven: opts.Strategy == strategy.GivenStrategy}
	res := &Result{}
	for _, st := range stages {
		start := time.Now()
		err := r.runStage(ctx, st)
		res.Timings = append(res.Timings, Timing{st.name, time.Since(start)})
		if err != nil {
			return res, err
		}
	}
	if err := checkFinite(r, planFigures(r.plan)); err != nil {
		return res, err
	}
	res.Plan, res.Graph, res.Cluster, res.Sim = r.plan, r.model.Graph, r.cluster, r.sim
	return res, nil
}

// runStage runs one stage inside the caller's AroundStage, then, with
// CheckStages on, checks the graph it wrote.
func (r *run) runStage(ctx context.Context, st stage) error {
	if err := r.callStage(ctx, st); err != nil {
		return err
	}
	if CheckStages {
		return checkAfter(st, r)
	}
	return nil
}

func (r *run) callStage(ctx context.Context, st stage) error {
	if r.opts.AroundStage != nil {
		if end := r.opts.AroundStage(st.name); end != nil {
			defer end()
		}
	}
	return st.fn(ctx, r)
}

func importModel(_ context.Context, r *run) error {
	if r.opts.Model != nil {
		r.model = shared(r.opts.Model, r.opts.RespectDevices)
		return nil
	}
	m, err := LoadModel(r.opts.ModelPath, r.opts.Import)
	if err != nil {
		return err
	}
	r.model = m
	return nil
}

// shared is a copy of an imported model that the stages may change
// without changing it: they replace its graph rather than edit it, but
// for resolvePins, which sets or clears the ops' devices (so a graph
// whose ops name devices, or whose pins are respected, gets its own op
// list), and append to its warnings.
func shared(m *Model, respectDevices bool) *Model {
	c := *m
	c.Warnings = slices.Clip(m.Warnings)
	if respectDevices || slices.ContainsFunc(m.Graph.Ops, func(op graph.Op) bool { return op.Device != "" }) {
		// The copy shares the name maps, built first so that neither
		// graph builds them for itself alone.
		m.Graph.OpByName("")
		g := *m.Graph
		g.Ops = slices.Clone(m.Graph.Ops)
		c.Graph = &g
	}
	return &c
}

// buildTrainingStep replaces the forward graph by one training step's:
// backward ops colocated with their forward ops, weight gradients and the
// optimizer update. A costed graph that already carries backward ops is
// taken as it is.
func buildTrainingStep(_ context.Context, r *run) error {
	switch r.opts.Mode {
	case ModeInfer:
	case ModeTrain:
	default:
		return &InputError{fmt.Errorf("unknown mode %q: use train or infer", r.opts.Mode)}
	}
	if err := fuseAttention(r); err != nil {
		return err
	}
	if err := applyPrecision(r); err != nil {
		return err
	}
	if r.opts.Mode == ModeInfer {
		return nil
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
	g, st, err := train.Build(r.model.Graph, train.Options{Optimizer: opt})
	if err != nil {
		return &InputError{fmt.Errorf("%s: %w", r.opts.ModelPath, err)}
	}
	if st.Update == 0 {
		// Nothing to train: the step would be the forward pass under a
		// training plan's name.
		r.model.Warnings = append(r.model.Warnings, fmt.Sprintf("%s has no trainable weights; planning it as inference, a forward pass (no floating-point initializer or constant is read as a layer's weight: docs/onnx-import.md#trainable-weights)", r.opts.ModelPath))
		r.opts.Mode = ModeInfer
		return nil
	}
	r.model.Graph = g
	return nil
}

// resolvePins turns the device fields a model carries into pins on
// cluster devices when RespectDevices asks for it, before the training
// step copies them to gradients: a TensorFlow graph's (the "_device"
// attribute of its ops, resolved through the device template) and a
// costed graph's (ops[].device, already the op's Device, a cluster
// device's name). Without RespectDevices the model's devices pin
// nothing, whatever its format.
func resolvePins(_ context.Context, r *run) error {
	g := r.model.Graph
	if !r.opts.RespectDevices {
		for i := range g.Ops {
			if g.Ops[i].Device != "" {
				g.Ops[i].Device = ""
			}
		}
		return nil
	}
	for i := range g.Ops {
		if dev := g.Ops[i].Device; dev != "" {
			if _, ok := r.cluster.DeviceIndex(dev); !ok {
				return &InputError{fmt.Errorf("%s: op %q: device %q is not a device of cluster %q (%s)", r.opts.ModelPath, g.Ops[i].Name, dev, r.cluster.Name, deviceList(r.cluster))}
			}
		}
	}
	tmpl := r.opts.DeviceTemplate
	if tmpl == "" {
		tmpl = tfdevice.DefaultTemplate
	}
	resolve, err := tfdevice.NewPinResolver(r.cluster, tmpl)
	if err != nil {
		return &InputError{err}
	}
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

// deviceList names a cluster's devices, the first few and a count past
// them, for messages about a device it lacks.
func deviceList(c *cluster.Cluster) string {
	const shown = 8
	var names []string
	for i := range c.Devices {
		if i == shown {
			names = append(names, fmt.Sprintf("and %d more", len(c.Devices)-shown))
			break
		}
		names = append(names, c.Devices[i].Name)
	}
	return "devices: " + strings.Join(names, ", ")
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
		return &InputError{errors.New("no cluster given: a plan needs a cluster file (testdata/clusters/ has examples)")}
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
	return cost.Roofline{TF32: r.precision == train.TF32}
}

// clusterChecker is a cost model that can tell, before any placement,
// that the cluster cannot run the graph (a costed graph's op timed only
// on device types the cluster lacks).
type clusterChecker interface {
	CheckCluster(*graph.Graph, *cluster.Cluster) error
}

// checkCluster runs model's cluster check, if it has one.
func checkCluster(model cost.Model, g *graph.Graph, c *cluster.Cluster) error {
	if check, ok := model.(clusterChecker); ok {
		if err := check.CheckCluster(g, c); err != nil {
			return &InputError{err}
		}
	}
	return nil
}

func buildCosts(_ context.Context, r *run) error {
	model := r.costModel()
	if r.fused == nil { // the fuse stage checked the graph before fusing it
		if err := checkCluster(model, r.model.Graph, r.cluster); err != nil {
			return err
		}
	}
	if a, ok := model.(cost.Advisor); ok {
		r.model.Warnings = append(r.model.Warnings, a.Advice(r.model.Graph, r.cluster, r.model.Graph.Batch())...)
	}
	table := cost.NewTable(r.model.Graph, r.cluster, model)
	if r.opts.Mode == ModeInfer && r.model.Costs == nil {
		// The runtime computes ops on weights and known shapes once, at
		// load; per inference they cost nothing. (A costed graph's times
		// are what its file says.)
		table = table.WithFree(r.model.Graph.LoadTimeOps())
	}
	var of []graph.OpID // the placed op of each op the rules were resolved on
	if r.fused != nil {
		of = r.fused.coarse.GroupOf
	}
	if r.rules != nil {
		table = r.rules.bind(table, of)
	}
	p, err := placer.NewProblem(r.model.Graph, table)
	if err != nil {
		return &InputError{fmt.Errorf("%s: %w", r.opts.ModelPath, err)}
	}
	r.problem = strategy.NewProblem(p, r.model.Graph.Batch())
	if r.fused != nil {
		r.problem.Modules = partition.CoarseModuleKeys(r.fused.coarse)
		r.problem.Fine = &strategy.Fine{Coarse: r.fused.coarse, Model: r.fused.fine}
	}
	if r.rules != nil {
		p.Apart, p.Prefer = r.rules.apart, r.rules.prefer
		r.problem.Rules = r.rules.checker
		if pieces := r.rules.pieces(r); pieces != nil {
			r.problem.Modules, r.problem.CutRequired = pieces, true
		}
	}
	if r.given != nil {
		r.problem.Given = r.given.onGraph(r)
	}
	return nil
}

// lowerBound is the bound the plan is held to (strategy.SpaceBound): the
// largest of the registered bounds of the strategy's family (for a
// placement, the critical path and the work; for auto and the other
// families, which split the batch, the work and the critical path
// divided by the batch; for plans that fit, the memory-forced
// communication and the LP relaxation too). assemble drops the parts
// that count memory when the plan does not fit.
func lowerBound(_ context.Context, r *run) error {
	family := strategy.Family(r.opts.Strategy)
	if g := r.problem.Given; g != nil && r.opts.Strategy == strategy.GivenStrategy {
		family = g.Family() // a given plan file's shape
	}
	r.bound = strategy.SpaceBound(r.problem, family)
	r.boundKind = r.bound.Kind()
	return nil
}

// checkFinite rejects a plan whose predicted figures are not finite
// numbers, before anything is written: costs so large that the step's sums
// overflow (measured times near the float64 limit) would otherwise fail as
// a JSON encoding error, a bug's exit code. Every other figure of a plan
// (op starts and ends, device and stage times) lies within the step, so
// the headline figures are the ones to check.
func checkFinite(r *run, figures map[string]float64) error {
	names := make([]string, 0, len(figures))
	for name := range figures {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if v := figures[name]; math.IsNaN(v) || math.IsInf(v, 0) {
			return &InputError{fmt.Errorf("%s: the %s is %v: %s", r.opts.ModelPath, name, v, slowestOp(r))}
		}
	}
	return nil
}

// slowestOp names the op whose cost is most likely to have overflowed a
// plan's sums: the one with the largest finite time.
func slowestOp(r *run) string {
	t := r.problem.Costs
	op, dev, worst := -1, 0, 0.0
	for i := range t.Graph.Ops {
		for d := 0; d < t.NumDevices(); d++ {
			if v := t.OpTime(graph.OpID(i), d); !math.IsInf(v, 1) && (op < 0 || v > worst || math.IsNaN(v)) {
				op, dev, worst = i, d, v
				if math.IsNaN(v) {
					break
				}
			}
		}
	}
	if op < 0 {
		return "no op has a finite time; check the model's costs"
	}
	return fmt.Sprintf("op %q costs %g s on %s, too much for the step's sums; check the time or sizes the model gives it",
		t.Graph.Ops[op].Name, worst, t.Cluster.Devices[dev].Type.Name)
}

// planFigures are the figures of a plan checkFinite checks.
func planFigures(p *plan.Plan) map[string]float64 {
	f := map[string]float64{
		"predicted step (ms)": p.PredictedStepMS, "lower bound (ms)": p.LowerBoundMS, "gap to the bound": p.Gap,
		"throughput (samples/s)": p.ThroughputSamplesPerS, "strategy's own estimate (ms)": p.EstimatedStepMS,
		"bottleneck stage time (ms)": p.BottleneckMS,
	}
	for _, c := range p.Candidates {
		f["predicted step of candidate "+c.Strategy+" (ms)"] = c.PredictedStepMS
		f["throughput of candidate "+c.Strategy+" (samples/s)"] = c.ThroughputSamplesPerS
	}
	return f
}
