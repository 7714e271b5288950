package onnx

import (
	"fmt"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

// Normalisations and softmax. FLOP convention per input element: softmax
// and its log form 5 (max, subtract, exp, sum, divide), layer, instance
// and group normalisation 8 (mean, variance, normalise, scale, shift),
// batch normalisation 4 in inference (statistics are constants; 8 when it
// computes them), LRN 2·size+4.

func init() {
	register("", inferSoftmax, "Softmax", "LogSoftmax", "Hardmax")
	register("", inferBatchNorm, "BatchNormalization")
	register("", inferLayerNorm, "LayerNormalization")
	register("", inferSameShape(8), "InstanceNormalization", "GroupNormalization",
		"MeanVarianceNormalization")
	register("", inferSameShape(3), "LpNormalization")
	register("", inferLRN, "LRN")
}

// inferSameShape shapes ops whose single output has the input's type and
// shape, at cost FLOPs per element.
func inferSameShape(cost int64) inferFunc {
	return func(n *node) error {
		x, err := n.need(0)
		if err != nil {
			return err
		}
		n.flops(shapes.MulSat(cost, x.elems()))
		return n.set(0, x.dtype, shapes.Clone(x.shape))
	}
}

func inferSoftmax(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	def := int64(-1)
	if n.opset < 13 {
		def = 1
	}
	if x.rank() > 0 {
		if _, err := shapes.NormAxis(n.attrs.Int("axis", def), x.rank()); err != nil {
			return err
		}
	}
	cost := int64(5)
	if n.op == "Hardmax" {
		cost = 1
	}
	n.flops(shapes.MulSat(cost, x.elems()))
	return n.set(0, x.dtype, shapes.Clone(x.shape))
}

func inferBatchNorm(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	if x.rank() < 2 {
		return fmt.Errorf("input %v must be N×C×...", x.shape)
	}
	if err := n.set(0, x.dtype, shapes.Clone(x.shape)); err != nil {
		return err
	}
	c := []int64{x.shape[1]}
	for i := 1; i < len(n.out); i++ {
		if err := n.set(i, x.dtype, shapes.Clone(c)); err != nil {
			return err
		}
	}
	cost := int64(4)
	if len(n.out) > 1 {
		cost = 8
	}
	n.flops(shapes.MulSat(cost, x.elems()))
	return nil
}

func inferLayerNorm(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	axis, err := shapes.NormAxis(n.attrs.Int("axis", -1), x.rank())
	if err != nil {
		return err
	}
	if err := n.set(0, x.dtype, shapes.Clone(x.shape)); err != nil {
		return err
	}
	stat := shapes.Clone(x.shape)
	for i := axis; i < len(stat); i++ {
		stat[i] = 1
	}
	st := graph.DType(n.attrs.Int("stash_type", int64(graph.Float32)))
	for i := 1; i < len(n.out) && i < 3; i++ {
		if err := n.set(i, st, shapes.Clone(stat)); err != nil {
			return err
		}
	}
	n.flops(shapes.MulSat(8, x.elems()))
	return nil
}

func inferLRN(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	n.flops(shapes.MulSat(2*n.attrs.Int("size", 1)+4, x.elems()))
	return n.set(0, x.dtype, shapes.Clone(x.shape))
}
