package onnx

import (
	"fmt"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

// Less common standard ops: losses, signal processing, image sampling,
// and the opset-23 transformer ops (Attention, RMSNormalization,
// RotaryEmbedding).

func init() {
	register("", inferLoss, "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")
	register("", inferDet, "Det")
	register("", inferGridSample, "GridSample")
	register("", inferRoiAlign, "RoiAlign")
	register("", inferWindow, "BlackmanWindow", "HammingWindow", "HannWindow")
	register("", inferDFT, "DFT")
	register("", inferSTFT, "STFT")
	register("", inferMelWeightMatrix, "MelWeightMatrix")
	register("", inferCol2Im, "Col2Im")
	register("", inferCenterCropPad, "CenterCropPad")
	register("", inferAffineGrid, "AffineGrid")
	register("", inferAttention, "Attention")
	register("", inferSameShape(6), "RMSNormalization")
	register("", inferSameShape(6), "RotaryEmbedding")
}

func inferLoss(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	target, err := n.need(1)
	if err != nil {
		return err
	}
	if x.rank() < 2 || target.rank() != x.rank()-1 {
		return fmt.Errorf("scores %v and target %v must be N×C×d… and N×d…", x.shape, target.shape)
	}
	out := []int64{}
	if n.attrs.String("reduction", "mean") == "none" {
		out = shapes.Clone(target.shape)
	}
	if err := n.set(0, x.dtype, out); err != nil {
		return err
	}
	cost := int64(2)
	if n.op == "SoftmaxCrossEntropyLoss" {
		cost = 7
	}
	n.flops(shapes.MulSat(cost, x.elems()))
	return n.set(1, x.dtype, shapes.Clone(x.shape))
}

func inferDet(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	r := x.rank()
	if r < 2 || x.shape[r-1] != x.shape[r-2] {
		return fmt.Errorf("input %v is not a batch of square matrices", x.shape)
	}
	m := x.shape[r-1]
	n.flops(shapes.MulSat(shapes.Prod(x.shape[:r-2]), shapes.MulSat(m, shapes.MulSat(m, m))))
	return n.set(0, x.dtype, shapes.Clone(x.shape[:r-2]))
}

func inferGridSample(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	grid, err := n.need(1)
	if err != nil {
		return err
	}
	if x.rank() < 3 || grid.rank() != x.rank() || grid.shape[0] != x.shape[0] {
		return fmt.Errorf("input %v and grid %v do not fit", x.shape, grid.shape)
	}
	out := append([]int64{x.shape[0], x.shape[1]}, grid.shape[1:grid.rank()-1]...)
	if err := n.set(0, x.dtype, out); err != nil {
		return err
	}
	n.flops(shapes.MulSat(8, shapes.Prod(out)))
	return nil
}

func inferRoiAlign(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	rois, err := n.need(1)
	if err != nil {
		return err
	}
	if x.rank() != 4 || rois.rank() != 2 {
		return fmt.Errorf("input %v and rois %v must be 4-D and 2-D", x.shape, rois.shape)
	}
	out := []int64{rois.shape[0], x.shape[1], n.attrs.Int("output_height", 1), n.attrs.Int("output_width", 1)}
	if err := n.set(0, x.dtype, out); err != nil {
		return err
	}
	ratio := max(n.attrs.Int("sampling_ratio", 0), 2)
	n.flops(shapes.MulSat(shapes.Prod(out), 4*ratio*ratio))
	return nil
}

// scalarInt reads a one-element integer input.
func (n *node) scalarInt(i int) (int64, error) {
	v, ok := n.ints(i)
	if !ok || len(v) != 1 {
		return 0, errNeedValue
	}
	return v[0], nil
}

func inferWindow(n *node) error {
	size, err := n.scalarInt(0)
	if err != nil {
		return err
	}
	n.flops(shapes.MulSat(4, size))
	return n.set(0, graph.DType(n.attrs.Int("output_datatype", int64(graph.Float32))), []int64{size})
}

func inferDFT(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	r := x.rank()
	if r < 3 || x.shape[r-1] < 1 || x.shape[r-1] > 2 {
		return fmt.Errorf("input %v must end in a real (1) or complex (2) axis", x.shape)
	}
	axis := n.attrs.Int("axis", 1)
	if n.opset >= 20 && n.input(2) != nil {
		if axis, err = n.scalarInt(2); err != nil {
			return err
		}
	}
	ax, err := shapes.NormAxis(axis, r)
	if err != nil || ax == r-1 || ax == 0 {
		return fmt.Errorf("axis %d is not a signal axis of %v", axis, x.shape)
	}
	out := shapes.Clone(x.shape)
	if n.input(1) != nil {
		if out[ax], err = n.scalarInt(1); err != nil {
			return err
		}
	}
	length := out[ax]
	if n.attrs.Int("onesided", 0) != 0 {
		out[ax] = out[ax]/2 + 1
	}
	out[r-1] = 2
	if err := n.set(0, x.dtype, out); err != nil {
		return err
	}
	n.flops(shapes.MulSat(shapes.Prod(out), 5*int64(max(1, log2(length)))))
	return nil
}

func log2(v int64) int {
	k := 0
	for v > 1 {
		v >>= 1
		k++
	}
	return k
}

func inferSTFT(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	if x.rank() != 3 {
		return fmt.Errorf("signal %v must be batch×length×(1|2)", x.shape)
	}
	step, err := n.scalarInt(1)
	if err != nil {
		return err
	}
	var frame int64
	switch {
	case n.input(3) != nil:
		if frame, err = n.scalarInt(3); err != nil {
			return err
		}
	case n.input(2) != nil:
		frame = n.in[2].elems()
	default:
		return fmt.Errorf("STFT needs a window or a frame_length")
	}
	if step <= 0 || frame <= 0 || frame > x.shape[1] {
		return fmt.Errorf("frame_step %d and frame_length %d do not fit signal %v", step, frame, x.shape)
	}
	frames := (x.shape[1]-frame)/step + 1
	bins := frame
	if n.attrs.Int("onesided", 1) != 0 {
		bins = frame/2 + 1
	}
	out := []int64{x.shape[0], frames, bins, 2}
	n.flops(shapes.MulSat(shapes.Prod(out), 5*int64(max(1, log2(frame)))))
	return n.set(0, x.dtype, out)
}

func inferMelWeightMatrix(n *node) error {
	mel, err := n.scalarInt(0)
	if err != nil {
		return err
	}
	dft, err := n.scalarInt(1)
	if err != nil {
		return err
	}
	return n.set(0, graph.DType(n.attrs.Int("output_datatype", int64(graph.Float32))), []int64{dft/2 + 1, mel})
}

func inferCol2Im(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	img, ok := n.ints(1)
	if !ok {
		return errNeedValue
	}
	block, ok := n.ints(2)
	if !ok {
		return errNeedValue
	}
	if x.rank() != 3 || len(img) != len(block) || shapes.Prod(block) == 0 || x.shape[1]%shapes.Prod(block) != 0 {
		return fmt.Errorf("input %v does not fit image %v and block %v", x.shape, img, block)
	}
	out := append([]int64{x.shape[0], x.shape[1] / shapes.Prod(block)}, img...)
	n.flops(x.elems())
	return n.set(0, x.dtype, out)
}

func inferCenterCropPad(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	shape, ok := n.ints(1)
	if !ok {
		return errNeedValue
	}
	axes := n.attrs.Ints("axes")
	if axes == nil {
		for i := range x.rank() {
			axes = append(axes, int64(i))
		}
	}
	if len(axes) != len(shape) {
		return fmt.Errorf("shape %v does not match axes %v", shape, axes)
	}
	out := shapes.Clone(x.shape)
	for i, a := range axes {
		ax, err := shapes.NormAxis(a, x.rank())
		if err != nil {
			return err
		}
		out[ax] = shape[i]
	}
	return n.set(0, x.dtype, out)
}

func inferAffineGrid(n *node) error {
	theta, err := n.need(0)
	if err != nil {
		return err
	}
	size, ok := n.ints(1)
	if !ok {
		return errNeedValue
	}
	if len(size) < 3 {
		return fmt.Errorf("size %v must be N×C×spatial", size)
	}
	out := append([]int64{size[0]}, size[2:]...)
	out = append(out, int64(len(size)-2))
	n.flops(shapes.MulSat(2*int64(len(size)-1), shapes.Prod(out)))
	return n.set(0, theta.dtype, out)
}

// inferAttention shapes opset 23's Attention: Q (B×S×hidden or
// B×heads×S×d), K and V likewise; the output follows Q with V's head
// size. MACs: QKᵀ and the weighted sum of V.
func inferAttention(n *node) error {
	q, err := n.need(0)
	if err != nil {
		return err
	}
	k, err := n.need(1)
	if err != nil {
		return err
	}
	v, err := n.need(2)
	if err != nil {
		return err
	}
	if q.rank() != k.rank() || q.rank() != v.rank() || (q.rank() != 3 && q.rank() != 4) {
		return fmt.Errorf("Q %v, K %v and V %v must all be 3-D or 4-D", q.shape, k.shape, v.shape)
	}
	var b, sq, skv, dq, dv, heads int64
	out := shapes.Clone(q.shape)
	if q.rank() == 4 {
		b, heads, sq, dq = q.shape[0], q.shape[1], q.shape[2], q.shape[3]
		skv, dv = k.shape[2], v.shape[3]
		out[3] = dv
	} else {
		heads = n.attrs.Int("q_num_heads", 1)
		kvHeads := n.attrs.Int("kv_num_heads", heads)
		if heads <= 0 || kvHeads <= 0 || q.shape[2]%heads != 0 || v.shape[2]%kvHeads != 0 {
			return fmt.Errorf("head counts %d/%d do not divide Q %v and V %v", heads, kvHeads, q.shape, v.shape)
		}
		b, sq, dq = q.shape[0], q.shape[1], q.shape[2]/heads
		skv, dv = k.shape[1], v.shape[2]/kvHeads
		out[2] = heads * dv
	}
	if past := n.input(4); past != nil && past.rank() == 4 {
		skv += past.shape[2]
	}
	if err := n.set(0, q.dtype, out); err != nil {
		return err
	}
	for i := 1; i <= 2 && i < len(n.out); i++ {
		kv := k
		if i == 2 {
			kv = v
		}
		d := kv.shape[kv.rank()-1]
		if kv.rank() == 3 {
			d = kv.shape[2] / n.attrs.Int("kv_num_heads", heads)
		}
		kvh := heads
		if kv.rank() == 4 {
			kvh = kv.shape[1]
		}
		if err := n.set(i, kv.dtype, []int64{b, kvh, skv, d}); err != nil {
			return err
		}
	}
	if len(n.out) > 3 {
		if err := n.set(3, q.dtype, []int64{b, heads, sq, skv}); err != nil {
			return err
		}
	}
	scores := shapes.MulSat(shapes.MulSat(b, heads), shapes.MulSat(sq, skv))
	n.macs(shapes.AddSat(shapes.MulSat(scores, dq), shapes.MulSat(scores, dv)), shapes.MulSat(5, scores))
	return nil
}
