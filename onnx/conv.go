package onnx

import (
	"fmt"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

// Convolutions and pooling. MACs of a convolution are
// N·Cout·∏out_spatial·(Cin/group)·∏kernel; FLOPs are two per MAC plus one
// per output element for the bias. A pooling op costs one FLOP per window
// element per output element.

func init() {
	register("", inferConv, "Conv", "ConvInteger", "QLinearConv")
	register("", inferConvTranspose, "ConvTranspose")
	register("", inferPool, "MaxPool", "AveragePool", "LpPool")
	register("", inferGlobalPool, "GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool")
	register("", inferMaxUnpool, "MaxUnpool")
}

// windowAttrs are the attributes shared by convolutions and pools, for
// k spatial axes.
type windowAttrs struct {
	kernel, strides, dilations, pads []int64
	autoPad                          string
}

func (n *node) window(k int, kernel []int64) (windowAttrs, error) {
	w := windowAttrs{kernel: kernel, autoPad: n.attrs.String("auto_pad", "NOTSET")}
	if ks := n.attrs.Ints("kernel_shape"); ks != nil {
		w.kernel = ks
	}
	if len(w.kernel) != k {
		return w, fmt.Errorf("kernel_shape %v does not match %d spatial axes", w.kernel, k)
	}
	ones := func(name string) ([]int64, error) {
		v := n.attrs.Ints(name)
		if v == nil {
			v = make([]int64, k)
			for i := range v {
				v[i] = 1
			}
		}
		if len(v) != k {
			return nil, fmt.Errorf("%s %v does not match %d spatial axes", name, v, k)
		}
		for _, x := range v {
			if x <= 0 {
				return nil, fmt.Errorf("%s %v must be positive", name, v)
			}
		}
		return v, nil
	}
	var err error
	if w.strides, err = ones("strides"); err != nil {
		return w, err
	}
	if w.dilations, err = ones("dilations"); err != nil {
		return w, err
	}
	w.pads = n.attrs.Ints("pads")
	if w.pads == nil {
		w.pads = make([]int64, 2*k)
	}
	if len(w.pads) != 2*k {
		return w, fmt.Errorf("pads %v do not match %d spatial axes", w.pads, k)
	}
	for _, p := range w.pads {
		if p < 0 {
			return w, fmt.Errorf("pads %v are negative", w.pads)
		}
	}
	for _, x := range w.kernel {
		if x <= 0 {
			return w, fmt.Errorf("kernel_shape %v must be positive", w.kernel)
		}
	}
	return w, nil
}

// outSize computes the spatial output sizes of a convolution or pool.
func (w windowAttrs) outSize(in []int64, ceilMode bool) ([]int64, error) {
	k := len(in)
	out := make([]int64, k)
	for i := range k {
		ek := (w.kernel[i]-1)*w.dilations[i] + 1
		s := w.strides[i]
		switch w.autoPad {
		case "SAME_UPPER", "SAME_LOWER":
			out[i] = (in[i] + s - 1) / s
		case "VALID":
			if in[i] < ek {
				return nil, fmt.Errorf("input size %d on spatial axis %d is smaller than the kernel extent %d", in[i], i, ek)
			}
			out[i] = (in[i]-ek)/s + 1
		case "NOTSET", "":
			eff := in[i] + w.pads[i] + w.pads[i+k]
			if eff < ek {
				return nil, fmt.Errorf("padded input size %d on spatial axis %d is smaller than the kernel extent %d", eff, i, ek)
			}
			if ceilMode {
				out[i] = (eff-ek+s-1)/s + 1
				// The last window must start inside the input or the
				// left padding (as PyTorch and ONNX Runtime do).
				if (out[i]-1)*s >= in[i]+w.pads[i] {
					out[i]--
				}
			} else {
				out[i] = (eff-ek)/s + 1
			}
		default:
			return nil, fmt.Errorf("unknown auto_pad %q", w.autoPad)
		}
	}
	return out, nil
}

func inferConv(n *node) error {
	xi, wi, bi := 0, 1, 2
	dt := graph.Undefined
	switch n.op {
	case "ConvInteger":
		dt = graph.Int32
	case "QLinearConv":
		xi, wi, bi = 0, 3, 8
		if z := n.input(7); z != nil {
			dt = z.dtype
		}
	}
	x, err := n.need(xi)
	if err != nil {
		return err
	}
	w, err := n.need(wi)
	if err != nil {
		return err
	}
	if dt == graph.Undefined {
		dt = x.dtype
	}
	return n.convCommon(x, w, n.input(bi), dt, n.attrs.Int("group", 1))
}

// convCommon shapes and costs a convolution of x by w (with optional
// bias b), shared by Conv and its fused and quantized forms.
func (n *node) convCommon(x, w, b *value, dt graph.DType, group int64) error {
	if x.rank() < 3 || w.rank() != x.rank() {
		return fmt.Errorf("input %v and weight %v must both be N×C×spatial", x.shape, w.shape)
	}
	if group <= 0 || x.shape[1]%group != 0 || w.shape[0]%group != 0 {
		return fmt.Errorf("group %d does not divide channels %d and %d", group, x.shape[1], w.shape[0])
	}
	if x.shape[1]/group != w.shape[1] {
		return fmt.Errorf("input channels %d / group %d do not match weight %v", x.shape[1], group, w.shape)
	}
	k := x.rank() - 2
	wa, err := n.window(k, w.shape[2:])
	if err != nil {
		return err
	}
	sp, err := wa.outSize(x.shape[2:], false)
	if err != nil {
		return err
	}
	out := append([]int64{x.shape[0], w.shape[0]}, sp...)
	if err := n.set(0, dt, out); err != nil {
		return err
	}
	macs := shapes.MulSat(shapes.Prod(out), shapes.MulSat(w.shape[1], shapes.Prod(wa.kernel)))
	var extra int64
	if b != nil {
		extra = shapes.Prod(out)
	}
	n.macs(macs, extra)
	return nil
}

func inferConvTranspose(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	w, err := n.need(1)
	if err != nil {
		return err
	}
	if x.rank() < 3 || w.rank() != x.rank() {
		return fmt.Errorf("input %v and weight %v must both be N×C×spatial", x.shape, w.shape)
	}
	group := n.attrs.Int("group", 1)
	if group <= 0 || x.shape[1] != w.shape[0] || x.shape[1]%group != 0 {
		return fmt.Errorf("input channels %d do not match weight %v with group %d", x.shape[1], w.shape, group)
	}
	k := x.rank() - 2
	wa, err := n.window(k, w.shape[2:])
	if err != nil {
		return err
	}
	opad := n.attrs.Ints("output_padding")
	if opad == nil {
		opad = make([]int64, k)
	}
	if len(opad) != k {
		return fmt.Errorf("output_padding %v does not match %d spatial axes", opad, k)
	}
	sp := make([]int64, k)
	if os := n.attrs.Ints("output_shape"); os != nil {
		if len(os) == k+2 {
			os = os[2:]
		}
		if len(os) != k {
			return fmt.Errorf("output_shape %v does not match %d spatial axes", os, k)
		}
		copy(sp, os)
	} else {
		for i := range k {
			in := x.shape[2+i]
			ek := (wa.kernel[i]-1)*wa.dilations[i] + 1
			switch wa.autoPad {
			case "SAME_UPPER", "SAME_LOWER":
				sp[i] = in * wa.strides[i]
			case "VALID":
				sp[i] = wa.strides[i]*(in-1) + opad[i] + ek
			default:
				sp[i] = wa.strides[i]*(in-1) + opad[i] + ek - wa.pads[i] - wa.pads[i+k]
			}
		}
	}
	out := append([]int64{x.shape[0], w.shape[1] * group}, sp...)
	if err := n.set(0, x.dtype, out); err != nil {
		return err
	}
	macs := shapes.MulSat(x.elems(), shapes.MulSat(w.shape[1], shapes.Prod(wa.kernel)))
	var extra int64
	if n.input(2) != nil {
		extra = shapes.Prod(out)
	}
	n.macs(macs, extra)
	return nil
}

func inferPool(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	if x.rank() < 3 {
		return fmt.Errorf("input %v must be N×C×spatial", x.shape)
	}
	k := x.rank() - 2
	if !n.attrs.Has("kernel_shape") {
		return fmt.Errorf("%s has no kernel_shape", n.op)
	}
	wa, err := n.window(k, nil)
	if err != nil {
		return err
	}
	sp, err := wa.outSize(x.shape[2:], n.attrs.Int("ceil_mode", 0) != 0)
	if err != nil {
		return err
	}
	out := append([]int64{x.shape[0], x.shape[1]}, sp...)
	if err := n.set(0, x.dtype, out); err != nil {
		return err
	}
	if err := n.set(1, graph.Int64, shapes.Clone(out)); err != nil {
		return err
	}
	n.flops(shapes.MulSat(shapes.Prod(out), shapes.Prod(wa.kernel)))
	return nil
}

func inferGlobalPool(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	if x.rank() < 2 {
		return fmt.Errorf("input %v must be N×C×spatial", x.shape)
	}
	out := shapes.Clone(x.shape)
	for i := 2; i < len(out); i++ {
		out[i] = 1
	}
	n.flops(x.elems())
	return n.set(0, x.dtype, out)
}

func inferMaxUnpool(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	if s := n.input(2); s != nil {
		shape, ok := n.ints(2)
		if !ok {
			return errNeedValue
		}
		return n.set(0, x.dtype, shapes.Clone(shape))
	}
	k := x.rank() - 2
	if k < 1 {
		return fmt.Errorf("input %v must be N×C×spatial", x.shape)
	}
	wa, err := n.window(k, nil)
	if err != nil {
		return err
	}
	out := shapes.Clone(x.shape)
	for i := range k {
		out[2+i] = (x.shape[2+i]-1)*wa.strides[i] + wa.kernel[i] - wa.pads[i] - wa.pads[i+k]
	}
	return n.set(0, x.dtype, out)
}
