package strategy

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/opplace/opplace/sim"
)

// ParallelStrategy plans one configuration a user gives whole, the way
// Megatron-LM's arguments state it: tensor, pipeline and data-parallel
// degrees, the micro-batch size, recomputation and the ZeRO level. It
// scores what a user runs today in the same simulator as auto's plans.
const ParallelStrategy = "parallel"

// Parallel is one configuration (Config.Parallel).
type Parallel struct {
	// Tensor is the tensor-parallel group size (Megatron-LM's
	// --tensor-model-parallel-size), Pipeline the number of stages, Data
	// the replicas of each stage; 0 for Data: the devices left.
	Tensor, Pipeline, Data int
	// MicroBatchSize is the samples each replica runs per micro-batch;
	// 0: the count of micro-batches is searched as the strategies search it.
	MicroBatchSize int64
	// Recompute recomputes every stage's activations (full recomputation
	// per module).
	Recompute bool
	// Sharding is the replicas' ZeRO level.
	Sharding sim.Sharding
}

// ParseParallel reads a configuration: comma-separated KEY=VALUE with
// keys tp (tensor), pp (pipeline), dp (data; default the devices
// left), mbs (micro-batch size), recompute (none or full) and zero
// (none, zero1, zero2 or zero3), as in "tp=8,pp=8,mbs=1,recompute=full".
func ParseParallel(s string) (*Parallel, error) {
	c := &Parallel{Tensor: 1, Pipeline: 1}
	seen := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || v == "" {
			return nil, fmt.Errorf("parallel configuration %q: %q is not KEY=VALUE (keys tp, pp, dp, mbs, recompute, zero)", s, kv)
		}
		if seen[k] {
			return nil, fmt.Errorf("parallel configuration %q: %s is given twice", s, k)
		}
		seen[k] = true
		whole := func() (int64, error) {
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil || n < 1 {
				return 0, fmt.Errorf("parallel configuration %q: %s=%s must be a whole number of at least 1", s, k, v)
			}
			return n, nil
		}
		var n int64
		var err error
		switch k {
		case "tp", "pp", "dp", "mbs":
			if n, err = whole(); err != nil {
				return nil, err
			}
		}
		switch k {
		case "tp":
			c.Tensor = int(n)
		case "pp":
			c.Pipeline = int(n)
		case "dp":
			c.Data = int(n)
		case "mbs":
			c.MicroBatchSize = n
		case "recompute":
			switch v {
			case "none":
			case "full":
				c.Recompute = true
			default:
				return nil, fmt.Errorf("parallel configuration %q: recompute=%s: use none or full", s, v)
			}
		case "zero":
			if c.Sharding, err = sim.ParseSharding(v); err != nil {
				return nil, fmt.Errorf("parallel configuration %q: zero=%s: %w", s, v, err)
			}
		default:
			return nil, fmt.Errorf("parallel configuration %q: unknown key %q (keys tp, pp, dp, mbs, recompute, zero)", s, k)
		}
	}
	return c, nil
}

// String says the configuration in words.
func (c *Parallel) String() string {
	parts := []string{fmt.Sprintf("tensor %d × pipeline %d × data %d", c.Tensor, c.Pipeline, c.Data)}
	if c.MicroBatchSize > 0 {
		parts = append(parts, fmt.Sprintf("micro-batch size %d", c.MicroBatchSize))
	}
	if c.Recompute {
		parts = append(parts, "full recomputation")
	}
	if c.Sharding != sim.NoSharding {
		parts = append(parts, zeroNote(c.Sharding))
	}
	return strings.Join(parts, ", ")
}

func init() {
	Register(ParallelStrategy, FamilyHybrid, "one configuration given whole (tensor, pipeline and data-parallel degrees, micro-batch size, recomputation, ZeRO level), as Megatron-LM's arguments give it, planned and simulated as given: stages of equal layers by degree, the tensor split package shard finds for the group", func(cfg Config) Strategy {
		return parallelGiven{cfg: cfg}
	})
}

type parallelGiven struct{ cfg Config }

