package train_test

import (
	"reflect"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/train"
)

// TestSavedForBackward builds attention's score chain, q[k] -> MatMul ->
// Div(constant) -> Add(constant mask) -> Softmax -> MatMul(v), and checks
// that each gradient reads what PyTorch's autograd saves: the products
// their other operand, the softmax its output, the scaling and the mask
// nothing. So of the three score-sized tensors only the softmax's output
// waits for the backward pass.
func TestSavedForBackward(t *testing.T) {
	b := typed{t, graph.New("attention", 0, 0)}
	x := b.tensor("x", graph.Input, 4, 8)
	wq, wk, wv := b.tensor("Wq", graph.Parameter, 8, 8), b.tensor("Wk", graph.Parameter, 8, 4), b.tensor("Wv", graph.Parameter, 8, 8)
	scale := b.tensor("scale", graph.Constant)
	mask := b.tensor("mask", graph.Constant, 4, 4)
	q, k, v := b.tensor("q", graph.Activation, 4, 8), b.tensor("k", graph.Activation, 8, 4), b.tensor("v", graph.Activation, 4, 8)
	s, sd, sm, p, o := b.tensor("scores", graph.Activation, 4, 4), b.tensor("scaled", graph.Activation, 4, 4),
		b.tensor("masked", graph.Activation, 4, 4), b.tensor("probs", graph.Activation, 4, 4), b.tensor("out", graph.Activation, 4, 8)
	b.op("q", "MatMul", 512, q, x, wq)
	b.op("k", "MatMul", 256, k, wk, x) // k = Wkᵀx-like: x second, both orders covered
	b.op("v", "MatMul", 512, v, x, wv)
	b.op("scores", "MatMul", 256, s, q, k)
	b.op("scaled", "Div", 16, sd, s, scale)
	b.op("masked", "Add", 16, sm, sd, mask)
	b.op("probs", "Softmax", 64, p, sm)
	b.op("out", "MatMul", 256, o, p, v)
	b.g.Inputs = []graph.TensorID{x}
	b.g.Outputs = []graph.TensorID{o}
	g, _, err := train.Build(b.g, train.Options{Optimizer: train.SGD})
	if err != nil {
		t.Fatal(err)
	}
	saved := func(name string) []string {
		var got []string
		for _, in := range op(t, g, name+"/grad").Inputs {
			if tt := &g.Tensors[in]; tt.Kind != graph.Activation || tt.Producer == graph.NoOp || g.Ops[tt.Producer].Phase == graph.Forward {
				got = append(got, tt.Name)
			}
		}
		return got
	}
	for _, tc := range []struct {
		op   string
		want []string
	}{
		{"out", []string{"probs", "v"}}, // each operand for the other's gradient
		{"probs", []string{"probs"}},    // softmax: its output
		{"masked", nil},                 // a sum: nothing
		{"scaled", nil},                 // divided by a constant: nothing (the constant is not read)
		{"scores", []string{"q", "k"}},  // both operands need gradients
		{"q", []string{"x"}},            // x needs no gradient, so Wq is not saved
		{"k", []string{"x"}},            // the same with the operands swapped
	} {
		if got := saved(tc.op); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s/grad reads %v of the forward pass, want %v", tc.op, got, tc.want)
		}
	}
}
