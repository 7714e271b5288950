package onnx

import (
	"fmt"
	"slices"
	"strings"

	"github.com/opplace/opplace/internal/shapes"
)

// inferEinsum shapes an Einsum. A contraction of two or more operands is
// counted as MACs over the product of all index sizes (what a matmul
// lowering computes); a one-operand Einsum (trace, transpose, sum) costs
// one FLOP per input element.
func inferEinsum(n *node) error {
	eq := strings.ReplaceAll(n.attrs.String("equation", ""), " ", "")
	lhs, rhs, explicit := strings.Cut(eq, "->")
	terms := strings.Split(lhs, ",")
	if len(terms) != len(n.in) {
		return fmt.Errorf("equation %q has %d operands, the node %d", eq, len(terms), len(n.in))
	}
	size := map[byte]int64{}
	count := map[byte]int{}
	var ell []int64
	for i, t := range terms {
		x, err := n.need(i)
		if err != nil {
			return err
		}
		letters := strings.Replace(t, "...", "", 1)
		hasEll := len(letters) != len(t)
		ne := x.rank() - len(letters)
		if ne < 0 || (!hasEll && ne != 0) {
			return fmt.Errorf("term %q does not match input shape %v", t, x.shape)
		}
		pos := 0
		for j := 0; j < len(t); j++ {
			if strings.HasPrefix(t[j:], "...") {
				var err error
				if ell, err = broadcast(ell, x.shape[pos:pos+ne]); err != nil {
					return err
				}
				pos += ne
				j += 2
				continue
			}
			c := t[j]
			if !isLetter(c) {
				return fmt.Errorf("equation %q has a bad character %q", eq, c)
			}
			d := x.shape[pos]
			if s, ok := size[c]; ok && s != d && s != 1 && d != 1 {
				return fmt.Errorf("index %q has sizes %d and %d", c, s, d)
			} else if !ok || s == 1 {
				size[c] = d
			}
			count[c]++
			pos++
		}
	}
	if !explicit {
		var ls []byte
		for c, k := range count {
			if k == 1 {
				ls = append(ls, c)
			}
		}
		slices.Sort(ls)
		rhs = "..." + string(ls)
	}
	var out []int64
	for j := 0; j < len(rhs); j++ {
		if strings.HasPrefix(rhs[j:], "...") {
			out = append(out, ell...)
			j += 2
			continue
		}
		s, ok := size[rhs[j]]
		if !ok {
			return fmt.Errorf("output index %q of %q appears in no input", rhs[j], eq)
		}
		out = append(out, s)
	}
	if out == nil {
		out = []int64{}
	}
	if err := n.set(0, n.in[0].dtype, out); err != nil {
		return err
	}
	if len(n.in) >= 2 {
		m := shapes.Prod(ell)
		for _, s := range size {
			m = shapes.MulSat(m, s)
		}
		n.macs(m, 0)
	} else {
		n.flops(n.in[0].elems())
	}
	return nil
}

func isLetter(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }
