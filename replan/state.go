package replan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/sim"
)

// The kinds of state a migration moves.
const (
	// KindWeights are the parameters and the model's other resident
	// tensors (constants: running statistics, masks, tables).
	KindWeights = "weights"
	// KindOptimizer is the optimizer's state (Adam's two moments).
	KindOptimizer = "optimizer"
	// KindGradients are the weight gradients, moved only when asked
	// (Options.Gradients).
	KindGradients = "gradients"
)

// kinds in the order the report lists them.
var kinds = [...]string{KindWeights, KindOptimizer, KindGradients}

// piece is one tensor of state: where a plan keeps it follows from the
// ops that read it (their devices and stages), as the simulator allocates
// it (sim: resident tensors start on their readers).
type piece struct {
	tensor graph.TensorID
	// param is the parameter the piece belongs to (itself for weights).
	param graph.TensorID
	kind  int // index into kinds
	bytes int64
	// readers are the ops whose devices hold it.
	readers []graph.OpID
	// zero is the least ZeRO level that shards it over a stage's
	// replicas: zero1 for optimizer state, zero2 for gradients, zero3
	// for weights; none for constants.
	zero sim.Sharding
}

// pieces lists the state of a training (or inference) step's graph: every
// resident tensor an op reads (weights and constants; a parameter only an
// optimizer update reads is optimizer state, as the simulator counts it),
// and with gradients each parameter's gradient buffer, held where its
// update runs.
func pieces(g *graph.Graph, gradients bool) []piece {
	var out []piece
	for t := range g.Tensors {
		tn := &g.Tensors[t]
		if !tn.Kind.IsResident() || tn.Producer != graph.NoOp || len(tn.Consumers) == 0 || tn.Bytes() <= 0 {
			continue
		}
		p := piece{tensor: graph.TensorID(t), param: graph.TensorID(t), kind: 0, bytes: tn.Bytes(), readers: distinctOps(tn.Consumers)}
		switch {
		case tn.Kind == graph.Parameter && !slices.ContainsFunc(tn.Consumers, func(c graph.OpID) bool { return g.Ops[c].Phase != graph.Update }):
			p.kind, p.zero = 1, sim.ZeRO1
			p.param = g.Ops[tn.Consumers[0]].Inputs[0]
		case tn.Kind == graph.Parameter:
			p.zero = sim.ZeRO3
		}
		out = append(out, p)
	}
	if !gradients {
		return out
	}
	for i := range g.Ops {
		op := &g.Ops[i]
		if op.Phase != graph.Update || len(op.Inputs) < 2 {
			continue
		}
		// The update reads its parameter, then the parameter's gradients
		// (one per use), then its state; the buffer is the largest
		// gradient, into which the others are summed.
		var b int64
		var grad graph.TensorID = -1
		for _, x := range op.Inputs[1:] {
			tn := &g.Tensors[x]
			if tn.Producer == graph.NoOp || g.Ops[tn.Producer].Phase != graph.Backward {
				continue
			}
			if tn.Bytes() > b {
				b, grad = tn.Bytes(), x
			}
		}
		if grad >= 0 && b > 0 {
			out = append(out, piece{tensor: grad, param: op.Inputs[0], kind: 2, bytes: b, readers: []graph.OpID{graph.OpID(i)}, zero: sim.ZeRO2})
		}
	}
	return out
}

func distinctOps(ops []graph.OpID) []graph.OpID {
	out := slices.Clone(ops)
	slices.Sort(out)
	return slices.Compact(out)
}

// layout is where a plan runs a graph's ops, in one space of device keys
// (the new cluster's device indices, then the devices it lacks): each
// op's device (of the stage's first replica), the stages' replicas, ZeRO
// levels and tensor-parallel degrees, and which tensors a tensor-parallel
// group divides among its members.
type layout struct {
	dev     []int // per op
	stages  []sim.Stage
	divided func(graph.TensorID) bool
}

// span is the bytes [lo, hi) of a piece a device holds; empty when hi <=
// lo.
type span struct{ lo, hi int64 }

