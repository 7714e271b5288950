// Package replan re-plans a training step for a cluster that changed
// under it (a device failed, a host was taken back, the job grew), with
// the cost of getting there in the objective: auto searches the plan
// space of the new cluster (package pipeline), and every plan it finds,
// and the old plan itself where it still runs, is scored by its step
// times the steps it will run plus the time to move the parameters and
// optimizer state from where the old plan keeps them to where the plan
// needs them. docs/replan.md describes the model.
package replan

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
	"github.com/opplace/opplace/partition"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/strategy"
)

// DefaultAmortizeSteps is the steps a new plan is taken to run, when the
// caller gives none: a placeholder to set to the steps expected before
// the cluster changes again (docs/replan.md).
const DefaultAmortizeSteps = 1000

// DefaultCheckpointBandwidth is the rate, in bytes per second, at which
// the job reads state no surviving device holds from its checkpoint, when
// the caller gives none: about 1.2 GB/s, the throughput of an Amazon
// FSx for Lustre file system of 1,200 GiB (the smallest SageMaker
// provisions) at the highest persistent SSD tier, 1000 MB/s per TiB of
// storage (docs/replan.md gives the sources). It is the whole job's rate:
// every read shares it.
const DefaultCheckpointBandwidth = 1.2e9

// Options says what to re-plan.
type Options struct {
	// Plan is the old plan; when nil, PlanPath is read. PlanPath names
	// it in messages either way.
	Plan     *plan.Plan
	PlanPath string
	// ModelPath is the model file; "" takes the plan's (its model field,
	// the path it was planned from).
	ModelPath string
	// ClusterPath is the new cluster's file; Cluster, if set, is used
	// instead.
	ClusterPath string
	Cluster     *cluster.Cluster
	// AmortizeSteps is K, the steps the new plan is expected to run: the
	// objective is step × K + migration. 0 means DefaultAmortizeSteps.
	AmortizeSteps int64
	// CheckpointBandwidth is the rate, in bytes per second, at which the
	// job reads state from its checkpoint; 0 means
	// DefaultCheckpointBandwidth.
	CheckpointBandwidth float64
	// Gradients counts the weight gradients as state to move, for a
	// migration in the middle of a step's gradient accumulation; by
	// default they are not moved, since at a step boundary they hold
	// nothing the next step reads.
	Gradients bool
	// Planning is how the old plan was made and the new one is: the
	// import bindings (Import.Batch defaults to the plan's batch), the
	// optimizer (default: the one the plan's updates run), the plan
	// space's options (Strategies, Schedule, MicroBatches, Objective),
	// Fusion, CostModel and AroundStage. Mode, Precision and Runtime
	// default to the plan's and must agree with it. Its ModelPath, Model, Cluster,
	// Strategy, Placement and Choose are set by Run.
	Planning pipeline.Options
}

