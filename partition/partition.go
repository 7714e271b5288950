// Package partition splits an operator graph into pipeline stages: each
// stage is a contiguous piece of the graph (every edge goes forward from
// an earlier stage to a later one) that runs on one or more replicas of one
// device type, and micro-batches flow through the stages under a pipeline
// schedule (GPipe or 1F1B).
//
// Ops sharing a Colocate key (a forward op and the backward op the
// training mode derives from it) form one unit that never straddles two
// stages. The partitioners search the same cost model (model.go) and are
// registered by name: "pipedream" (dynamic programme over prefixes of one
// topological order), "exact" (dynamic programme over every downset of
// the DAG) and "gpipe" (balanced single-device stages).
package partition

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/progress"
	"github.com/opplace/opplace/internal/registry"
)

// Schedule names a pipeline schedule.
type Schedule string

const (
	// OneFOneB is PipeDream-Flush: after a warm-up each stage alternates
	// one forward and one backward, so stage i keeps at most
	// min(M, stages-i) micro-batches of activations alive.
	OneFOneB Schedule = "1f1b"
	// GPipe runs every forward, then every backward, keeping all M
	// micro-batches of activations alive.
	GPipe Schedule = "gpipe"
)

// Objective says what the partitioners minimise.
type Objective string

const (
	// Throughput minimises the slowest stage's time per micro-batch (the
	// pipeline's steady-state rate).
	Throughput Objective = "throughput"
	// Latency minimises the sum of the stage times per micro-batch: the
	// time one micro-batch takes through the whole pipeline.
	Latency Objective = "latency"
)

// Options tune a partitioning.
type Options struct {
	// Schedule is OneFOneB (the default when empty) or GPipe.
	Schedule Schedule
	// Objective is Throughput (the default when empty) or Latency.
	Objective Objective
	// MicroBatches is the number of micro-batches M a step is split into;
	// 0 picks the best power of two up to MaxMicroBatches under memory.
	MicroBatches int
	// MaxMicroBatches bounds the automatic choice; 0 means 32. Set it to
	// the batch size when that is smaller, so a micro-batch keeps at least
	// one sample.
	MaxMicroBatches int
	// Batch is the samples one step processes, when known (0: unknown).
	// Runtimes give every replica of a stage the same whole number of
	// samples per micro-batch, so with a batch only splits where M ×
	// replicas divides it, for every stage, are searched, and only
	// micro-batch counts that divide it are tried.
	Batch int64
	// MaxIdeals bounds how many downsets "exact" enumerates before it
	// falls back to "pipedream"; 0 means 200,000.
	MaxIdeals int
	// SearchIdeals is how many downsets "exact" aims to search. A unit
	// graph with at most that many is searched as it is (the plan is then
	// proven optimal); a larger one has its side branches under ε merged,
	// then under 4ε and 16ε while the downsets still pass SearchIdeals,
	// trading a looser optimality bound for speed (the search time grows
	// about with the square of the downsets); 0 means 6,000.
	SearchIdeals int
	// TimeLimit bounds "exact"'s search of the downsets, counted from the
	// end of its pipedream pass; 0 means 30 s. Exact runs its pipedream
	// pass first (bounded by its own deterministic work budget, about a
	// second on a few thousand units, or nothing when another strategy
	// already ran it on this problem), then enumerates and searches
	// downsets until the limit; past it, it keeps the pipedream split for
	// what is left, with a warning, so falling back costs nothing more.
	TimeLimit time.Duration
	// Epsilon is the share of the graph's compute under which "exact"
	// merges a side branch into its neighbour before enumerating downsets
	// (see Plan.Exact for the optimality bound this costs); 0 means
	// 0.001, a negative value merges nothing.
	Epsilon float64
	// OpCuts lets stages cut between any two ops. By default, when op
	// names carry module paths (PyTorch exports name ops
	// "/blocks/blocks.6/attn/MatMul"), stages cut only between the
	// modules ModuleKeys gives, so each stage is a run of whole modules.
	OpCuts bool
	// Recompute models stages that recompute activations per module (as
	// sim.Stage.Recompute runs them): a stage stashes, per micro-batch,
	// only its checkpoints (the forward outputs a forward op of another
	// module reads, and graph outputs) and what it receives, plus once the
	// largest module's saved activations, recomputed for its backward;
	// its backward also runs its forward again.
	Recompute bool
	// ByDegree searches uniform stages on a cluster of one device class
	// whatever its size (see DegreeDevices, from which it is the rule):
	// for a problem standing for a larger cluster, such as one device per
	// tensor-parallel group of it.
	ByDegree bool
	// Stages, when positive, fixes the number of stages: a configuration
	// given whole (strategy parallel). Only the search by degree takes it
	// (each stage then on devices/Stages replicas), so it needs one device
	// class and ByDegree or a class of DegreeDevices or more.
	Stages int
}

