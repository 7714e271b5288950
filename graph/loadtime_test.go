package graph

import "testing"

func TestLoadTimeOps(t *testing.T) {
	g := New("fold", 8, 16)
	ten := func(name string, kind TensorKind, shape ...int64) TensorID {
		id, err := g.AddTensor(Tensor{Name: name, DType: Float32, Shape: shape, ShapeKnown: true, Kind: kind, Producer: NoOp})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	op := func(name, typ string, ins []TensorID, outs ...TensorID) {
		if _, err := g.AddOp(Op{Name: name, Type: typ, Inputs: ins, Outputs: outs}); err != nil {
			t.Fatal(err)
		}
	}
	x := ten("x", Input, 1, 64)
	w := ten("w", Parameter, 32, 64)
	wt := ten("wt", Activation, 64, 32)
	shape := ten("shape", Activation, 2)
	dim := ten("dim", Activation, 1)
	y := ten("y", Activation, 1, 32)
	noise := ten("noise", Activation, 1, 32)
	z := ten("z", Activation, 1, 32)
	op("transpose_w", "Transpose", []TensorID{w}, wt)  // a weight: folded
	op("shape_x", "Shape", []TensorID{x}, shape)       // a known shape: folded
	op("gather_dim", "Gather", []TensorID{shape}, dim) // arithmetic on it: folded
	op("matmul", "MatMul", []TensorID{x, wt}, y)       // reads the input: runs
	op("noise", "RandomNormal", nil, noise)            // random: runs
	op("add", "Add", []TensorID{y, noise}, z)
	k := ten("k", Activation, 1)
	kk := ten("kk", Activation, 1)
	op("k", "Constant", nil, k)                 // a constant: folded
	op("double_k", "Add", []TensorID{k, k}, kk) // on it: folded
	src := ten("src", Activation, 8)
	op("source", "Compute", nil, src) // work from nothing: runs
	want := []bool{true, true, true, false, false, false, true, true, false}
	got := g.LoadTimeOps()
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: load time %v, want %v", g.Ops[i].Name, got[i], want[i])
		}
	}
}