// Propose builds the configuration's plan: the tensor split of one
// group, the stages cut by degree into exactly Pipeline stages of Data
// replicas (partition.Options.Stages), the micro-batch count the size
// gives, and each stage's recomputation and ZeRO level as given. Where
// the size is not given, the count is searched as the strategies search
// it (the partitioner's pick for pipelines, gradient accumulation up to
// the first count that fits otherwise).
func (s parallelGiven) Propose(ctx context.Context, p *Problem) ([]Proposal, error) {
	c := s.cfg.Parallel
	if c == nil {
		return nil, fmt.Errorf("%s: %w: no configuration was given", ParallelStrategy, ErrNotApplicable)
	}
	if err := pinned(p, ParallelStrategy); err != nil {
		return nil, err
	}
	classes := p.Costs.Classes()
	if len(classes) != 1 {
		return nil, &PlacementError{fmt.Errorf("%s: a configuration runs on devices of one type; the cluster has %d types", ParallelStrategy, len(classes))}
	}
	cl := classes[0]
	n := len(cl)
	cfg := *c
	if cfg.Data == 0 {
		if n%(cfg.Tensor*cfg.Pipeline) != 0 {
			return nil, &PlacementError{fmt.Errorf("%s: tensor %d × pipeline %d does not divide the cluster's %d devices", ParallelStrategy, cfg.Tensor, cfg.Pipeline, n)}
		}
		cfg.Data = n / (cfg.Tensor * cfg.Pipeline)
	}
	if used := cfg.Tensor * cfg.Pipeline * cfg.Data; used != n {
		return nil, &PlacementError{fmt.Errorf("%s: tensor %d × pipeline %d × data %d is %d devices; the cluster has %d", ParallelStrategy, cfg.Tensor, cfg.Pipeline, cfg.Data, used, n)}
	}
	train := training(p.Graph)
	if !train && (cfg.Recompute || cfg.Sharding != sim.NoSharding) {
		return nil, &PlacementError{fmt.Errorf("%s: recomputation and ZeRO shard a training step; this one is inference", ParallelStrategy)}
	}
	B := p.Batch
	M := 0
	switch {
	case cfg.MicroBatchSize > 0 && B <= 0:
		return nil, &PlacementError{fmt.Errorf("%s: a micro-batch size needs the graph's batch, which is unknown (bind its batch dimension)", ParallelStrategy)}
	case cfg.MicroBatchSize > 0:
		per := int64(cfg.Data) * cfg.MicroBatchSize
		if B%per != 0 {
			return nil, &PlacementError{fmt.Errorf("%s: the batch of %d does not split into %d replicas × micro-batches of %d samples", ParallelStrategy, B, cfg.Data, cfg.MicroBatchSize)}
		}
		M = int(B / per)
	case cfg.Data > 1 && B > 0 && B%int64(cfg.Data) != 0:
		return nil, &PlacementError{fmt.Errorf("%s: the batch of %d does not split into %d replicas of whole samples", ParallelStrategy, B, cfg.Data)}
	}
	recompute := RecomputeNone
	if cfg.Recompute {
		recompute = RecomputeAll
	}
	tp := tensorParallel{opts: s.cfg.Pipeline, levels: []sim.Sharding{cfg.Sharding}, given: true, recompute: recompute, degree: strconv.Itoa(cfg.Tensor)}
	tp.opts.MicroBatches, tp.opts.Stages, tp.opts.ByDegree, tp.opts.Recompute = M, cfg.Pipeline, true, cfg.Recompute
	var groups [][]int
	var split *sim.TensorSplit
	var sol *TensorSolution
	if cfg.Tensor > 1 {
		if len(p.Apart) > 0 {
			return nil, fmt.Errorf("%s: %w: separate rules are not yet combined with tensor parallelism", ParallelStrategy, ErrNotApplicable)
		}
		groups = tensorGroups(p.Costs.Cluster, cl, cfg.Tensor)
		var err error
		if sol, split, err = tp.solve(p, groups[0], cfg.Tensor, false); err != nil {
			return nil, fmt.Errorf("%s: the tensor split over %d devices: %w", ParallelStrategy, cfg.Tensor, err)
		}
	} else {
		for _, d := range cl {
			groups = append(groups, []int{d})
		}
	}
	var props []Proposal
	var err error
	switch {
	case cfg.Pipeline == 1:
		steps := []int{M}
		if M == 0 {
			steps = accumulationSteps(B, cfg.Data)
		}
		for _, m := range steps {
			pl := &sim.Plan{Placement: sim.Placement{Device: make([]int, len(p.Graph.Ops))}, Split: split, MicroBatches: m}
			for op := range pl.Device {
				pl.Device[op] = groups[0][0]
			}
			st := sim.Stage{Replicas: slices.Clone(groups), Sharding: cfg.Sharding, Recompute: cfg.Recompute}
			if cfg.Tensor > 1 {
				st.Tensor = cfg.Tensor
			}
			pl.Stages = []sim.Stage{st}
			res, err := p.Simulate(pl)
			props = append(props, Proposal{Plan: pl, Sim: res})
			if err != nil || p.Fits(res) || residentOverflows(p, res) {
				break
			}
		}
	case cfg.Tensor > 1:
		props, err = tp.pipelined(ctx, p, groups, cfg.Tensor, split)
	default:
		part := pipelined{name: TensorPartitioner, opts: tp.opts, levels: tp.levels, recompute: recompute}
		props, err = part.attempts(ctx, p)
	}
	if err != nil && len(props) == 0 {
		return nil, fmt.Errorf("%s: %s: %w", ParallelStrategy, cfg.String(), err)
	}
	var out []Proposal
	for _, pr := range props {
		if !shaped(pr.Plan, cfg, M) {
			continue
		}
		if cfg.Pipeline > 1 {
			// The partitioner's plans run plain DDP: the level is the
			// configuration's, so the step is simulated again.
			for i := range pr.Plan.Stages {
				pr.Plan.Stages[i].Sharding, pr.Plan.Stages[i].Recompute = cfg.Sharding, cfg.Recompute
			}
			pr.Sim, _ = p.Simulate(pr.Plan)
		}
		pr.Family = familyOf(cfg)
		pr.Tensor = sol
		got := cfg
		got.MicroBatchSize = 0
		if B > 0 && pr.Plan.MicroBatches > 0 {
			got.MicroBatchSize = B / int64(cfg.Data*pr.Plan.MicroBatches)
		}
		pr.Notes = append([]string{fmt.Sprintf("the configuration given: %s, %d micro-batches a step", got.String(), max(pr.Plan.MicroBatches, 1))}, pr.Notes...)
		if cfg.Sharding == sim.ZeRO3 && slices.ContainsFunc(pr.Plan.Stages, func(st sim.Stage) bool { return !oneHost(p.Costs.Cluster, st.Replicas) }) {
			pr.Notes = append(pr.Notes, crossHostZeRO3)
		}
		out = append(out, pr)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: %s: the partitioner found no split of exactly %d stages of %d replicas", ParallelStrategy, cfg.String(), cfg.Pipeline, cfg.Data)
	}
	return out, nil
}

// shaped reports whether plan pl is configuration c: its stage count,
// each stage's replicas and their tensor groups, and the micro-batch
// count M when one was given.
func shaped(pl *sim.Plan, c Parallel, M int) bool {
	if len(pl.Stages) != c.Pipeline || M > 0 && pl.MicroBatches != M {
		return false
	}
	for _, st := range pl.Stages {
		if len(st.Replicas) != c.Data {
			return false
		}
		for _, r := range st.Replicas {
			if len(r) != c.Tensor {
				return false
			}
		}
	}
	return true
}

// familyOf is the family of a configuration's plan shape.
func familyOf(c Parallel) string {
	switch {
	case c.Tensor > 1:
		return FamilyTensor
	case c.Pipeline > 1:
		return FamilyPipeline
	case c.Data > 1:
		return FamilyDataParallel
	}
	return FamilyPlacement
}