func (s span) len() int64 { return max(0, s.hi-s.lo) }

// part is the k-th of n equal parts of s, in whole bytes.
func (s span) part(k, n int) span {
	l := s.len()
	return span{s.lo + l*int64(k)/int64(n), s.lo + l*int64(k+1)/int64(n)}
}

// minus is s without t: up to two spans.
func (s span) minus(t span) []span {
	if t.len() == 0 || t.hi <= s.lo || t.lo >= s.hi {
		if s.len() == 0 {
			return nil
		}
		return []span{s}
	}
	var out []span
	if t.lo > s.lo {
		out = append(out, span{s.lo, t.lo})
	}
	if t.hi < s.hi {
		out = append(out, span{t.hi, s.hi})
	}
	return out
}

// holdings is what each device key holds of each piece: holdings[d][i].
type holdings map[int][]span

// hold works out where a layout keeps every piece. A piece is on the
// device of every op that reads it, and on the devices of the other
// replicas of that op's stage at the same position; a tensor-parallel
// group's members each hold their slice of a divided piece and the whole
// of any other; ZeRO splits a sharded piece among the replicas, replica
// k keeping the k-th part (of its member's slice).
func (l *layout) hold(ps []piece) holdings {
	out := holdings{}
	type where struct{ stage, pos int }
	at := map[int]where{}
	for s, st := range l.stages {
		for j, d := range st.Replicas[0] {
			at[d] = where{s, j}
		}
	}
	set := func(d, i int, sp span) {
		h := out[d]
		if h == nil {
			h = make([]span, len(ps))
			out[d] = h
		}
		if sp.len() > h[i].len() {
			h[i] = sp
		}
	}
	var devs []int
	for i := range ps {
		p := &ps[i]
		devs = devs[:0]
		for _, op := range p.readers {
			if d := l.dev[op]; d >= 0 && !slices.Contains(devs, d) {
				devs = append(devs, d)
			}
		}
		whole := span{0, p.bytes}
		for _, d := range devs {
			w, ok := at[d]
			if !ok {
				set(d, i, whole)
				continue
			}
			st := &l.stages[w.stage]
			r := len(st.Replicas)
			sharded := p.zero != sim.NoSharding && st.Sharding >= p.zero && r > 1
			for k, rep := range st.Replicas {
				if t := st.Tensor; t > 1 {
					for m, member := range rep {
						sp := whole
						if l.divided(p.param) {
							sp = sp.part(m, t)
						}
						if sharded {
							sp = sp.part(k, r)
						}
						set(member, i, sp)
					}
					continue
				}
				sp := whole
				if sharded {
					sp = sp.part(k, r)
				}
				set(rep[w.pos], i, sp)
			}
		}
	}
	return out
}

// simLayout is a candidate's layout: its plan on the graph, devices the
// new cluster's indices.
func simLayout(pl *sim.Plan, nd int) *layout {
	l := &layout{dev: pl.Device, stages: pl.StageDevices(nd), divided: func(graph.TensorID) bool { return false }}
	if sp := pl.Split; sp != nil && sp.Divided != nil && slices.ContainsFunc(l.stages, func(st sim.Stage) bool { return st.Tensor > 1 }) {
		l.divided = func(t graph.TensorID) bool { return sp.Divided[t] }
	}
	return l
}

