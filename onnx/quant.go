package onnx

import (
	"fmt"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

// Quantization ops cost a few FLOPs per element (scale, round, shift,
// clamp).

func init() {
	register("", inferQuantize, "QuantizeLinear")
	register("", inferDequantize, "DequantizeLinear")
	register("", inferDynamicQuantize, "DynamicQuantizeLinear")
}

func inferQuantize(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	dt := graph.Uint8
	if z := n.input(2); z != nil {
		dt = z.dtype
	}
	if n.attrs.Has("output_dtype") && n.attrs.Int("output_dtype", 0) != 0 {
		dt = graph.DType(n.attrs.Int("output_dtype", 0))
	}
	n.flops(shapes.MulSat(4, x.elems()))
	return n.set(0, dt, shapes.Clone(x.shape))
}

func inferDequantize(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	s, err := n.need(1)
	if err != nil {
		return err
	}
	dt := s.dtype
	if n.attrs.Has("output_dtype") && n.attrs.Int("output_dtype", 0) != 0 {
		dt = graph.DType(n.attrs.Int("output_dtype", 0))
	}
	n.flops(shapes.MulSat(2, x.elems()))
	return n.set(0, dt, shapes.Clone(x.shape))
}

func inferDynamicQuantize(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	if x.dtype != graph.Float32 {
		return fmt.Errorf("input must be float32, not %s", x.dtype)
	}
	n.flops(shapes.MulSat(6, x.elems()))
	if err := n.set(0, graph.Uint8, shapes.Clone(x.shape)); err != nil {
		return err
	}
	if err := n.set(1, graph.Float32, []int64{}); err != nil {
		return err
	}
	return n.set(2, graph.Uint8, []int64{})
}
