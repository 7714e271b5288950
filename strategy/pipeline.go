package strategy

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/opplace/opplace/partition"
	"github.com/opplace/opplace/sim"
)

// PipelinePrefix names the pipeline strategies: "pipeline:<partitioner>";
// "pipeline" alone is DefaultPartitioner.
const (
	PipelinePrefix     = "pipeline:"
	DefaultPartitioner = "exact"
)

// Every partitioner is a strategy of the pipeline family.
func init() {
	for _, name := range partition.Names() {
		Register(PipelinePrefix+name, FamilyPipeline, partition.Summary(name), func(cfg Config) Strategy {
			return pipelined{name: name, opts: cfg.Pipeline, levels: cfg.levels(sim.NoSharding, sim.ZeRO2), recompute: cfg.Recompute}
		})
	}
}

type pipelined struct {
	name string
	opts partition.Options
	// levels are the ZeRO levels offered to replicated stages, plain DDP
	// first.
	levels []sim.Sharding
	// recompute is Config.Recompute.
	recompute string
}

// Propose cuts the graph into stages with the partitioner, which picks
// the stages, their replicas and the micro-batch count by its analytic
// model; the same stages at half and twice that count (when the count is
// not fixed) go to the judge too, since the model and the simulator can
// disagree on where the bubble and the memory balance. The partitioner's
// memory model leaves out transients the simulator counts (activation
// gradients, received copies), so when the simulator finds its split
// overflowing a device, it partitions again with every device's memory
// scaled down by the overshoot, up to twice. Under --recompute all the
// partitioner models recomputing stages (partition.Options.Recompute);
// under auto, when no split fits without recomputation, it partitions
// again modelling it, and those plans recompute (next to the recomputing
// variants of the splits that did not fit).
func (s pipelined) Propose(ctx context.Context, p *Problem) ([]Proposal, error) {
	if err := pinned(p, PipelinePrefix+s.name); err != nil {
		return nil, err
	}
	if s.recompute == RecomputeAll && training(p.Graph) {
		s.opts.Recompute = true
	}
	out, err := s.attempts(ctx, p)
	if !retryRecomputing(p, s.recompute, s.opts.Recompute, out) {
		return out, err
	}
	rc := s
	rc.opts.Recompute, rc.recompute = true, RecomputeAll
	more, rcErr := rc.attempts(ctx, p)
	if err != nil && rcErr != nil {
		return nil, err
	}
	return append(out, more...), nil
}

// attempts partitions and, while the simulator finds the split
// overflowing, partitions again with less memory (see Propose).
func (s pipelined) attempts(ctx context.Context, p *Problem) ([]Proposal, error) {
	simulate := func(pl *sim.Plan) (*sim.Result, error) { return p.parts.simulate(p, pl) }
	return shrinking(p, func(scale float64, attempt int) ([]Proposal, *sim.Result, error) {
		pp, cutNote, err := s.partition(ctx, p, scale)
		if err != nil {
			return nil, nil, err
		}
		props := s.proposals(p, pp)
		if cutNote != "" {
			for i := range props {
				props[i].Notes = append(props[i].Notes, cutNote)
			}
		}
		if attempt > 0 {
			note := fmt.Sprintf("the partitioner's memory model fell short of the simulator's peak; partitioned again with devices at %.1f%% of their memory", 100*scale)
			for i := range props {
				props[i].Notes = append(props[i].Notes, note)
			}
		}
		res, err := simulate(props[0].Plan)
		props[0].Sim = res // the judge needs it too
		if err == nil {
			// Pipedream and exact often propose the same stages: each
			// plan is simulated once.
			for i := 1; i < len(props); i++ {
				props[i].Sim, _ = simulate(props[i].Plan)
			}
		}
		return recomputeVariants(p, props, s.recompute, simulate), res, nil
	})
}

// retryRecomputing reports whether a pipeline search should run again
// with recomputing stages modelled (partition.Options.Recompute): under
// recompute mode auto, when it did not model them already, the step
// trains, and no plan it proposed fits without recomputing.
func retryRecomputing(p *Problem, mode string, modelled bool, props []Proposal) bool {
	plainFits := func(pr Proposal) bool { return pr.Sim != nil && p.Fits(pr.Sim) && withRecompute(pr.Plan) != nil }
	return mode == "" && !modelled && training(p.Graph) && !slices.ContainsFunc(props, plainFits)
}