func (o Options) withDefaults() Options {
	if o.Schedule == "" {
		o.Schedule = OneFOneB
	}
	if o.Objective == "" {
		o.Objective = Throughput
	}
	if o.MaxMicroBatches <= 0 {
		o.MaxMicroBatches = 32
	}
	if o.MaxIdeals <= 0 {
		o.MaxIdeals = 200_000
	}
	if o.SearchIdeals <= 0 {
		o.SearchIdeals = 6_000
	}
	if o.TimeLimit <= 0 {
		o.TimeLimit = 30 * time.Second
	}
	if o.Epsilon == 0 {
		o.Epsilon = 0.001
	}
	return o
}

// Validate checks the options as NewProblem will, defaults filled in,
// without building a problem.
func (o Options) Validate() error { return o.withDefaults().validate() }

func (o Options) validate() error {
	switch o.Schedule {
	case OneFOneB, GPipe:
	default:
		return fmt.Errorf("unknown pipeline schedule %q (use 1f1b or gpipe)", o.Schedule)
	}
	switch o.Objective {
	case Throughput, Latency:
	default:
		return fmt.Errorf("unknown pipeline objective %q (use throughput or latency)", o.Objective)
	}
	if o.MicroBatches < 0 {
		return fmt.Errorf("micro-batches must be positive or 0 for auto, got %d", o.MicroBatches)
	}
	if o.Stages < 0 {
		return fmt.Errorf("the stage count must be positive or 0 for searched, got %d", o.Stages)
	}
	if o.Batch < 0 {
		return fmt.Errorf("the batch must be positive or 0 for unknown, got %d", o.Batch)
	}
	if o.Batch > 0 && o.MicroBatches > 0 && o.Batch%int64(o.MicroBatches) != 0 {
		return fmt.Errorf("%d micro-batches do not split the batch of %d into whole samples; give a count that divides it", o.MicroBatches, o.Batch)
	}
	return nil
}

// Problem is what every partitioner receives: the graph grouped into
// units, the per-unit costs on each device class, and the options.
type Problem struct {
	Graph   *graph.Graph
	Costs   *cost.Table
	Options Options

	u *units
	m *model
	// chains memoises the chain pass pipedream and exact share.
	chains *chainMemo
	// modules are the ModuleKeys the units follow; nil when stages may
	// cut between any ops.
	modules []string
	// keys are the module keys report names stages by: modules, or
	// ModuleKeys of the graph, computed once.
	keysOnce sync.Once
	keys     []string
}

// stageKeys are the module keys the stages of a plan are named by.
func (p *Problem) stageKeys() []string {
	p.keysOnce.Do(func() {
		p.keys = p.modules
		if p.keys == nil {
			p.keys = ModuleKeys(p.Graph)
		}
	})
	return p.keys
}

// NewProblem groups costs.Graph into units and prepares the cost model.
// It fails on a cyclic graph or bad options.
func NewProblem(costs *cost.Table, opts Options) (*Problem, error) {
	return NewProblemModules(costs, opts, nil)
}

// NewProblemModules is NewProblem with each op's module given (as
// ModuleKeys gives them; nil: ModuleKeys of the graph), for a graph whose
// op names no longer tell them, such as a fused one.
func NewProblemModules(costs *cost.Table, opts Options, moduleKeys []string) (*Problem, error) {
	return NewProblemRules(costs, opts, moduleKeys, nil)
}

// NewProblemRules is NewProblemModules with the user's separate rules:
// apart[k][op] is op's group in rule k, or -1. No stage holds ops of two
// groups of one rule.
func NewProblemRules(costs *cost.Table, opts Options, moduleKeys []string, apart [][]int8) (*Problem, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if len(costs.Graph.Ops) == 0 {
		return nil, fmt.Errorf("graph %q has no ops to partition", costs.Graph.Name)
	}
	g := costs.Graph
	free := func(op graph.OpID) bool {
		for d := 0; d < costs.NumDevices(); d++ {
			if costs.OpTime(op, d) != 0 {
				return false
			}
		}
		return cost.ResidentBytes(g, op) == 0
	}
	var modules []string
	if !opts.OpCuts {
		keys := moduleKeys
		if keys == nil {
			keys = ModuleKeys(g)
		} else if len(keys) != len(g.Ops) {
			return nil, fmt.Errorf("%d module keys for the %d ops of graph %q", len(keys), len(g.Ops), g.Name)
		}
		if moduleCount(keys) > 1 {
			modules = keys
		}
	}
	u, err := buildUnits(g, free, modules)
	if err != nil {
		return nil, err
	}
	rcKeys := modules
	if opts.Recompute && rcKeys == nil {
		rcKeys = moduleKeys
		if rcKeys == nil || len(rcKeys) != len(g.Ops) {
			rcKeys = ModuleKeys(g)
		}
	}
	m := newModel(costs, u, opts, apart, rcKeys)
	for v := 0; v < u.n; v++ {
		if math.IsInf(m.fastest(v), 1) {
			return nil, fmt.Errorf("op %q cannot run on any device type of cluster %q; add a device type that runs it", costs.Graph.Ops[u.ops[v][0]].Name, costs.Cluster.Name)
		}
	}
	return &Problem{Graph: costs.Graph, Costs: costs, Options: opts, u: u, m: m, chains: &chainMemo{}, modules: modules}, nil
}

