package graph

import "testing"

func TestAutocast(t *testing.T) {
	for typ, want := range map[string]AutocastClass{
		"MatMul": AutocastHalf, "Gemm": AutocastHalf, "Conv": AutocastHalf, "ConvTranspose": AutocastHalf,
		"MatMulGrad": AutocastHalf, "BatchMatMulV2": AutocastHalf,
		"Softmax": AutocastFloat32, "LayerNormalization": AutocastFloat32, "ReduceSum": AutocastFloat32,
		"Exp": AutocastFloat32, "Pow": AutocastFloat32, "SoftmaxGrad": AutocastFloat32,
		"Relu": AutocastPromote, "Add": AutocastPromote, "BatchNormalization": AutocastPromote,
		"ReduceMean": AutocastPromote, "Sum": AutocastPromote, "Cast": AutocastPromote,
	} {
		if got := Autocast(typ); got != want {
			t.Errorf("Autocast(%s) = %d, want %d", typ, got, want)
		}
	}
	if !Float16.IsHalf() || !BFloat16.IsHalf() || Float32.IsHalf() || Int16.IsHalf() {
		t.Error("IsHalf")
	}
}
