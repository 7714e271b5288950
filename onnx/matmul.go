package onnx

import (
	"fmt"
	"slices"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

// Matrix products. MatMul MACs are batch·M·N·K with numpy broadcasting of
// the batch axes; Gemm MACs are M·N·K. FLOPs are two per MAC plus one per
// output element for an added C or bias.

func init() {
	register("", inferMatMul, "MatMul", "MatMulInteger", "QLinearMatMul")
	register("", inferGemm, "Gemm")
	register("", inferEinsum, "Einsum")
}

// matmulShape returns the output shape and MACs of a numpy matmul.
func matmulShape(a, b []int64) ([]int64, int64, error) {
	if len(a) == 0 || len(b) == 0 {
		return nil, 0, fmt.Errorf("MatMul of a scalar (%v × %v)", a, b)
	}
	aa, bb := a, b
	if len(a) == 1 {
		aa = []int64{1, a[0]}
	}
	if len(b) == 1 {
		bb = []int64{b[0], 1}
	}
	m, k := aa[len(aa)-2], aa[len(aa)-1]
	k2, nn := bb[len(bb)-2], bb[len(bb)-1]
	if k != k2 {
		return nil, 0, fmt.Errorf("MatMul inner dimensions differ: %v × %v", a, b)
	}
	batch, err := broadcast(aa[:len(aa)-2], bb[:len(bb)-2])
	if err != nil {
		return nil, 0, err
	}
	out := slices.Clone(batch)
	if len(a) > 1 {
		out = append(out, m)
	}
	if len(b) > 1 {
		out = append(out, nn)
	}
	macs := shapes.MulSat(shapes.MulSat(shapes.Prod(batch), m), shapes.MulSat(nn, k))
	return out, macs, nil
}

func inferMatMul(n *node) error {
	ai, bi := 0, 1
	if n.op == "QLinearMatMul" {
		bi = 3
	}
	a, err := n.need(ai)
	if err != nil {
		return err
	}
	b, err := n.need(bi)
	if err != nil {
		return err
	}
	out, macs, err := matmulShape(a.shape, b.shape)
	if err != nil {
		return err
	}
	dt := a.dtype
	switch n.op {
	case "MatMulInteger":
		dt = graph.Int32
	case "QLinearMatMul":
		if z := n.input(7); z != nil {
			dt = z.dtype
		}
	}
	if err := n.set(0, dt, out); err != nil {
		return err
	}
	n.macs(macs, 0)
	return nil
}

func inferGemm(n *node) error {
	a, err := n.need(0)
	if err != nil {
		return err
	}
	b, err := n.need(1)
	if err != nil {
		return err
	}
	if a.rank() != 2 || b.rank() != 2 {
		return fmt.Errorf("Gemm needs 2-D inputs, got %v and %v", a.shape, b.shape)
	}
	m, k := a.shape[0], a.shape[1]
	if n.attrs.Int("transA", 0) != 0 {
		m, k = k, m
	}
	k2, nn := b.shape[0], b.shape[1]
	if n.attrs.Int("transB", 0) != 0 {
		k2, nn = nn, k2
	}
	if k != k2 {
		return fmt.Errorf("Gemm inner dimensions differ: %v × %v (transA=%d, transB=%d)", a.shape, b.shape,
			n.attrs.Int("transA", 0), n.attrs.Int("transB", 0))
	}
	out := []int64{m, nn}
	var extra int64
	if c := n.input(2); c != nil {
		bs, err := broadcast(out, c.shape)
		if err != nil || !slices.Equal(bs, out) {
			return fmt.Errorf("Gemm C %v does not broadcast to %v", c.shape, out)
		}
		extra = m * nn
	}
	if err := n.set(0, a.dtype, out); err != nil {
		return err
	}
	n.macs(shapes.MulSat(shapes.MulSat(m, nn), k), extra)
	return nil
}
