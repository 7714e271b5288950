package onnx

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

// Control flow. Bodies are imported as nested graphs (graph.Attr.Graphs)
// and shaped with the values visible at the node. An If whose condition
// folds takes that branch; otherwise it is shaped and costed as the
// branch Options.IfBranch picks (by default the one with more FLOPs). A
// Loop costs trip count × body, where the trip count is M when it folds
// and Options.LoopTrips otherwise; a Scan costs sequence length × body,
// the length being read from its inputs' shapes.

func init() {
	register("", inferIf, "If")
	register("", inferLoop, "Loop")
	register("", inferScan, "Scan")
}

// inferSub shapes a nested graph given its formal inputs (nil where only
// the body's declared type is known) and returns its outputs and total
// work.
func (n *node) inferSub(key string, formal []*value) ([]*value, graph.Work, error) {
	sg := n.sub[key]
	if sg == nil {
		return nil, graph.Work{}, fmt.Errorf("missing subgraph %q", key)
	}
	child := &scope{parent: n.scope, vals: map[string]*value{}}
	for i, name := range sg.inputs {
		var v *value
		if i < len(formal) {
			v = formal[i]
		}
		if v == nil {
			for _, vi := range sg.proto.GetInput() {
				if vi.GetName() == name {
					v = n.c.declaredValue(vi.GetType())
					if v == nil {
						v = &value{dtype: graph.DType(vi.GetType().GetTensorType().GetElemType())}
					}
				}
			}
		}
		child.vals[name] = v
		if id, ok := sg.g.TensorByName(name); ok {
			writeTensor(sg.g.Tensor(id), v)
		}
	}
	if err := n.c.infer(sg, child); err != nil {
		return nil, graph.Work{}, &subgraphError{key, err}
	}
	outs := make([]*value, len(sg.outputs))
	for i, name := range sg.outputs {
		outs[i] = child.get(name)
		if outs[i] == nil {
			outs[i] = &value{}
		}
	}
	return outs, sumWork(sg.g), nil
}

// subgraphError is a nested graph's inference failure, naming the
// attribute that holds it.
type subgraphError struct {
	key string
	err error
}

func (e *subgraphError) Error() string { return fmt.Sprintf("subgraph %q: %v", e.key, e.err) }

// unwrapSubgraph drops the subgraph's name from err where the caller
// names the branch itself.
func unwrapSubgraph(err error) error {
	if se, ok := err.(*subgraphError); ok {
		return se.err
	}
	return err
}

func sumWork(g *graph.Graph) graph.Work {
	var w graph.Work
	for i := range g.Ops {
		o := g.Ops[i].Work
		w.FLOPs = shapes.AddSat(w.FLOPs, o.FLOPs)
		w.MACs = shapes.AddSat(w.MACs, o.MACs)
		w.TempBytes = max(w.TempBytes, o.TempBytes)
		w.Estimated = w.Estimated || o.Estimated
	}
	return w
}

func scaleWork(w graph.Work, k int64) graph.Work {
	w.FLOPs = shapes.MulSat(w.FLOPs, k)
	w.MACs = shapes.MulSat(w.MACs, k)
	return w
}

func inferIf(n *node) error {
	cond, known := n.ints(0)
	known = known && len(cond) == 1
	thenOut, thenW, thenErr := n.inferSub("then_branch", nil)
	elseOut, elseW, elseErr := n.inferSub("else_branch", nil)
	var takeElse bool
	switch {
	case known:
		// A branch the constant condition never takes may well not shape
		// for these inputs (exporters trace both sides of a sample-rate
		// or mode switch); only the taken one must.
		takeElse = cond[0] == 0
	case thenErr != nil && elseErr != nil:
		return fmt.Errorf("neither branch can be shaped for these inputs: then branch: %v; else branch: %v", thenErr, elseErr)
	case thenErr != nil || elseErr != nil:
		// A branch that cannot run on these shapes cannot be the one taken
		// at run time, whatever the options prefer.
		takeElse = thenErr != nil
		dropped, kept, err := "else", "then", elseErr
		if takeElse {
			dropped, kept, err = "then", "else", thenErr
		}
		n.c.forcedIf = append(n.c.forcedIf, n.name)
		n.c.warn("if-dropped:"+n.name, fmt.Sprintf("If node %q: the %s branch cannot be shaped for these inputs (%v), so it cannot be the branch taken; shaped and costed as the %s branch",
			n.name, dropped, unwrapSubgraph(err), kept))
	default:
		// The branch is decided at run time: plan for the one the options
		// choose, so that downstream shapes and costs stay concrete.
		n.c.dynamicIf = append(n.c.dynamicIf, n.name)
		switch n.c.opts.IfBranch {
		case IfThen:
		case IfElse:
			takeElse = true
		default:
			takeElse = elseW.FLOPs > thenW.FLOPs
		}
	}
	outs, w, err := thenOut, thenW, thenErr
	if takeElse {
		outs, w, err = elseOut, elseW, elseErr
	}
	if err != nil {
		return err
	}
	if len(outs) < len(n.out) || thenErr == nil && elseErr == nil && len(thenOut) != len(elseOut) {
		return fmt.Errorf("branches have %d and %d outputs, the node %d", len(thenOut), len(elseOut), len(n.out))
	}
	for i := range n.out {
		o := outs[i]
		v := &value{dtype: o.dtype, shape: shapes.Clone(o.shape), known: o.known}
		if known {
			v.ints, v.floats = o.ints, o.floats
		}
		if err := n.setValue(i, v); err != nil {
			return err
		}
	}
	n.work = w
	return nil
}