// shrinkTries is how many times shrinking partitions at most.
const shrinkTries = 3

// shrinking calls try with every device's memory at its capacity
// (scale 1) and, while the simulator finds the first plan try proposed
// overflowing a device (its result, nil when it could not run), again
// with the memory scaled down by the overshoot: the partitioners' memory
// models leave out transients the simulator counts. It makes three tries
// at most and returns every try's proposals; an error is returned only
// when the first try fails.
func shrinking(p *Problem, try func(scale float64, attempt int) ([]Proposal, *sim.Result, error)) ([]Proposal, error) {
	var out []Proposal
	scale := 1.0
	for attempt := 0; attempt < shrinkTries; attempt++ {
		props, res, err := try(scale, attempt)
		if err != nil {
			if attempt == 0 {
				return nil, err
			}
			break
		}
		out = append(out, props...)
		if res == nil || p.Fits(res) {
			break
		}
		worst := 1.0
		for d, peak := range res.PeakMemory {
			worst = max(worst, float64(peak)/float64(p.Costs.Cluster.Devices[d].Memory))
		}
		scale *= 0.99 / worst
	}
	return out, nil
}

// partition runs the partitioner with every device's memory scaled. When
// op names carry module paths it cuts the stages between modules, and
// also between any ops: the module-aligned split is kept unless the
// simulator finds it more than partition.ModuleCutTolerance worse by the
// objective the partitioners minimise (the slowest stage, or the step
// under the latency objective) (the partitioners' estimates are too coarse for a few per
// cent: on Inception-V3 on hetero one predicted the module split within
// 5% that the simulator ran 19% longer), and the note says which was
// kept and what the modules cost.
func (s pipelined) partition(ctx context.Context, p *Problem, scale float64) (*partition.Plan, string, error) {
	if p.CutRequired {
		// The user's cut rules: between their pieces only, never between
		// ops, whatever it costs.
		pp, err := s.partitionCuts(ctx, p, scale, false)
		if pp == nil && err == nil {
			err = fmt.Errorf("%s%s: %w: the cut rules leave the graph one piece, a single stage", PipelinePrefix, s.name, ErrNotApplicable)
		}
		return pp, "", err
	}
	if s.opts.OpCuts {
		pp, err := s.partitionCuts(ctx, p, scale, true)
		return pp, "", err
	}
	aligned, alignedErr := s.partitionCuts(ctx, p, scale, false)
	if aligned == nil && alignedErr == nil {
		// No modules to cut between.
		pp, err := s.partitionCuts(ctx, p, scale, true)
		return pp, "", err
	}
	free, err := s.partitionCuts(ctx, p, scale, true)
	switch {
	case alignedErr != nil && err != nil:
		return nil, "", alignedErr
	case alignedErr != nil:
		return free, fmt.Sprintf("stages cut between ops, inside modules: cutting only between modules failed (%v)", alignedErr), nil
	case err != nil:
		return aligned, "", nil
	}
	// Both splits are judged by the objective the partitioners minimise,
	// on the simulator's figures.
	what, unit := "step", "simulated step"
	if s.throughput() {
		what, unit = "slowest stage", "the slowest stage's time per step, simulated"
	}
	alignedV, freeV := 0.0, 0.0
	if !p.proxy {
		alignedV, freeV = s.judged(p, aligned), s.judged(p, free)
	}
	if alignedV <= 0 || freeV <= 0 {
		// A split the simulator cannot run, or a proxy problem's (whose
		// simulation is no truer than the partitioner's estimate): the
		// estimates decide.
		alignedV, freeV = s.estimated(aligned), s.estimated(free)
	}
	cost := alignedV/freeV - 1
	if cost > partition.ModuleCutTolerance {
		return free, fmt.Sprintf("stages cut between ops, inside modules: cutting only between modules gives a %.1f%% longer %s (%.3f ms against %.3f ms: %s), over the %.0f%% allowed",
			100*cost, what, alignedV*1e3, freeV*1e3, unit, 100*partition.ModuleCutTolerance), nil
	}
	if cost >= 0.0005 {
		return aligned, fmt.Sprintf("stages cut between modules: a %.1f%% longer %s than cutting between any ops (%.3f ms against %.3f ms: %s), within the %.0f%% allowed",
			100*cost, what, alignedV*1e3, freeV*1e3, unit, 100*partition.ModuleCutTolerance), nil
	}
	return aligned, "", nil
}