// Result is a finished re-plan.
type Result struct {
	// Model is the model file planned; Mode, Precision and Batch the
	// step's.
	Model     string `json:"model"`
	Mode      string `json:"mode"`
	Precision string `json:"precision,omitempty"`
	Batch     int64  `json:"batch,omitempty"`
	// OldPlan names the old plan; OldCluster is its cluster's name and
	// Cluster the new cluster's.
	OldPlan    string `json:"old_plan"`
	OldCluster string `json:"old_cluster"`
	Cluster    string `json:"cluster"`
	// AmortizeSteps is K; CheckpointBandwidth the checkpoint's read rate
	// in bytes per second; Gradients whether gradients count as state.
	AmortizeSteps       int64   `json:"amortize_steps"`
	CheckpointBandwidth float64 `json:"checkpoint_bandwidth_bytes_per_s"`
	Gradients           bool    `json:"gradients_moved"`
	// Devices says which devices the change kept, lost and added.
	Devices Devices `json:"devices"`
	// StateBytes is one copy of the state, by kind.
	StateBytes StateBytes `json:"state_bytes"`
	// Before is the old plan's step, and what it does on the new cluster.
	Before Before `json:"before"`
	// Chosen is the plan kept; FromScratch auto's best plan on the new
	// cluster (the choice as K grows without bound, unless the old plan
	// is faster still), its devices renamed where that keeps state in
	// place at no cost to its step.
	Chosen      Option `json:"chosen"`
	FromScratch Option `json:"from_scratch"`
	// ChosenIsFromScratch says the two are one plan.
	ChosenIsFromScratch bool `json:"chosen_is_from_scratch"`
	// BreakEvenSteps is the number of steps after which the from-scratch
	// plan would have paid off its longer migration with its shorter
	// step: 0 when it is the chosen plan or ties it, null when it never
	// does (its step is no shorter). The chosen plan wins at K, so it is
	// K or more.
	BreakEvenSteps *int64 `json:"break_even_steps"`
	// Candidates are every plan scored, least objective first: the old
	// plan as it is (Keep) where it runs, and every plan of auto's search.
	Candidates []Option `json:"candidates"`
	// Pruned are the strategies auto did not run, with the bound that
	// proves none of their plans beats the chosen objective.
	Pruned []Pruned `json:"pruned"`
	// Plan is the chosen plan, the document opplace plan writes.
	Plan *plan.Plan `json:"-"`
	// Stages time the re-plan: reading the old plan and the new cluster,
	// the import, the old plan on the new
	// cluster, auto's stages on the new cluster (training step, fusion,
	// costs, bound, search, assembly), the migrations scored, and the
	// rest; they vary from run to run, so JSON leaves them out.
	Stages []Stage       `json:"-"`
	Wall   time.Duration `json:"-"`
}

// Devices compares the old plan's devices with the new cluster's, by
// name: a device is kept when the new cluster has one of its name, type
// and host, lost otherwise (a device of the same name but another type or
// host is lost and added: its state is not there).
type Devices struct {
	Kept  []string `json:"kept"`
	Lost  []string `json:"lost"`
	Added []string `json:"added"`
}

// StateBytes is state by kind, in bytes.
type StateBytes struct {
	Weights   int64 `json:"weights"`
	Optimizer int64 `json:"optimizer"`
	Gradients int64 `json:"gradients,omitempty"`
}

// Before is the old plan's step.
type Before struct {
	// Strategy and StepMS are the old plan's, on its own cluster.
	Strategy string  `json:"strategy"`
	StepMS   float64 `json:"step_ms"`
	// RunsOnNew says the old plan runs on the new cluster as it is (every
	// device it uses is kept); NewStepMS is then its step there, and
	// Why otherwise says why it cannot run.
	RunsOnNew bool    `json:"runs_on_new"`
	NewStepMS float64 `json:"new_step_ms,omitempty"`
	Why       string  `json:"why,omitempty"`
}

// Option is one plan scored.
type Option struct {
	// Strategy is auto's strategy, or "keep" for the old plan as it is.
	Strategy string `json:"strategy"`
	Family   string `json:"family,omitempty"`
	Shape    string `json:"shape,omitempty"`
	// Keep says it is the old plan, on the devices it ran on; Renamed
	// that its devices were renamed to keep state in place.
	Keep    bool    `json:"keep,omitempty"`
	Renamed bool    `json:"renamed,omitempty"`
	Fits    bool    `json:"fits"`
	StepMS  float64 `json:"step_ms"`
	// MigrationMS is the time to move the state (MigrationBoundMS the
	// least any order of the moves takes); LinkBytes the bytes moved
	// between devices, CheckpointBytes those read from the checkpoint.
	MigrationMS      float64 `json:"migration_ms"`
	MigrationBoundMS float64 `json:"migration_bound_ms"`
	LinkBytes        int64   `json:"link_bytes"`
	CheckpointBytes  int64   `json:"checkpoint_bytes"`
	// ObjectiveMS is StepMS × K + MigrationMS.
	ObjectiveMS float64 `json:"objective_ms"`
	// Moves are what each device receives, from each source.
	Moves []Move `json:"moves,omitempty"`
	// Why says why it was not chosen.
	Why string `json:"why,omitempty"`

	order int // candidates in search order, the old plan first
}

// Pruned is a strategy auto's search did not run.
type Pruned struct {
	Strategy string `json:"strategy"`
	Family   string `json:"family"`
	// BoundMS is the least step of any plan of its family.
	BoundMS float64 `json:"bound_ms"`
}

// Stage is how long one part of a re-plan took.
type Stage struct {
	Stage    string
	Duration time.Duration
}

// Keep is the strategy name of the old plan kept as it is.
const Keep = "keep"

func inputErr(format string, args ...any) error {
	return &pipeline.InputError{Err: fmt.Errorf(format, args...)}
}

// replanner carries one re-plan.
type replanner struct {
	opts    Options
	old     *plan.Plan
	src     string
	k       int64
	bw      float64
	c       *cluster.Cluster
	survive map[string]int // old device name: its index in the new cluster
	lost    map[string]int // old device name: its key past the new cluster's
	keepRes *pipeline.Result
	keepWhy string

	ps       []piece
	mig      *migrator
	keepOpt  *Option
	cands    []Option // per candidate of the choice, scored
	fromIdx  int      // the from-scratch candidate
	chosen   int      // -1: keep
	pruned   []Pruned
	failed   []Option // strategies that found no plan
	migrateT time.Duration
}

// Run re-plans: it reads the old plan and the new cluster, imports the
// model as the plan was made (its batch, mode, precision and optimizer),
// plans the old plan as it is on the new cluster where every device it
// uses is kept, runs auto's search on the new cluster, and keeps the plan
// of least step × K + migration. Errors in the input are
// *pipeline.InputError; a model that fits no plan of the new cluster is
// the planner's infeasibility error.
func Run(ctx context.Context, opts Options) (*Result, error) {
	start := time.Now()
	r := &replanner{opts: opts, k: opts.AmortizeSteps, bw: opts.CheckpointBandwidth, chosen: -1}
	if err := r.read(); err != nil {
		return nil, err
	}
	stages := []Stage{{"read", time.Since(start)}}
	base := opts.Planning
	old := r.old
	switch {
	case base.Mode == "":
		base.Mode = old.Mode
	case old.Mode != "" && base.Mode != old.Mode:
		return nil, inputErr("%s: the plan is of mode %s, not %s: a re-plan keeps the mode", r.src, old.Mode, base.Mode)
	}
	switch {
	case base.Precision == "":
		base.Precision = old.Precision
	case base.Precision != old.Precision:
		return nil, inputErr("%s: the plan is in precision %s, not %s: a re-plan keeps the precision, whose state it moves", r.src, orDefault(old.Precision, "of the model file"), base.Precision)
	}
	switch {
	case base.Runtime == "" || base.Runtime == pipeline.RuntimeAuto:
		// The runtime decides which ops the step has (a fused attention
		// kernel is one op): the plan's, or the default when it names none.
		if old.Runtime != "" {
			base.Runtime = old.Runtime
		}
	case base.Runtime != old.Runtime:
		return nil, inputErr("%s: the plan was made for runtime %s, not %s: a re-plan keeps the runtime, whose ops the plan places", r.src, orDefault(old.Runtime, pipeline.RuntimeAuto), base.Runtime)
	}
	if base.Optimizer == "" {
		base.Optimizer = optimizerOf(old)
	}
	modelPath := opts.ModelPath
	if modelPath == "" {
		if modelPath = old.Model; modelPath == "" {
			return nil, inputErr("%s: the plan names no model (its model field is empty): name the model file", r.src)
		}
	}
	imp := base.Import
	if imp.Batch == 0 && old.Batch > 0 {
		imp.Batch = old.Batch
	}
	t0 := time.Now()
	model, err := pipeline.LoadModel(modelPath, imp)
	stages = append(stages, Stage{pipeline.StageImport, time.Since(t0)})
	if err != nil {
		if opts.ModelPath == "" {
			return nil, fmt.Errorf("%s names the model it was planned from in its model field: %w", r.src, err)
		}
		return nil, err
	}
	if got := model.Graph.Batch(); old.Batch > 0 && got != old.Batch {
		return nil, inputErr("%s: the plan's batch is %d, but %s imports with batch %d: bind the model's dimensions as the plan was made", r.src, old.Batch, modelPath, got)
	}
	base.ModelPath, base.Model, base.Import = modelPath, model, imp
	base.ClusterPath, base.Cluster = "", r.c
	base.Placement, base.PlacementFile, base.Choose = "", nil, nil

	if r.keepWhy = r.keepable(); r.keepWhy == "" {
		t0 = time.Now()
		ko := base
		ko.Strategy, ko.PlacementFile, ko.Fill = strategy.GivenStrategy, &pipeline.PlacementFile{Path: r.src, Plan: old}, ""
		res, err := pipeline.Run(ctx, ko)
		stages = append(stages, Stage{"old plan", time.Since(t0)})
		switch {
		case err == nil && res.Plan.Fits:
			r.keepRes = res
		case err == nil:
			r.keepWhy = "it does not fit the new cluster's memory"
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case refused(err):
			r.keepWhy = err.Error()
		default:
			return nil, fmt.Errorf("the old plan on the new cluster: %w", err)
		}
	}
	t0 = time.Now()
	ao := base
	ao.Strategy, ao.Choose = pipeline.Auto, r.choose
	res, err := pipeline.Run(ctx, ao)
	if err != nil {
		return nil, err
	}
	// auto's stages on the new cluster (the model was imported above),
	// its search without the migrations scored inside it.
	var rest time.Duration
	for _, tm := range res.Timings {
		switch tm.Stage {
		case pipeline.StageImport:
		case "place":
			stages = append(stages, Stage{"search", tm.Duration - r.migrateT})
		case "train", "fuse", "cost", "bound", "assemble":
			stages = append(stages, Stage{tm.Stage, tm.Duration})
		default:
			rest += tm.Duration
		}
	}
	stages = append(stages, Stage{"migration", r.migrateT}, Stage{"other", rest + time.Since(t0) - sum(res.Timings)})
	out := r.result(modelPath, res)
	out.Stages, out.Wall = stages, time.Since(start)
	return out, nil
}

func sum(ts []pipeline.Timing) time.Duration {
	var d time.Duration
	for _, t := range ts {
		d += t.Duration
	}
	return d
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// refused says an error is the planner refusing the old plan on the new
// cluster (bad input or memory), not a fault.
func refused(err error) bool {
	var in *pipeline.InputError
	var inf *placer.InfeasibleError
	var pinf *partition.InfeasibleError
	var conflict *constraint.ConflictError
	return errors.As(err, &in) || errors.As(err, &inf) || errors.As(err, &pinf) || errors.As(err, &conflict)
}

// read reads the old plan and the new cluster and checks the figures.
func (r *replanner) read() error {
	opts := r.opts
	r.src = opts.PlanPath
	r.old = opts.Plan
	if r.old == nil {
		if opts.PlanPath == "" {
			return inputErr("no plan given: a re-plan starts from the plan file of an earlier run")
		}
		p, err := plan.ReadFile(opts.PlanPath)
		if err != nil {
			return &pipeline.InputError{Err: err}
		}
		r.old = p
	}
	if r.src == "" {
		r.src = "the plan"
	}
	if len(r.old.Ops) == 0 {
		return inputErr("%s: the plan lists no ops", r.src)
	}
	switch {
	case r.k == 0:
		r.k = DefaultAmortizeSteps
	case r.k < 0:
		return inputErr("amortization over %d steps: want 1 or more", r.k)
	}
	switch {
	case r.bw == 0:
		r.bw = DefaultCheckpointBandwidth
	case !(r.bw > 0) || math.IsInf(r.bw, 1):
		return inputErr("checkpoint bandwidth %g bytes/s: want a positive rate", r.bw)
	}
	r.c = opts.Cluster
	if r.c == nil {
		if opts.ClusterPath == "" {
			return inputErr("no new cluster given: a re-plan needs the cluster file of the changed cluster")
		}
		c, err := cluster.Load(opts.ClusterPath)
		if err != nil {
			return &pipeline.InputError{Err: err}
		}
		r.c = c
	}
	nd := len(r.c.Devices)
	r.survive, r.lost = map[string]int{}, map[string]int{}
	for _, d := range r.old.Devices {
		if i, ok := r.c.DeviceIndex(d.Name); ok && r.c.Devices[i].Type.Name == d.Type && r.c.Hosts[r.c.Devices[i].Host].Name == d.Host {
			r.survive[d.Name] = i
			continue
		}
		r.lost[d.Name] = nd + len(r.lost)
	}
	return nil
}

// optimizerOf is the optimizer a plan's updates run ("UpdateAdam":
// adam), or "" for the planner's default.
func optimizerOf(p *plan.Plan) string {
	for i := range p.Ops {
		if t, ok := strings.CutPrefix(p.Ops[i].Type, "Update"); ok && p.Ops[i].Phase == "update" && t != "" {
			return strings.ToLower(t)
		}
	}
	return ""
}

// oldKey is an old plan's device's key: its index in the new cluster if
// kept, else past them.
func (r *replanner) oldKey(name string) (int, error) {
	if i, ok := r.survive[name]; ok {
		return i, nil
	}
	if k, ok := r.lost[name]; ok {
		return k, nil
	}
	return 0, fmt.Errorf("device %q is not one of the plan's devices", name)
}

// newKey is a new cluster's device's index.
func (r *replanner) newKey(name string) (int, error) {
	if i, ok := r.c.DeviceIndex(name); ok {
		return i, nil
	}
	return 0, fmt.Errorf("device %q is not a device of cluster %s", name, r.c.Name)
}

// keepable says why the old plan cannot run on the new cluster as it is,
// or "" when every device it uses is kept.
func (r *replanner) keepable() string {
	used := map[string]bool{}
	for i := range r.old.Ops {
		used[r.old.Ops[i].Device] = true
	}
	for _, st := range r.old.Stages {
		for _, d := range st.Devices {
			used[d] = true
		}
	}
	for _, d := range r.old.Devices {
		if !used[d.Name] {
			continue
		}
		if _, ok := r.survive[d.Name]; ok {
			continue
		}
		if i, ok := r.c.DeviceIndex(d.Name); ok {
			nd := &r.c.Devices[i]
			return fmt.Sprintf("it runs on %s, which is a %s on host %s in the new cluster, a %s on host %s in the plan", d.Name, nd.Type.Name, r.c.Hosts[nd.Host].Name, d.Type, d.Host)
		}
		return fmt.Sprintf("it runs on %s, which the new cluster lacks", d.Name)
	}
	return ""
}

// choose scores every plan auto found, and the old plan as it is, and
// picks the least objective (pipeline.Options.Choose).
func (r *replanner) choose(ctx context.Context, ch *pipeline.Choice) (pipeline.Pick, error) {
	t0 := time.Now()
	defer func() { r.migrateT += time.Since(t0) }()
	r.ps = pieces(ch.Graph, r.opts.Gradients)
	oldL, err := planLayout(r.old, ch.Graph, r.oldKey, r.src)
	if err != nil {
		return pipeline.Pick{}, &pipeline.InputError{Err: err}
	}
	r.mig = newMigrator(ch.Cluster, r.ps, oldL.hold(r.ps), r.bw)
	if r.keepRes != nil {
		kl, err := planLayout(r.keepRes.Plan, ch.Graph, r.newKey, "the old plan on the new cluster")
		if err != nil {
			return pipeline.Pick{}, err
		}
		o := r.option(kl, r.keepRes.Plan.PredictedStepMS)
		o.Strategy, o.Family, o.Keep, o.Fits, o.order = Keep, r.old.Family, true, true, -1
		o.Shape = shapeOf(r.keepRes.Plan)
		r.keepOpt = &o
	}
	r.cands = make([]Option, 0, len(ch.Candidates))
	for i := range ch.Candidates {
		if err := r.score(ch, i); err != nil {
			return pipeline.Pick{}, err
		}
	}
	// A strategy the search pruned takes at least its bound a step: it
	// can beat the best objective only while bound × K is below it.
	for _, p := range slices.Clone(ch.Pruned) {
		if p.BoundMS*float64(r.k) >= r.best().ObjectiveMS {
			continue
		}
		i, err := ch.Evaluate(ctx, p.Strategy)
		if err != nil {
			return pipeline.Pick{}, err
		}
		if i >= 0 {
			if err := r.score(ch, i); err != nil {
				return pipeline.Pick{}, err
			}
		}
	}
	for _, p := range ch.Pruned {
		r.pruned = append(r.pruned, Pruned{Strategy: p.Strategy, Family: p.Family, BoundMS: p.BoundMS})
	}
	for _, f := range ch.Failed {
		o := Option{Strategy: f.Strategy, Family: f.Family, Why: "found no plan", order: len(ch.Candidates) + len(r.failed)}
		if f.Err != nil {
			o.Why = oneLine(f.Err.Error())
		}
		r.failed = append(r.failed, o)
	}
	r.fromIdx = ch.Best
	best := r.best()
	r.chosen = best.order
	pick := pipeline.Pick{Candidate: max(r.chosen, 0), Why: map[string]string{}}
	if r.chosen < 0 {
		pick.Candidate = ch.Best
	}
	for i := range r.cands {
		if i != r.chosen {
			r.cands[i].Why = r.why(&r.cands[i], best)
			if r.cands[i].Fits {
				pick.Why[r.cands[i].Strategy] = r.cands[i].Why
			}
		}
	}
	if r.keepOpt != nil && r.chosen >= 0 {
		r.keepOpt.Why = r.why(r.keepOpt, best)
	}
	for _, p := range r.pruned {
		pick.Why[p.Strategy] = fmt.Sprintf("pruned: any %s plan takes at least %.3f ms a step, %s over %s, more than the chosen objective %s",
			p.Family, p.BoundMS, plan.FormatMS(p.BoundMS*float64(r.k)), steps(r.k), plan.FormatMS(best.ObjectiveMS))
	}
	return pick, nil
}

// score scores candidate i, renaming its devices where that keeps more
// state in place at no cost to its step.
func (r *replanner) score(ch *pipeline.Choice, i int) error {
	cand := ch.Candidates[i]
	o := Option{Strategy: cand.Strategy, Family: cand.Family, Shape: cand.Shape, Fits: cand.Fits, StepMS: plan.MS(cand.Sim.Step), order: i}
	if cand.Fits {
		nd := len(ch.Cluster.Devices)
		need := simLayout(cand.Plan, nd).hold(r.ps)
		o = r.scored(o, need)
		if perm := r.mig.renaming(need); perm != nil {
			rc, err := ch.Rename(i, perm)
			if err != nil {
				return err
			}
			if rc.Fits && rc.Sim.Step <= cand.Sim.Step*(1+1e-9) {
				ro := r.scored(Option{Strategy: rc.Strategy, Family: rc.Family, Shape: rc.Shape, Fits: true, Renamed: true, StepMS: plan.MS(rc.Sim.Step), order: i},
					simLayout(rc.Plan, nd).hold(r.ps))
				if ro.ObjectiveMS < o.ObjectiveMS {
					ch.Candidates[i], o = rc, ro
				}
			}
		}
	}
	r.cands = append(r.cands, o)
	return nil
}

// option scores a layout of the given step.
func (r *replanner) option(l *layout, stepMS float64) Option {
	return r.scored(Option{StepMS: stepMS}, l.hold(r.ps))
}

// scored fills in o's migration to the holdings need and its objective.
func (r *replanner) scored(o Option, need holdings) Option {
	mg := r.mig.migrate(need)
	o.Moves, o.LinkBytes, o.CheckpointBytes = mg.moves, mg.linkBytes, mg.checkpointBytes
	o.MigrationMS, o.MigrationBoundMS = mg.ms, mg.boundMS
	o.ObjectiveMS = plan.MS((o.StepMS*float64(r.k) + o.MigrationMS) / 1e3)
	return o
}

// best is the option of least objective: within a relative 1e-9, the
// one that moves fewer bytes, then the old plan, then the first in the
// search's order.
func (r *replanner) best() *Option {
	var b *Option
	consider := func(o *Option) {
		if !o.Fits {
			return
		}
		if b == nil {
			b = o
			return
		}
		tol := 1e-9 * b.ObjectiveMS
		switch {
		case o.ObjectiveMS < b.ObjectiveMS-tol:
			b = o
		case o.ObjectiveMS <= b.ObjectiveMS+tol && o.LinkBytes+o.CheckpointBytes < b.LinkBytes+b.CheckpointBytes:
			b = o
		}
	}
	if r.keepOpt != nil {
		consider(r.keepOpt)
	}
	for i := range r.cands {
		consider(&r.cands[i])
	}
	return b
}

// why says why o lost to the chosen best.
func (r *replanner) why(o, best *Option) string {
	if !o.Fits {
		return "does not fit"
	}
	return fmt.Sprintf("objective %s (%.3f ms × %d + migration %s), %s",
		plan.FormatMS(o.ObjectiveMS), o.StepMS, r.k, plan.FormatMS(o.MigrationMS), above(o, best))
}

// above compares o's objective with the chosen's.
func above(o, best *Option) string {
	if o.ObjectiveMS <= best.ObjectiveMS*(1+1e-9) {
		ob, bb := o.LinkBytes+o.CheckpointBytes, best.LinkBytes+best.CheckpointBytes
		if ob > bb {
			return fmt.Sprintf("ties the chosen's, moving more (%s against %s)", cluster.FormatBytes(ob), cluster.FormatBytes(bb))
		}
		if best.Keep {
			return "ties the chosen's: a tie keeps the old plan"
		}
		return "ties the chosen's, found later"
	}
	return fmt.Sprintf("%.2f%% above the chosen's", 100*(o.ObjectiveMS/best.ObjectiveMS-1))
}

// shapeOf summarises a plan document's shape as auto's candidates list
// does: stages, replicas, tensor-parallel groups, micro-batches, ZeRO and
// recomputation.
func shapeOf(p *plan.Plan) string {
	if len(p.Stages) == 0 {
		return ""
	}
	var b strings.Builder
	reps := make([]string, len(p.Stages))
	same := true
	for i, st := range p.Stages {
		reps[i] = fmt.Sprint(st.Replicas)
		same = same && reps[i] == reps[0]
	}
	switch st := p.Stages[0]; {
	case len(p.Stages) == 1:
		fmt.Fprintf(&b, "1 stage of %d device(s) x %d replica(s)", len(st.Devices)/max(st.Replicas, 1), st.Replicas)
	case same:
		fmt.Fprintf(&b, "%d stages x %s replica(s)", len(p.Stages), reps[0])
	default:
		fmt.Fprintf(&b, "%d stages (%s replicas)", len(p.Stages), strings.Join(reps, ","))
	}
	if t := p.Stages[0].TensorParallel; t > 1 {
		fmt.Fprintf(&b, ", tensor-parallel groups of %d", t)
	}
	if p.MicroBatches > 1 {
		fmt.Fprintf(&b, ", %d micro-batches", p.MicroBatches)
	}
	var zs []string
	recompute := false
	for _, st := range p.Stages {
		if st.Sharding != "" && !slices.Contains(zs, st.Sharding) {
			zs = append(zs, st.Sharding)
		}
		recompute = recompute || st.Recompute
	}
	if len(zs) > 0 {
		fmt.Fprintf(&b, ", %s", strings.Join(zs, ","))
	}
	if recompute {
		b.WriteString(", recompute")
	}
	return b.String()
}

// result gathers the re-plan's result once auto wrote its plan.
func (r *replanner) result(model string, res *pipeline.Result) *Result {
	old := r.old
	out := &Result{Model: model, Mode: res.Plan.Mode, Precision: res.Plan.Precision, Batch: res.Plan.Batch,
		OldPlan: r.src, OldCluster: old.Cluster, Cluster: r.c.Name, AmortizeSteps: r.k, CheckpointBandwidth: r.bw,
		Gradients: r.opts.Gradients, Pruned: append([]Pruned{}, r.pruned...), Devices: Devices{Kept: []string{}, Lost: []string{}, Added: []string{}}}
	for _, d := range old.Devices {
		if _, ok := r.survive[d.Name]; ok {
			out.Devices.Kept = append(out.Devices.Kept, d.Name)
		} else {
			out.Devices.Lost = append(out.Devices.Lost, d.Name)
		}
	}
	for _, d := range r.c.Devices {
		if _, ok := r.survive[d.Name]; !ok {
			out.Devices.Added = append(out.Devices.Added, d.Name)
		}
	}
	for _, p := range r.ps {
		switch kinds[p.kind] {
		case KindWeights:
			out.StateBytes.Weights += p.bytes
		case KindOptimizer:
			out.StateBytes.Optimizer += p.bytes
		case KindGradients:
			out.StateBytes.Gradients += p.bytes
		}
	}
	out.Before = Before{Strategy: old.Strategy, StepMS: old.PredictedStepMS, Why: r.keepWhy}
	if r.keepRes != nil {
		out.Before.RunsOnNew, out.Before.NewStepMS = true, r.keepRes.Plan.PredictedStepMS
	}
	if r.keepOpt != nil {
		out.Candidates = append(out.Candidates, *r.keepOpt)
	}
	out.Candidates = append(out.Candidates, r.cands...)
	out.Candidates = append(out.Candidates, r.failed...)
	slices.SortStableFunc(out.Candidates, func(a, b Option) int {
		switch {
		case a.Fits != b.Fits:
			if a.Fits {
				return -1
			}
			return 1
		case a.ObjectiveMS < b.ObjectiveMS:
			return -1
		case a.ObjectiveMS > b.ObjectiveMS:
			return 1
		}
		return a.order - b.order
	})
	if r.chosen < 0 {
		out.Chosen, out.Plan = *r.keepOpt, r.keepRes.Plan
	} else {
		out.Chosen, out.Plan = r.cands[r.chosen], res.Plan
	}
	out.FromScratch = r.cands[r.fromIdx]
	out.ChosenIsFromScratch = r.chosen == r.fromIdx
	c, f := out.Chosen, out.FromScratch
	switch {
	case out.ChosenIsFromScratch || f.ObjectiveMS <= c.ObjectiveMS*(1+1e-9):
		// One plan, or two that tie: nothing to pay off.
		out.BreakEvenSteps = new(int64)
	case f.StepMS < c.StepMS:
		n := int64(math.Ceil((f.MigrationMS - c.MigrationMS) / (c.StepMS - f.StepMS)))
		out.BreakEvenSteps = &n
	}
	return out
}