// maxTrips is the smallest trip count taken as a "run until the condition
// fails" sentinel rather than a real count: exporters write INT32_MAX or
// INT64_MAX as M of while loops.
const maxTrips = math.MaxInt32

// hugeLoop is a Loop whose constant trip count M is maxTrips or more.
type hugeLoop struct {
	name string
	m    int64
}

// loopTrips returns a Loop's trip count when it is a constant: M when it
// folds to a real count, 0 when the initial condition is false. huge is
// true when M folds to maxTrips or more (returned as the count, not
// constant): a while loop's sentinel, not a count to plan for.
func loopTrips(n *node) (trips int64, constant, huge bool) {
	if c, ok := n.ints(1); ok && len(c) == 1 && c[0] == 0 {
		return 0, true, false
	}
	if t, ok := n.ints(0); ok && len(t) == 1 {
		if t[0] >= maxTrips {
			return t[0], false, true
		}
		return t[0], true, false
	}
	return 0, false, false
}

func inferLoop(n *node) error {
	trip, constant, huge := loopTrips(n)
	if constant && trip < 0 {
		// Runtimes loop while the iteration number is below M.
		n.c.warn("loop-negative:"+n.name, fmt.Sprintf("Loop node %q: trip count M = %d is negative, so the loop runs no iteration (as ONNX Runtime runs it)", n.name, trip))
		trip = 0
	}
	estimated := false
	if huge {
		n.c.hugeLoop = append(n.c.hugeLoop, hugeLoop{n.name, trip})
	} else if !constant {
		n.c.dynamicLoop = append(n.c.dynamicLoop, n.name)
	}
	if !constant {
		trip = n.c.opts.LoopTrips
		if trip <= 0 {
			trip, estimated = -1, true
		}
	}
	carried := n.in[min(2, len(n.in)):]
	formal := []*value{
		{dtype: graph.Int64, shape: []int64{}, known: true},
		{dtype: graph.Bool, shape: []int64{}, known: true},
	}
	formal = append(formal, carried...)
	outs, w, err := n.inferSub("body", formal)
	if err != nil {
		return err
	}
	nc := len(carried)
	if len(outs) < 1+nc {
		return fmt.Errorf("body has %d outputs for %d loop-carried values", len(outs), nc)
	}
	for i := range n.out {
		if 1+i >= len(outs) {
			break
		}
		v := outs[1+i]
		if i >= nc { // scan output: stacked over iterations
			if trip < 0 || !v.known {
				v = &value{dtype: v.dtype}
			} else {
				v = &value{dtype: v.dtype, shape: append([]int64{trip}, v.shape...), known: true}
			}
		} else {
			v = &value{dtype: v.dtype, shape: shapes.Clone(v.shape), known: v.known}
		}
		if err := n.setValue(i, v); err != nil {
			return err
		}
	}
	if estimated {
		w.Estimated = true // one iteration counted
		trip = 1
	}
	n.work = scaleWork(w, trip)
	return nil
}

// controlFlowWarnings reports, once per kind, the If and Loop nodes whose
// shapes and costs rest on Options rather than on the model, and options
// that found nothing to apply to.
func (c *converter) controlFlowWarnings() {
	k := c.opts.Knobs
	if len(c.dynamicLoop)+len(c.hugeLoop) > 0 {
		var why []string
		if n := len(c.dynamicLoop); n > 0 {
			why = append(why, fmt.Sprintf("%d Loop node(s) have no constant trip count (first: %q)", n, c.dynamicLoop[0]))
		}
		if n := len(c.hugeLoop); n > 0 {
			h := c.hugeLoop[0]
			why = append(why, fmt.Sprintf("%d Loop node(s) have a constant trip count too large to plan for (first: %q, trip count M = %d, at least 2^31-1: a while loop's run-until-the-condition-fails sentinel, not a count)", n, h.name, h.m))
		}
		msg := strings.Join(why, "; ") + ": "
		if t := c.opts.LoopTrips; t > 0 {
			msg += fmt.Sprintf("counted as %d iterations (%s)", t, k.LoopTrips(strconv.FormatInt(t, 10)))
		} else {
			msg += "one iteration counted (cost estimated) and scan outputs left unshaped; set the count with " + k.LoopTrips("N")
		}
		c.warn("loop-trips", msg)
	} else if t := c.opts.LoopTrips; t > 0 {
		c.warn("loop-trips", fmt.Sprintf("%s: the model has no Loop without a constant trip count", k.LoopTrips(strconv.FormatInt(t, 10))))
	}
	branch := c.opts.IfBranch
	if n := len(c.dynamicIf); n > 0 {
		what := fmt.Sprintf("the branch with more FLOPs (%s)", k.IfBranch(IfMax))
		if branch == IfThen || branch == IfElse {
			what = fmt.Sprintf("the %s branch (%s)", branch, k.IfBranch(branch))
		}
		c.warn("if-branch", fmt.Sprintf("%d If node(s) have a condition that is not a constant (first: %q): shaped and costed as %s; choose with %s",
			n, c.dynamicIf[0], what, k.IfBranch(IfThen+"|"+IfElse+"|"+IfMax)))
	} else if (branch == IfThen || branch == IfElse) && len(c.forcedIf) == 0 {
		c.warn("if-branch", fmt.Sprintf("%s: the model has no If whose condition is not a constant", k.IfBranch(branch)))
	}
}