// throughput reports whether the partitioners minimise the slowest
// stage (the default) rather than the time through all stages.
func (s pipelined) throughput() bool {
	return s.opts.Objective == "" || s.opts.Objective == partition.Throughput
}

// judged is a split's objective as the simulator finds it at the split's
// own micro-batch count, in seconds, or 0 when the simulator cannot run
// it: under the throughput objective the slowest stage's time in the
// step (its compute over every micro-batch, sends, all-reduce, update
// and exposed tensor syncs: the step's steady-state period, which bounds
// the rate of back-to-back steps), under latency the step itself.
func (s pipelined) judged(p *Problem, pp *partition.Plan) float64 {
	res, err := p.parts.simulate(p, PipelinePlan(p, pp, pp.MicroBatches))
	if err != nil {
		return 0
	}
	if !s.throughput() {
		return res.Step
	}
	var slowest float64
	for _, st := range res.Stages {
		slowest = max(slowest, st.Compute+st.Send+st.AllReduce+st.Update+st.TensorSyncExposed)
	}
	return slowest
}

// estimated is judged's figure from the partitioner's own model.
func (s pipelined) estimated(pp *partition.Plan) float64 {
	if !s.throughput() {
		return pp.StepMs / 1e3
	}
	return pp.BottleneckMs / 1e3 * float64(max(pp.MicroBatches, 1))
}

// partitionCuts runs the partitioner with every device's memory scaled,
// cutting between any ops (opCuts) or between modules only. Between
// modules, it returns nil and no error when the op names carry no
// modules to cut between.
func (s pipelined) partitionCuts(ctx context.Context, p *Problem, scale float64, opCuts bool) (*partition.Plan, error) {
	part, err := partition.New(s.name)
	if err != nil {
		return nil, err
	}
	opts := s.opts
	if p.Batch > 0 && (opts.MaxMicroBatches == 0 || int64(opts.MaxMicroBatches) > p.Batch) {
		opts.MaxMicroBatches = int(min(p.Batch, 32))
	}
	opts.Batch = max(p.Batch, 0)
	costs := p.Costs
	if scale < 1 {
		c := p.Costs.Cluster
		all := make([]int, len(c.Devices))
		for i := range all {
			all[i] = i
		}
		sub := c.Sub(all)
		for i := range sub.Devices {
			sub.Devices[i].Memory = int64(float64(sub.Devices[i].Memory) * scale)
		}
		costs = costs.Restrict(sub)
	}
	opts.OpCuts = opts.OpCuts || opCuts
	prob, err := p.parts.get(partKey{opts, scale}, func() (*partition.Problem, error) {
		return partition.NewProblemRules(costs, opts, p.Modules, p.apartGroups())
	})
	if err != nil {
		return nil, err
	}
	if !opts.OpCuts && !prob.ModuleAligned() {
		// No modules to cut between: the problem is the one cutting
		// between any ops, which need not be built again.
		free := opts
		free.OpCuts = true
		p.parts.add(partKey{free, scale}, prob)
		return nil, nil
	}
	return part.Partition(ctx, prob)
}

// partKey is what defines a partition problem built from a strategy
// problem: the options and the scale of every device's memory.
type partKey struct {
	opts  partition.Options
	scale float64
}

// partCache shares partition problems between the pipeline strategies
// of one strategy problem, so what a partition problem memoises (the
// chain pass pipedream and exact both run) is computed once. It is safe
// for concurrent use; a nil cache shares nothing.
type partCache struct {
	mu    sync.Mutex
	probs map[partKey]*partition.Problem
	// sims are the pipeline plans simulated so far and their results
	// (read-only), so equal plans from different partitioners are
	// simulated once.
	simMu sync.Mutex
	sims  []simmed
}

type simmed struct {
	plan *sim.Plan
	res  *sim.Result
}

// simulate is sim.Run on the problem, memoised by plan in c (nil: no
// memo). A failed run is not kept, and its result is nil.
func (c *partCache) simulate(p *Problem, pl *sim.Plan) (*sim.Result, error) {
	if c == nil {
		return p.Simulate(pl)
	}
	c.simMu.Lock()
	defer c.simMu.Unlock()
	for _, x := range c.sims {
		if samePlan(x.plan, pl) {
			return x.res, nil
		}
	}
	res, err := p.Simulate(pl)
	if err != nil {
		return nil, err
	}
	c.sims = append(c.sims, simmed{pl, res})
	return res, nil
}

