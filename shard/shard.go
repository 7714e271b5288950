// Package shard chooses how a tensor-parallel group of t devices splits
// every op of a training step (issue 15, "intra-operator splits"): for
// each forward op one strategy (replicated, Megatron-LM's column and row
// matmuls, attention heads, split elementwise ops, ...), every tensor's
// layout across the group (replicated, split on an axis, or a partial
// sum), and the collectives the layouts imply in the forward and the
// backward pass. The result is a sim.TensorSplit the simulator runs.
//
// The choice is a search, not a template: per block of the model a small
// integer program (as Alpa's intra-operator pass) minimises the members'
// compute plus the collectives, so Megatron's pattern comes out where the
// costs favour it and everything stays replicated where the link is too
// slow. Repeated blocks (a transformer's layers) are solved once per
// distinct structure. docs/tensor-parallel.md describes the model.
package shard

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
)

// Model prices what the search trades: the time of an op and of a
// collective over the group.
type Model interface {
	// RunTime is the seconds one member takes to run share of op's work
	// (share 1: the op whole), priced as the simulator prices a
	// tensor-parallel member's run (cost.Table.RunTime): a split op's
	// member keeps its launch and its kernel's size ramp whole.
	RunTime(op graph.OpID, share float64) float64
	// Collective is the seconds a collective of kind over a buffer of
	// bytes (the full tensor) takes over the group.
	Collective(kind sim.CollectiveKind, bytes int64) float64
}

// Options tune the search.
type Options struct {
	// TimeLimit bounds each block's integer program; 0 means
	// DefaultTimeLimit. A program stopped by it keeps its best incumbent.
	TimeLimit time.Duration
	// Tokens also offers every matmul and Gemm the token split (A split
	// on its rows, B whole, the output split on its rows: sequence
	// parallelism). Off, the search keeps to splits of the weights and
	// heads: the program prices one group alone, and a token split
	// leaves every member the whole weight, whose gradient data
	// parallelism's replicas then reduce t times larger than after a
	// weight split, a cost the caller's simulation sees and this search
	// does not. Callers solve both ways and keep the faster step.
	Tokens bool
}

// DefaultTimeLimit is the per-block solver limit: the programs of a
// transformer block solve in milliseconds, so it only guards odd graphs.
const DefaultTimeLimit = 20 * time.Second

// ErrNotApplicable says no op of the graph can be split t ways: the
// caller treats tensor parallelism as not applicable to it.
var ErrNotApplicable = errors.New("tensor parallelism not applicable")

// Solution is the group's split of a training step.
type Solution struct {
	// Split is the contract the simulator runs: each op's share, each
	// tensor's division and each op's collectives.
	Split *sim.TensorSplit
	// Choice names each op's strategy: a forward op's ("replicated",
	// "column", "row", "heads", "split:2", ...); a gradient op's is
	// "grad:" and its forward op's; an update op's "update:split" or
	// "update:replicated" after its weight.
	Choice []string
	// Layout is each tensor's layout across the group: a forward
	// tensor's as its producer leaves it (a parameter's as its first
	// consumer reads it), a gradient's as its gradient op writes it;
	// Replicated for the rest.
	Layout []Layout
	// Estimate is the predicted seconds of one member's compute plus the
	// collectives, for the whole step (forward, backward and update).
	Estimate float64
	// Blocks is the number of repeated blocks found; Distinct how many
	// distinct ones were solved (the rest copy a solved one's choice).
	Blocks, Distinct int
	// Notes tell what the search could not do exactly (a program stopped
	// by its time limit).
	Notes []string
	// TokenSplits says whether Options.Tokens offers some op a token
	// split (it always does when Tokens was set): when it does not, a
	// solve with Tokens is this one again, and callers skip it.
	TokenSplits bool
}