// ModuleAligned reports whether the problem's stages cut only between
// modules: the options allow it and the op names carry module paths.
func (p *Problem) ModuleAligned() bool { return p.modules != nil }

// Units is the number of placement units (colocation groups, with
// backward and update ops folded into their forward unit).
func (p *Problem) Units() int { return p.u.n }

// Training reports whether the graph has backward ops, so stages send
// gradients back and synchronise weights across replicas.
func (p *Problem) Training() bool { return p.u.training }

// Partitioner splits a problem into pipeline stages.
type Partitioner interface {
	// Partition returns the best plan it finds, or an error; an
	// *InfeasibleError when no split fits in memory.
	Partition(ctx context.Context, p *Problem) (*Plan, error)
}

// Factory makes a partitioner.
type Factory func() Partitioner

var partitioners = registry.New[Partitioner]("pipeline partitioner")

// Register adds a partitioner under name; a duplicate name panics (a
// programming error caught at init).
func Register(name, summary string, f Factory) { partitioners.Register(name, summary, f) }

// New makes the partitioner registered under name.
func New(name string) (Partitioner, error) { return partitioners.New(name) }

// Names lists the registered partitioners, sorted.
func Names() []string { return partitioners.Names() }

// Summary is the one-line description a partitioner registered with.
func Summary(name string) string { return partitioners.Summary(name) }

// InfeasibleError reports that no partition fits in device memory.
type InfeasibleError struct {
	Partitioner string
	Detail      string
	// Rules is set when the user's rules narrowed the splits tried.
	Rules bool
}

func (e *InfeasibleError) Error() string {
	if e.Rules {
		return fmt.Sprintf("pipeline partitioner %s: no split fits in device memory under the rules: %s; check the rules against each other (a cut rule keeping whole a module a separate rule splits leaves no split) or relax them", e.Partitioner, e.Detail)
	}
	return fmt.Sprintf("pipeline partitioner %s: no split fits in device memory: %s; add devices with more memory, raise the micro-batch count, or use a training graph with fewer stashed activations", e.Partitioner, e.Detail)
}

// microBatchCandidates lists the M values a solve tries: the fixed one, or
// powers of two up to the maximum.
func (p *Problem) microBatchCandidates() []int {
	if p.Options.MicroBatches > 0 {
		return []int{p.Options.MicroBatches}
	}
	return MicroBatchCounts(p.Options.Batch, p.Options.MaxMicroBatches)
}

// MicroBatchCounts are the micro-batch counts a search tries for a batch
// of the given samples (0: unknown), up to max: the powers of two for an
// unknown batch; for a known one, the divisors of the batch each at
// least twice the one before (1, 2, 4 … for a power of two; 1, 2, 4, 8,
// 28, 56 for 56), so every count splits the batch into whole samples and
// the ladder is about as long as the powers of two.
func MicroBatchCounts(batch int64, max int) []int {
	var ms []int
	if batch <= 0 {
		for m := 1; m <= max; m *= 2 {
			ms = append(ms, m)
		}
		return ms
	}
	for m := int64(1); m <= batch && m <= int64(max); m++ {
		if batch%m == 0 && (len(ms) == 0 || m >= 2*int64(ms[len(ms)-1])) {
			ms = append(ms, int(m))
		}
	}
	return ms
}

// splits reports whether M micro-batches over r replicas give each
// replica a whole number of samples (always, when the batch is unknown).
func (o *Options) splits(M, r int) bool {
	return o.Batch <= 0 || o.Batch%(int64(M)*int64(r)) == 0
}

// bestOverM runs solve for each candidate M and keeps the plan with the
// shortest simulated step (ties: fewer micro-batches).
func (p *Problem) bestOverM(ctx context.Context, name string, solve func(M int) (*solution, error)) (*Plan, error) {
	var best *Plan
	Ms := p.microBatchCandidates()
	task := progress.From(ctx).Start(name+": micro-batch counts", int64(len(Ms)))
	defer task.Done()
	for _, M := range Ms {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s, err := solve(M)
		task.Add(1)
		if err != nil {
			return nil, err
		}
		if s == nil {
			continue
		}
		pl := p.report(name, s)
		if best == nil || pl.step < best.step*(1-1e-12) {
			best = pl
		}
	}
	if best == nil {
		return nil, &InfeasibleError{Partitioner: name, Detail: p.tried(p.microBatchCandidates()), Rules: p.ruled()}
	}
	return best, nil
}

// tried says what a partitioner that found no split tried, and under
// which of the user's rules.
// ruled reports whether the user's rules narrow the splits.
func (p *Problem) ruled() bool { return len(p.m.apartRule) > 0 || p.Costs.Restricted() }

func (p *Problem) tried(ms []int) string {
	s := fmt.Sprintf("tried %v micro-batches on %d devices", ms, p.Costs.NumDevices())
	if len(p.m.apartRule) > 0 {
		s += ", no stage holding ops of two groups of a separate rule"
	}
	if p.Costs.Restricted() {
		s += ", each stage on devices the rules let all its ops use"
	}
	return s
}