// planLayout is a plan document's layout on graph g, device names keyed
// by key. Every op of g must be in the plan and every op of the plan in
// g. Which weights a tensor-parallel stage divides follows from the
// updates' shards ("update:split": the weight and its optimizer state are
// divided, as package shard decides it); a plan without updates
// (inference) keeps no such record, and every weight of its
// tensor-parallel stages is taken as divided, which can only count more
// bytes to move.
func planLayout(p *plan.Plan, g *graph.Graph, key func(string) (int, error), source string) (*layout, error) {
	l := &layout{dev: make([]int, len(g.Ops))}
	for i := range l.dev {
		l.dev[i] = -1
	}
	var extra []string
	split := map[graph.TensorID]bool{}
	updates := false
	for i := range p.Ops {
		op := &p.Ops[i]
		id, ok := g.OpByName(op.Name)
		if !ok {
			extra = append(extra, op.Name)
			continue
		}
		d, err := key(op.Device)
		if err != nil {
			return nil, fmt.Errorf("%s: ops[%d] (%q): %w", source, i, op.Name, err)
		}
		l.dev[id] = d
		if g.Ops[id].Phase == graph.Update && len(g.Ops[id].Inputs) > 0 {
			updates = true
			if op.Shard == "update:split" {
				split[g.Ops[id].Inputs[0]] = true
			}
		}
	}
	var missing []string
	for i, d := range l.dev {
		if d < 0 {
			missing = append(missing, g.Ops[i].Name)
		}
	}
	if len(extra) > 0 || len(missing) > 0 {
		var why []string
		if len(missing) > 0 {
			why = append(why, fmt.Sprintf("%s of the model's step %s not in the plan (%s)", plan.Count(len(missing), "op", "ops"), isAre(len(missing)), quote(missing)))
		}
		if len(extra) > 0 {
			why = append(why, fmt.Sprintf("%s of the plan %s not in the model's step (%s)", plan.Count(len(extra), "op", "ops"), isAre(len(extra)), quote(extra)))
		}
		return nil, fmt.Errorf("%s: %s: is it a plan of another model, batch, mode or optimizer?", source, strings.Join(why, "; "))
	}
	for s, st := range p.Stages {
		groups := st.ReplicaDevices
		if len(groups) == 0 {
			r := max(st.Replicas, 1)
			if len(st.Devices) == 0 || len(st.Devices)%r != 0 {
				return nil, fmt.Errorf("%s: stages[%d]: %d devices do not split into %d replicas", source, s, len(st.Devices), r)
			}
			k := len(st.Devices) / r
			for i := 0; i < r; i++ {
				groups = append(groups, st.Devices[i*k:(i+1)*k])
			}
		}
		stage := sim.Stage{Tensor: st.TensorParallel}
		if st.Sharding != "" {
			z, err := sim.ParseSharding(st.Sharding)
			if err != nil {
				return nil, fmt.Errorf("%s: stages[%d]: %w", source, s, err)
			}
			stage.Sharding = z
		}
		for k, names := range groups {
			if k > 0 && len(names) != len(groups[0]) {
				return nil, fmt.Errorf("%s: stages[%d]: replica %d has %d devices, replica 0 has %d", source, s, k, len(names), len(groups[0]))
			}
			var rep []int
			for _, name := range names {
				d, err := key(name)
				if err != nil {
					return nil, fmt.Errorf("%s: stages[%d]: %w", source, s, err)
				}
				rep = append(rep, d)
			}
			stage.Replicas = append(stage.Replicas, rep)
		}
		if stage.Tensor > 1 && len(stage.Replicas[0]) != stage.Tensor {
			return nil, fmt.Errorf("%s: stages[%d] is tensor-parallel over %d devices, but its replicas have %d", source, s, stage.Tensor, len(stage.Replicas[0]))
		}
		l.stages = append(l.stages, stage)
	}
	if len(l.stages) == 0 {
		// A plan without stages (written before plans listed them): one
		// stage of the devices its ops use.
		var used []int
		for _, d := range l.dev {
			if !slices.Contains(used, d) {
				used = append(used, d)
			}
		}
		slices.Sort(used)
		l.stages = []sim.Stage{{Replicas: [][]int{used}}}
	}
	switch {
	case updates:
		// An optimizer state tensor follows its weight.
		l.divided = func(t graph.TensorID) bool { return split[t] }
	default:
		l.divided = func(graph.TensorID) bool { return true }
	}
	return l, nil
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// quote names the first few of a list, with a count past them.
func quote(names []string) string {
	const shown = 3
	var q []string
	for i, n := range names {
		if i == shown {
			q = append(q, fmt.Sprintf("and %d more", len(names)-shown))
			break
		}
		q = append(q, fmt.Sprintf("%q", n))
	}
	return strings.Join(q, ", ")
}
