package onnx

import (
	"fmt"
	"math"

	"github.com/opplace/opplace/internal/shapes"
)

// Pad, Resize and friends: ops whose output sizes come from attributes
// before some opset and from (folded) inputs after it.

func init() {
	register("", inferPad, "Pad")
	register("", inferResize, "Resize", "Upsample")
}

func inferPad(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	r := x.rank()
	var pads []int64
	if n.opset < 11 {
		pads = n.attrs.Ints("pads")
		if pads == nil {
			pads = n.attrs.Ints("paddings")
		}
	} else {
		var ok bool
		if pads, ok = n.ints(1); !ok {
			return errNeedValue
		}
	}
	axes := make([]int64, 0, r)
	if n.opset >= 18 && n.input(3) != nil {
		a, ok := n.ints(3)
		if !ok {
			return errNeedValue
		}
		axes = a
	} else {
		for i := range r {
			axes = append(axes, int64(i))
		}
	}
	if len(pads) != 2*len(axes) {
		return fmt.Errorf("pads %v do not match %d axes", pads, len(axes))
	}
	out := shapes.Clone(x.shape)
	k := len(axes)
	for i, a := range axes {
		ax, err := shapes.NormAxis(a, r)
		if err != nil {
			return err
		}
		out[ax] += pads[i] + pads[i+k]
		if out[ax] < 0 {
			return fmt.Errorf("pads %v make axis %d negative", pads, ax)
		}
	}
	n.flops(0)
	return n.set(0, x.dtype, out)
}

func inferResize(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	r := x.rank()
	var scales []float64
	var sizes []int64
	switch {
	case n.op == "Upsample" && n.opset < 9, n.op == "Resize" && n.opset < 10:
		scales = n.attrs["scales"].Floats
	case n.op == "Upsample" || n.opset < 11:
		s, err := n.need(1)
		if err != nil {
			return err
		}
		var ok bool
		if scales, ok = s.numbers(); !ok {
			return errNeedValue
		}
	default:
		if sv := n.input(3); sv != nil && sv.elems() > 0 {
			var ok bool
			if sizes, ok = n.ints(3); !ok {
				return errNeedValue
			}
		} else if sc := n.input(2); sc != nil && sc.elems() > 0 {
			var ok bool
			if scales, ok = sc.numbers(); !ok {
				return errNeedValue
			}
		} else {
			return fmt.Errorf("Resize has neither scales nor sizes")
		}
	}
	axes := make([]int, 0, r)
	if a := n.attrs.Ints("axes"); a != nil && n.opset >= 18 {
		for _, v := range a {
			ax, err := shapes.NormAxis(v, r)
			if err != nil {
				return err
			}
			axes = append(axes, ax)
		}
	} else {
		for i := range r {
			axes = append(axes, i)
		}
	}
	out := shapes.Clone(x.shape)
	switch {
	case sizes != nil:
		if len(sizes) != len(axes) {
			return fmt.Errorf("sizes %v do not match %d axes", sizes, len(axes))
		}
		policy := n.attrs.String("keep_aspect_ratio_policy", "stretch")
		if policy == "stretch" {
			for i, a := range axes {
				out[a] = sizes[i]
			}
			break
		}
		scale := math.Inf(1)
		if policy == "not_smaller" {
			scale = math.Inf(-1)
		}
		for i, a := range axes {
			s := float64(sizes[i]) / float64(x.shape[a])
			if policy == "not_smaller" {
				scale = math.Max(scale, s)
			} else {
				scale = math.Min(scale, s)
			}
		}
		for _, a := range axes {
			out[a] = int64(math.Round(scale * float64(x.shape[a])))
		}
	default:
		if len(scales) != len(axes) {
			return fmt.Errorf("scales %v do not match %d axes", scales, len(axes))
		}
		for i, a := range axes {
			if scales[i] < 0 || math.IsNaN(scales[i]) {
				return fmt.Errorf("scales %v are negative", scales)
			}
			v := math.Floor(float64(x.shape[a]) * scales[i])
			if v > float64(shapes.MaxElements) {
				return fmt.Errorf("scales %v are too large", scales)
			}
			out[a] = int64(v)
		}
	}
	if err := n.set(0, x.dtype, out); err != nil {
		return err
	}
	cost := int64(4) // linear: a few multiply-adds per output element
	if n.attrs.String("mode", "nearest") == "nearest" {
		cost = 1
	}
	n.flops(shapes.MulSat(cost, shapes.Prod(out)))
	return nil
}