// Solve chooses, for a tensor-parallel group of t devices, how every op of
// g (a training step: forward, backward and update ops, see package
// train; a forward-only graph works too) is split, minimising the group's
// step time: compute per member plus the collectives the choice implies.
// It returns ErrNotApplicable (wrapped, saying why) when no matmul,
// Gemm or convolution with a weight can be split t ways.
func Solve(g *graph.Graph, t int, m Model, opts Options) (*Solution, error) {
	if g == nil || m == nil {
		return nil, errors.New("shard: nil graph or model")
	}
	if t < 2 {
		return nil, fmt.Errorf("shard: a tensor-parallel group needs at least 2 devices, got %d", t)
	}
	if opts.TimeLimit <= 0 {
		opts.TimeLimit = DefaultTimeLimit
	}
	if !weightsOfKnownShape(g) {
		// A costed graph without shapes: nothing to split, said in
		// one pass instead of after building every op's strategies.
		return nil, fmt.Errorf("shard: no matmul, Gemm or convolution of %q reads a weight of known shape: %w", g.Name, ErrNotApplicable)
	}
	if str := (strategist{g: g, t: int64(t), batch: g.Batch(), tokens: opts.Tokens}); !str.applicable() {
		// Said before every op's strategies are built: a costed graph's
		// ops have shapes (its byte counts) but nothing to split.
		return nil, fmt.Errorf("shard: no matmul, Gemm or convolution of %q has a weight whose dimensions divide by %d: %w", g.Name, t, ErrNotApplicable)
	}
	p := newProblem(g, t, m, opts.Tokens)
	regions, blocks, distinct := p.regions()
	sol := &Solution{Blocks: blocks, Distinct: distinct, TokenSplits: opts.Tokens || p.tokenSplits()}
	solved := map[string][]int{} // signature -> choice per op of vars
	for _, r := range regions {
		vars := p.vars(r)
		if c, ok := solved[r.sig]; ok && r.sig != "" {
			for i, op := range vars {
				p.choice[op] = c[i]
			}
			continue
		}
		c, note, err := p.solveRegion(r, opts.TimeLimit)
		if err != nil {
			return nil, err
		}
		if note != "" {
			sol.Notes = append(sol.Notes, note)
		}
		for i, op := range r.ops {
			p.choice[op] = c[i]
		}
		if r.sig != "" {
			cv := make([]int, len(vars))
			for i, op := range vars {
				cv[i] = p.choice[op]
			}
			solved[r.sig] = cv
		}
	}
	p.assemble(sol)
	return sol, nil
}

// problem holds what the search knows of one graph.
type problem struct {
	g   *graph.Graph
	t   int
	m   Model
	str strategist
	// strats lists each forward op's strategies (nil for other ops);
	// choice is the index chosen.
	strats [][]strategy
	choice []int
	// region numbers each forward op's region; -1 for other ops.
	region []int
	// gradOp is each forward op's gradient op, or NoOp; update each
	// parameter's update op, or NoOp.
	gradOp []graph.OpID
	update []graph.OpID
}

func newProblem(g *graph.Graph, t int, m Model, tokens bool) *problem {
	p := &problem{
		g: g, t: t, m: m,
		str:    strategist{g: g, t: int64(t), batch: g.Batch(), tokens: tokens},
		strats: make([][]strategy, len(g.Ops)),
		choice: make([]int, len(g.Ops)),
		region: make([]int, len(g.Ops)),
		gradOp: make([]graph.OpID, len(g.Ops)),
		update: make([]graph.OpID, len(g.Tensors)),
	}
	for i := range p.gradOp {
		p.gradOp[i] = graph.NoOp
		p.region[i] = -1
	}
	for i := range p.update {
		p.update[i] = graph.NoOp
	}
	for i := range g.Ops {
		op := &g.Ops[i]
		switch op.Phase {
		case graph.Forward:
			p.strats[i] = p.str.strategies(graph.OpID(i))
			if id, ok := g.OpByName(op.Name + "/grad"); ok && g.Ops[id].Phase == graph.Backward {
				p.gradOp[i] = id
			}
		case graph.Update:
			if len(op.Inputs) > 0 && p.update[op.Inputs[0]] == graph.NoOp {
				p.update[op.Inputs[0]] = graph.OpID(i)
			}
		}
	}
	return p
}

