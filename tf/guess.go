package tf

import (
	"fmt"
	"sort"
	"strings"
)

// maxGuesses bounds the axis constants guessAxes tries to settle.
const maxGuesses = 64

// guessAxes settles scalar axis constants whose values the model does
// not carry (a TF.js model without its weight files): the dim of
// ExpandDims, the axis of ConcatV2, the dimension of ArgMax/ArgMin and a
// scalar reduction axis. Each is a small integer in [-r, r]; one at a
// time, in graph order, every candidate is tried with a full inference
// run, and the first (smallest non-negative) value that infers without a
// shape error and leaves the most tensors fully shaped is kept. A value
// that makes any later op fail is never chosen; when every value does,
// the constant stays unknown.
func (c *converter) guessAxes() error {
	tried := map[string]bool{}
	var chosen []string
	for range maxGuesses {
		name, rank := c.nextAxisConst(tried)
		if name == "" {
			break
		}
		tried[name] = true
		best, bestScore := int64(0), -1
		for cand := range int64(rank) {
			c.guesses[name] = cand
			if err := c.infer(); err != nil {
				continue
			}
			if s := c.shapedCount(); s > bestScore {
				best, bestScore = cand, s
			}
		}
		if bestScore < 0 {
			delete(c.guesses, name)
		} else {
			c.guesses[name] = best
			chosen = append(chosen, fmt.Sprintf("%s=%d", name, best))
		}
		if err := c.infer(); err != nil {
			return err
		}
	}
	if len(chosen) > 0 {
		sort.Strings(chosen)
		ex := chosen
		if len(ex) > 3 {
			ex = ex[:3]
		}
		c.warn("guessed", fmt.Sprintf("%d axis constants have no values in the model; each was set to the first value consistent with the rest of the graph (%s%s)", len(chosen), strings.Join(ex, ", "), more(len(chosen)-len(ex))))
	}
	return nil
}

func more(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(", and %d more", n)
}

// nextAxisConst finds, in graph order, the first scalar Const with
// unknown contents that feeds an axis input of an op whose data input
// has a known rank; it returns the const's name and the number of
// candidate axes.
func (c *converter) nextAxisConst(tried map[string]bool) (string, int) {
	for _, i := range c.order {
		tn := &c.nodes[i]
		axisIn, extra := -1, 0
		switch tn.def.GetOp() {
		case "ExpandDims":
			axisIn, extra = 1, 1
		case "ConcatV2":
			axisIn = len(tn.ins) - 1
		case "ArgMax", "ArgMin", "Mean", "Sum", "Max", "Min", "Prod", "All", "Any":
			axisIn = 1
		default:
			continue
		}
		if axisIn < 1 || axisIn >= len(tn.ins) {
			continue
		}
		r := tn.ins[axisIn]
		src := c.nodes[r.node].def
		if src.GetOp() != "Const" || tried[src.GetName()] {
			continue
		}
		v := c.vals[r.node][0]
		if v.hasInts() || !v.known() || len(v.shape) != 0 && !(len(v.shape) == 1 && v.shape[0] == 1) {
			continue
		}
		data := c.vals[tn.ins[0].node][tn.ins[0].out]
		if !data.ranked {
			continue
		}
		return src.GetName(), len(data.shape) + extra
	}
	return "", 0
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