func inferScan(n *node) error {
	if n.opset < 9 {
		return inferScan8(n)
	}
	m := int(n.attrs.Int("num_scan_inputs", 0))
	if m <= 0 || m > len(n.in) {
		return fmt.Errorf("num_scan_inputs %d does not fit %d inputs", m, len(n.in))
	}
	ns := len(n.in) - m
	inAxes := n.attrs.Ints("scan_input_axes")
	formal := append([]*value(nil), n.in[:ns]...)
	seq := int64(-1)
	for j, x := range n.in[ns:] {
		if x == nil {
			return fmt.Errorf("scan input %d is missing", j)
		}
		a := int64(0)
		if j < len(inAxes) {
			a = inAxes[j]
		}
		ax, err := shapes.NormAxis(a, x.rank())
		if err != nil {
			return err
		}
		if seq >= 0 && x.shape[ax] != seq {
			return fmt.Errorf("scan inputs have lengths %d and %d", seq, x.shape[ax])
		}
		seq = x.shape[ax]
		slice := slices.Delete(shapes.Clone(x.shape), ax, ax+1)
		formal = append(formal, &value{dtype: x.dtype, shape: slice, known: true})
	}
	outs, w, err := n.inferSub("body", formal)
	if err != nil {
		return err
	}
	outAxes := n.attrs.Ints("scan_output_axes")
	for i := range n.out {
		if i >= len(outs) {
			break
		}
		v := outs[i]
		if i >= ns && v.known {
			k := i - ns
			a := int64(0)
			if k < len(outAxes) {
				a = outAxes[k]
			}
			ax, err := shapes.NormAxis(a, v.rank()+1)
			if err != nil {
				return err
			}
			v = &value{dtype: v.dtype, shape: slices.Insert(shapes.Clone(v.shape), ax, seq), known: true}
		} else {
			v = &value{dtype: v.dtype, shape: v.shape, known: v.known}
		}
		if err := n.setValue(i, v); err != nil {
			return err
		}
	}
	n.work = scaleWork(w, seq)
	return nil
}

// inferScan8 shapes opset 8's Scan, whose inputs carry a leading batch
// axis and an optional sequence_lens first input; scan axes are axis 1.
func inferScan8(n *node) error {
	m := int(n.attrs.Int("num_scan_inputs", 0))
	if m <= 0 || m >= len(n.in) {
		return fmt.Errorf("num_scan_inputs %d does not fit %d inputs", m, len(n.in))
	}
	ns := len(n.in) - 1 - m
	var formal []*value
	batch, seq := int64(-1), int64(-1)
	for i, x := range n.in[1:] {
		if x == nil || x.rank() < 1 || (i >= ns && x.rank() < 2) {
			return fmt.Errorf("input %d lacks the batch (and sequence) axes", i+1)
		}
		if batch >= 0 && x.shape[0] != batch {
			return fmt.Errorf("inputs have batch sizes %d and %d", batch, x.shape[0])
		}
		batch = x.shape[0]
		if i < ns {
			formal = append(formal, &value{dtype: x.dtype, shape: shapes.Clone(x.shape[1:]), known: true})
			continue
		}
		seq = max(seq, x.shape[1])
		formal = append(formal, &value{dtype: x.dtype, shape: shapes.Clone(x.shape[2:]), known: true})
	}
	outs, w, err := n.inferSub("body", formal)
	if err != nil {
		return err
	}
	for i := range n.out {
		if i >= len(outs) {
			break
		}
		v := outs[i]
		if v.known {
			lead := []int64{batch}
			if i >= ns {
				lead = append(lead, seq)
			}
			v = &value{dtype: v.dtype, shape: append(lead, v.shape...), known: true}
		}
		if err := n.setValue(i, v); err != nil {
			return err
		}
	}
	n.work = scaleWork(w, shapes.MulSat(batch, seq))
	return nil
}