// tokenSplits reports whether the token split (Options.Tokens) would give
// some forward op a strategy it lacks: the only difference the option
// makes to the programs.
func (p *problem) tokenSplits() bool {
	with := p.str
	with.tokens = true
	for i := range p.g.Ops {
		if p.g.Ops[i].Phase == graph.Forward && len(with.strategies(graph.OpID(i))) != len(p.strats[i]) {
			return true
		}
	}
	return false
}

// applicable reports whether some weight-bearing op can be split.
func (s *strategist) applicable() bool {
	for i := range s.g.Ops {
		op := &s.g.Ops[i]
		if op.Phase != graph.Forward {
			continue
		}
		switch op.Type {
		case "MatMul", "Gemm", "Conv":
			if slices.ContainsFunc(op.Inputs, func(x graph.TensorID) bool { return s.isWeight(x, 0) }) && len(s.strategies(graph.OpID(i))) >= 2 {
				return true
			}
		}
	}
	return false
}

// hasGrad reports whether tensor x gets a gradient in the step: a float
// parameter, or a float output of a forward op that has a gradient op.
func (p *problem) hasGrad(x graph.TensorID) bool {
	tt := &p.g.Tensors[x]
	if !tt.DType.IsFloat() {
		return false
	}
	if tt.Kind == graph.Parameter {
		return p.anyGradConsumer(x)
	}
	return tt.Producer != graph.NoOp && p.gradOp[tt.Producer] != graph.NoOp
}

// anyGradConsumer reports whether a forward op with a gradient op reads
// parameter x (an inference graph has none).
func (p *problem) anyGradConsumer(x graph.TensorID) bool {
	for _, c := range p.g.Tensors[x].Consumers {
		if p.g.Ops[c].Phase == graph.Forward && p.gradOp[c] != graph.NoOp {
			return true
		}
	}
	return false
}

// gradTensor is the gradient that forward op v's gradient op writes for
// its input x (train.Build writes one per distinct differentiable input,
// in input order), or -1.
func (p *problem) gradTensor(v graph.OpID, x graph.TensorID) graph.TensorID {
	gv := p.gradOp[v]
	if gv == graph.NoOp {
		return -1
	}
	k := 0
	seen := map[graph.TensorID]bool{}
	for _, in := range p.g.Ops[v].Inputs {
		if seen[in] || !p.hasGrad(in) {
			continue
		}
		if in == x {
			break
		}
		seen[in] = true
		k++
	}
	if outs := p.g.Ops[gv].Outputs; k < len(outs) {
		return outs[k]
	}
	return -1
}

// opTime is the time one member takes for the forward op and its
// gradient op when it does share of their work.
func (p *problem) opTime(o graph.OpID, share float64) float64 {
	t := p.m.RunTime(o, share)
	if gv := p.gradOp[o]; gv != graph.NoOp {
		t += p.m.RunTime(gv, share)
	}
	return t
}

// share is the part of an op's time one member runs at split s.
func (p *problem) share(s float32) float64 {
	return 1 - float64(s) + float64(s)/float64(p.t)
}

// convCost is the time of the collective turning from into to on a
// tensor of bytes, 0 when none is needed.
func (p *problem) convCost(from, to Layout, bytes int64) float64 {
	if k, ok := conversion(from, to); ok {
		return p.m.Collective(k, bytes)
	}
	return 0
}

// weightsOfKnownShape reports whether some forward MatMul, Gemm or Conv
// reads a parameter (a weight) whose shape is known, which a split
// needs.
func weightsOfKnownShape(g *graph.Graph) bool {
	for i := range g.Ops {
		op := &g.Ops[i]
		if op.Phase != graph.Forward {
			continue
		}
		switch op.Type {
		case "MatMul", "Gemm", "Conv":
		default:
			continue
		}
		for _, x := range op.Inputs {
			if tn := &g.Tensors[x]; tn.ShapeKnown && (tn.Kind == graph.Parameter || tn.Producer != graph.NoOp) {
				return true
			}
		}
	}
	return false
}
