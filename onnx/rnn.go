package onnx

import (
	"fmt"

	"github.com/opplace/opplace/internal/shapes"
)

// Recurrent layers. The gate projections X·Wᵀ and H·Rᵀ are matrix
// products, so they count as MACs: seq·dirs·batch·gates·hidden·(input+hidden).
// Gate nonlinearities and state updates add elementwise FLOPs per hidden
// unit and step: 5 for RNN, 15 for GRU, 20 for LSTM.

func init() {
	register("", inferRNN(1, 5), "RNN")
	register("", inferRNN(3, 15), "GRU")
	register("", inferRNN(4, 20), "LSTM")
}

func inferRNN(gates, elementwise int64) inferFunc {
	return func(n *node) error {
		x, err := n.need(0)
		if err != nil {
			return err
		}
		w, err := n.need(1)
		if err != nil {
			return err
		}
		r, err := n.need(2)
		if err != nil {
			return err
		}
		if x.rank() != 3 || w.rank() != 3 || r.rank() != 3 {
			return fmt.Errorf("X %v, W %v and R %v must be 3-D", x.shape, w.shape, r.shape)
		}
		layout := n.attrs.Int("layout", 0)
		seq, batch, in := x.shape[0], x.shape[1], x.shape[2]
		if layout != 0 {
			seq, batch = batch, seq
		}
		dirs := int64(1)
		if n.attrs.String("direction", "forward") == "bidirectional" {
			dirs = 2
		}
		hidden := n.attrs.Int("hidden_size", r.shape[2])
		if w.shape[0] != dirs || w.shape[1] != gates*hidden || w.shape[2] != in || r.shape[1] != gates*hidden || r.shape[2] != hidden {
			return fmt.Errorf("W %v and R %v do not fit %d direction(s), hidden size %d, input size %d", w.shape, r.shape, dirs, hidden, in)
		}
		y := []int64{seq, dirs, batch, hidden}
		h := []int64{dirs, batch, hidden}
		if layout != 0 {
			y = []int64{batch, seq, dirs, hidden}
			h = []int64{batch, dirs, hidden}
		}
		for i, s := range [][]int64{y, h, h} {
			if err := n.set(i, x.dtype, shapes.Clone(s)); err != nil {
				return err
			}
		}
		steps := shapes.MulSat(shapes.MulSat(seq, dirs), batch)
		macs := shapes.MulSat(steps, shapes.MulSat(gates*hidden, in+hidden))
		n.macs(macs, shapes.MulSat(steps, shapes.MulSat(elementwise, hidden)))
		return nil
	}
}
