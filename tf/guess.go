package tf

import (
	"fmt"
	"sort"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

// maxSettleRounds bounds the rounds of settle.
const maxSettleRounds = 64

// settleBudget bounds the forward inference passes settle may run. Each
// guess costs a strict inference run of several passes per candidate
// value, so a graph of many unknown axis constants on high-rank tensors
// could otherwise run for minutes (a 15 KB graph of 40 ConcatV2 of rank
// 254 ran 10,161 passes, 3 minutes). The TF.js models we know settle in
// at most 36 (MoveNet).
const settleBudget = 128

// settle decides what deduction alone could not, when a model lacks the
// values of shape-feeding constants (a TF.js model without its weight
// files). Each round tries, in order, and re-runs inference after the
// first that settles something:
//
//  1. deduceAxes: axis constants that only one value fits (sound);
//  2. assumeSameOperands: computed operands of a broadcasting op are the
//     same size where one side is known (residual adds);
//  3. assumeReshape: a reshape output keeps its input's leading and
//     trailing dimensions;
//  4. guessAxis: an axis constant is tried with each value the shapes
//     around it allow, keeping the first with which the whole graph
//     infers without contradiction and with the most shapes known.
//
// Every assumption (2-4) is checked by a strict inference run and
// dropped if anything contradicts it.
func (c *converter) settle() error {
	tried := map[string]bool{}
	c.settleEnd = c.passes + settleBudget
	for range maxSettleRounds {
		if c.passes >= c.settleEnd {
			c.warn("settle-budget", fmt.Sprintf("shape recovery stopped after %d inference passes: shapes it had not settled stay unknown and their costs are estimated", settleBudget))
			return nil
		}
		ok, err := c.deduceAxes()
		if err != nil {
			return err
		}
		if ok {
			continue
		}
		if c.opsShaped() {
			return nil
		}
		if ok, err = c.assumeSameOperands(tried); err != nil || ok {
			if err != nil {
				return err
			}
			continue
		}
		if ok, err = c.assumeReshape(tried); err != nil || ok {
			if err != nil {
				return err
			}
			continue
		}
		if ok, err = c.guessAxis(tried); err != nil || !ok {
			return err
		}
	}
	return nil
}

// opsShaped reports whether every op output is fully known.
func (c *converter) opsShaped() bool {
	for _, i := range c.order {
		if isSource(c.nodes[i].def.GetOp()) {
			continue
		}
		for _, v := range c.vals[i] {
			if !v.known() {
				return false
			}
		}
	}
	return true
}

// axisUse is one op reading an axis constant.
type axisUse struct {
	node, input int
}

// axisInput returns which input of node i is a scalar axis whose range
// is the data inputs' rank plus extra, and those data inputs; -1 when
// the op has none.
func (c *converter) axisInput(i int) (axis int, data []int, extra int) {
	tn := &c.nodes[i]
	switch tn.def.GetOp() {
	case "ExpandDims":
		return 1, []int{0}, 1
	case "ConcatV2":
		data = make([]int, 0, len(tn.ins))
		for k := range len(tn.ins) - 1 {
			data = append(data, k)
		}
		return len(tn.ins) - 1, data, 0
	case "ArgMax", "ArgMin", "Mean", "Sum", "Max", "Min", "Prod", "All", "Any", "EuclideanNorm":
		return 1, []int{0}, 0
	}
	return -1, nil, 0
}

// axisConsts lists, in graph order of first use, the Const nodes with
// unknown contents that hold one integer and are read only as axes,
// with their uses.
func (c *converter) axisConsts() ([]int, map[int][]axisUse) {
	uses := map[int][]axisUse{}
	bad := map[int]bool{}
	var order []int
	for _, i := range c.order {
		ax, _, _ := c.axisInput(i)
		for k, r := range c.nodes[i].ins {
			src := c.nodes[r.node].def
			if src.GetOp() != "Const" || bad[r.node] {
				continue
			}
			v := c.vals[r.node][0]
			if v.hasInts() || !v.known() || shapes.Prod(v.shape) != 1 || len(v.shape) > 1 || !isIntType(v.dtype) {
				continue
			}
			if k != ax {
				bad[r.node] = true
				continue
			}
			if uses[r.node] == nil {
				order = append(order, r.node)
			}
			uses[r.node] = append(uses[r.node], axisUse{i, k})
		}
	}
	out := order[:0]
	for _, k := range order {
		if !bad[k] {
			out = append(out, k)
		}
	}
	return out, uses
}

// axisFits evaluates every use of an axis constant with value a, without
// re-running the graph: each op must infer without error and agree with
// what is known of its output. It returns the uses' outputs, nil when a
// does not fit.
func (c *converter) axisFits(k int, uses []axisUse, a int64) []*value {
	cv := c.vals[k][0]
	axv := &value{dtype: cv.dtype, shape: shapes.Clone(cv.shape), ranked: true, ints: []int64{a}}
	outs := make([]*value, 0, len(uses))
	for _, u := range uses {
		n := c.view(u.node)
		n.out = make([]*value, c.nodes[u.node].nout)
		n.in[u.input] = axv
		d := registry[n.op]
		if d == nil || d.shape(n) != nil || n.out[0] == nil {
			return nil
		}
		if _, ok := meet(n.out[0], c.vals[u.node][0]); !ok {
			return nil
		}
		outs = append(outs, n.out[0])
	}
	return outs
}

// axisCandidates returns the values an axis constant may take (those in
// [0, rank) that fit every use, see axisFits), whether its uses' data
// inputs are all fully known, and whether every fitting value gives the
// same outputs.
func (c *converter) axisCandidates(k int, uses []axisUse) (cands []int64, dataKnown, same bool) {
	r := -1
	dataKnown, same = true, true
	for _, u := range uses {
		_, data, extra := c.axisInput(u.node)
		for _, j := range data {
			in := c.nodes[u.node].ins[j]
			v := c.vals[in.node][in.out]
			if !v.known() {
				dataKnown = false
			}
			if v.ranked && r < 0 {
				r = len(v.shape) + extra
			}
		}
	}
	if r < 0 {
		return nil, false, false
	}
	var first []*value
	for a := range int64(r) {
		outs := c.axisFits(k, uses, a)
		if outs == nil {
			continue
		}
		if first == nil {
			first = outs
		} else {
			for i := range outs {
				if !sameShape(outs[i], first[i]) {
					same = false
				}
			}
		}
		cands = append(cands, a)
	}
	return cands, dataKnown, same
}

// deduceAxes settles every axis constant that only one value fits, or
// whose fitting values all give the same shapes (so the choice changes
// nothing), then re-runs inference. It reports whether it settled any.
func (c *converter) deduceAxes() (bool, error) {
	consts, uses := c.axisConsts()
	settled := false
	for _, k := range consts {
		cands, dataKnown, same := c.axisCandidates(k, uses[k])
		if len(cands) == 1 || len(cands) > 1 && dataKnown && same {
			name := c.nodes[k].def.GetName()
			c.guesses[name] = cands[0]
			c.deducedAxes = append(c.deducedAxes, fmt.Sprintf("%s=%d", name, cands[0]))
			settled = true
		}
	}
	if !settled {
		return false, nil
	}
	return true, c.infer()
}

// state is what an inference run leaves, saved while trying guesses.
type state struct {
	vals     [][]*value
	works    []graph.Work
	declared map[string]*value
	learned  map[string]bool
	choices  map[string][]*value
}

func (c *converter) save() state {
	return state{c.vals, c.works, c.declared, c.learned, c.choices}
}

func (c *converter) restore(s state) {
	c.vals, c.works, c.declared, c.learned, c.choices = s.vals, s.works, s.declared, s.learned, s.choices
}

// tryStrict runs inference treating any contradiction as an error, and
// reports whether it succeeded; on failure, or when settle's budget is
// spent, the previous state is back.
func (c *converter) tryStrict() bool {
	if c.passes >= c.settleEnd {
		return false // out of budget: nothing more is assumed
	}
	before := c.save()
	c.strict = true
	err := c.infer()
	c.strict = false
	if err != nil {
		c.restore(before)
		return false
	}
	return true
}

// guessAxis settles the first axis constant, in graph order, that the
// shapes around it do not decide: each value that fits its uses is tried
// with a strict inference run, and the first leaving the most tensors
// shaped is kept (its run's results are kept too, not recomputed). It
// reports whether it tried one.
func (c *converter) guessAxis(tried map[string]bool) (bool, error) {
	consts, uses := c.axisConsts()
	for _, k := range consts {
		name := c.nodes[k].def.GetName()
		if tried["axis:"+name] {
			continue
		}
		tried["axis:"+name] = true
		cands, _, _ := c.axisCandidates(k, uses[k])
		if len(cands) == 0 {
			continue
		}
		before := c.save()
		var best state
		bestVal, bestScore := int64(0), -1
		for _, a := range cands {
			c.guesses[name] = a
			if !c.tryStrict() {
				continue
			}
			if s := c.shapedCount(); s > bestScore {
				best, bestVal, bestScore = c.save(), a, s
			}
			c.restore(before)
		}
		if bestScore < 0 {
			delete(c.guesses, name)
			c.restore(before)
			continue
		}
		c.guesses[name] = bestVal
		c.restore(best)
		c.guessedAxes = append(c.guessedAxes, fmt.Sprintf("%s=%d", name, bestVal))
		return true, nil
	}
	return false, nil
}

// shapedCount is the number of fully known tensors.
func (c *converter) shapedCount() int {
	n := 0
	for _, vs := range c.vals {
		for _, v := range vs {
			if v.known() {
				n++
			}
		}
	}
	return n
}

// settleWarnings says what was deduced and what assumed.
func (c *converter) settleWarnings() {
	if len(c.learned) > 0 {
		names := make([]string, 0, len(c.learned))
		for n := range c.learned {
			names = append(names, n)
		}
		sort.Strings(names)
		c.warn("recovered", fmt.Sprintf("%d tensor shapes depend on constants whose values the model does not carry; they were recovered by deduction from the model's signature and the ops consuming them (e.g. %q)", len(names), names[0]))
	}
	if len(c.deducedAxes) > 0 {
		c.warn("deduced", fmt.Sprintf("%d axis constants have no values in the model; each was deduced as the only value the shapes around it allow, or one of several that give the same shapes (%s)", len(c.deducedAxes), examples(c.deducedAxes)))
	}
	if len(c.guessedAxes) > 0 {
		c.warn("guessed", fmt.Sprintf("%d axis constants have no values in the model and the shapes around them allow several; each was set to the first value with which the whole graph infers without contradiction and with the most shapes known (%s)", len(c.guessedAxes), examples(c.guessedAxes)))
	}
	if len(c.assumedSame) > 0 {
		c.warn("assumed-same", fmt.Sprintf("%d tensor shapes were assumed equal to the other operand of a broadcasting op where only that side's size is known, as in a residual add (%s); the constants that decide them are not in the model", len(c.assumedSame), examples(c.assumedSame)))
	}
	if len(c.assumedReshape) > 0 {
		c.warn("assumed-reshape", fmt.Sprintf("%d reshape targets are not in the model; each output was assumed to be, of the shapes its element count and its consumers allow, the one keeping most of its input's leading and trailing dimensions (%s)", len(c.assumedReshape), examples(c.assumedReshape)))
	}
}

// examples lists up to three items, sorted, and how many more there are.
func examples(items []string) string {
	s := append([]string{}, items...)
	sort.Strings(s)
	ex := s
	if len(ex) > 3 {
		ex = ex[:3]
	}
	return strings.Join(ex, ", ") + more(len(s)-len(ex))
}

func more(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(", and %d more", n)
}
