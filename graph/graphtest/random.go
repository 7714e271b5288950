package graphtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/opplace/opplace/graph"
)

// RandomDAG is a random graph of n ops: each reads one to three earlier
// ops (most from the last few, some from far back), with a parameter
// and op times and tensor sizes spread over two orders of magnitude.
// With train, it is a training step built as package train does: a loss
// reading the forward pass's last ops, a gradient op per forward op,
// reading its consumers' gradients (or the loss) and its own inputs, and
// an update per parameter, the three colocated.
func RandomDAG(r *rand.Rand, n int, train bool) *Builder {
	b := New("random").Input("x", 1<<16)
	spread := func(lo, hi float64) int64 { return int64(lo * math.Pow(hi/lo, r.Float64())) }
	ins := make([][]string, n)
	name := func(i int) string { return fmt.Sprint("f", i) }
	for i := 0; i < n; i++ {
		w := fmt.Sprint("w", i)
		b.Param(w, spread(1<<10, 1<<20))
		ins[i] = []string{w}
		if i < 3 {
			ins[i] = append(ins[i], "x")
		}
		for k := 0; k < 1+r.IntN(3) && i > 0; k++ {
			from := i - 1 - r.IntN(min(i, 6))
			if r.IntN(8) == 0 {
				from = r.IntN(i)
			}
			if in := name(from); !slices.Contains(ins[i], in) {
				ins[i] = append(ins[i], in)
			}
		}
		b.Op(name(i), spread(1e5, 1e7), spread(1<<14, 1<<24), ins[i]...)
	}
	if !train {
		return b
	}
	readers := make([][]int, n)
	for i := range ins {
		for _, in := range ins[i] {
			var j int
			if _, err := fmt.Sscanf(in, "f%d", &j); err == nil {
				readers[j] = append(readers[j], i)
			}
		}
	}
	var sinks []string
	for i := range readers {
		if len(readers[i]) == 0 {
			sinks = append(sinks, name(i))
		}
	}
	b.Op("loss", spread(1e4, 1e5), 4, sinks...)
	for i := n - 1; i >= 0; i-- {
		grads := slices.Clone(ins[i])
		for _, c := range readers[i] {
			grads = append(grads, fmt.Sprint("g", c))
		}
		if len(readers[i]) == 0 {
			grads = append(grads, "loss")
		}
		b.Op(fmt.Sprint("g", i), spread(2e5, 2e7), spread(1<<14, 1<<24), grads...)
	}
	for i := 0; i < n; i++ {
		b.Op(fmt.Sprint("u", i), spread(1e4, 1e5), 0, fmt.Sprint("w", i), fmt.Sprint("g", i))
	}
	for i := range b.G.Ops {
		op := &b.G.Ops[i]
		if op.Name == "loss" {
			continue
		}
		op.Colocate = "L" + op.Name[1:]
		switch op.Name[0] {
		case 'g':
			op.Phase = graph.Backward
		case 'u':
			op.Phase = graph.Update
		}
	}
	return b
}