// samePlan reports whether two plans are the same point of the plan
// space, so simulate to the same result.
func samePlan(a, b *sim.Plan) bool {
	if a.MicroBatches != b.MicroBatches || a.Schedule != b.Schedule || a.BucketBytes != b.BucketBytes || a.Record != b.Record ||
		!slices.Equal(a.Device, b.Device) || !slices.Equal(a.Priority, b.Priority) || !slices.Equal(a.OpStage, b.OpStage) ||
		(a.Priority == nil) != (b.Priority == nil) || (a.OpStage == nil) != (b.OpStage == nil) ||
		(a.Stages == nil) != (b.Stages == nil) || len(a.Stages) != len(b.Stages) || a.Split != b.Split {
		return false
	}
	for i := range a.Stages {
		ra, rb := a.Stages[i].Replicas, b.Stages[i].Replicas
		if len(ra) != len(rb) || a.Stages[i].Sharding != b.Stages[i].Sharding || a.Stages[i].Tensor != b.Stages[i].Tensor ||
			a.Stages[i].Recompute != b.Stages[i].Recompute {
			return false
		}
		for k := range ra {
			if !slices.Equal(ra[k], rb[k]) {
				return false
			}
		}
	}
	return true
}

// add keeps prob under k unless a problem is kept there already.
func (c *partCache) add(k partKey, prob *partition.Problem) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.probs[k]; ok {
		return
	}
	if c.probs == nil {
		c.probs = map[partKey]*partition.Problem{}
	}
	c.probs[k] = prob
}

func (c *partCache) get(k partKey, build func() (*partition.Problem, error)) (*partition.Problem, error) {
	if c == nil {
		return build()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.probs[k]; ok {
		return p, nil
	}
	p, err := build()
	if err != nil {
		return nil, err
	}
	if c.probs == nil {
		c.probs = map[partKey]*partition.Problem{}
	}
	c.probs[k] = p
	return p, nil
}

// proposals are a partition at its own micro-batch count and, when the
// count is free, at half and twice it.
func (s pipelined) proposals(p *Problem, pp *partition.Plan) []Proposal {
	out := []Proposal{{Plan: PipelinePlan(p, pp, pp.MicroBatches), Estimate: pp.StepMs / 1e3, Pipeline: pp}}
	if s.opts.MicroBatches == 0 {
		maxM := s.opts.MaxMicroBatches
		if maxM == 0 {
			maxM = 32
		}
		for _, m := range []int{pp.MicroBatches / 2, pp.MicroBatches * 2} {
			if m >= 1 && m <= maxM && (p.Batch == 0 || int64(m) <= p.Batch) {
				if pl := PipelinePlan(p, pp, m); p.SplitsBatch(pl) == nil {
					out = append(out, Proposal{Plan: pl, Pipeline: pp})
				}
			}
		}
	}
	// Replicated stages also at each ZeRO level.
	out = shardedVariants(out, levelsFor(p, s.levels))
	if pp.Recompute {
		// The partitioner modelled recomputing stages: its estimate holds.
		for i := range out {
			out[i].Notes = append(slices.Clone(out[i].Notes), recomputeNote)
		}
	}
	return out
}

// PipelinePlan is a partition as a point of the plan space at m
// micro-batches: each stage's ops on its first replica, every replica one
// device, recomputing where the partitioner priced recomputation.
func PipelinePlan(p *Problem, pp *partition.Plan, m int) *sim.Plan {
	n := len(p.Graph.Ops)
	pl := &sim.Plan{
		Placement:    sim.Placement{Device: make([]int, n)},
		OpStage:      pp.OpStage,
		MicroBatches: m,
		Schedule:     sim.Schedule(pp.Schedule),
	}
	for op, st := range pp.OpStage {
		pl.Device[op] = pp.Stages[st].DeviceIndex[0]
	}
	for _, st := range pp.Stages {
		s := sim.Stage{Recompute: pp.Recompute}
		for _, d := range st.DeviceIndex {
			s.Replicas = append(s.Replicas, []int{d})
		}
		pl.Stages = append(pl.Stages, s)
	}
	return pl
}

// apartGroups is each separate rule's op groups, for the partitioners.
func (p *Problem) apartGroups() [][]int8 {
	var out [][]int8
	for _, a := range p.Apart {
		out = append(out, a.Group)
	}
	return out
}
