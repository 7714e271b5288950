package cbc

import (
	"math"
	"testing"
)

// TestKnapsack solves a 0/1 knapsack whose optimum is known by hand:
// weights 2, 3, 4, 5, capacity 5, values 3, 4, 5, 6: take items 0 and 1
// for value 7 (maximised as a minimisation of -value).
func TestKnapsack(t *testing.T) {
	w := []float64{2, 3, 4, 5}
	v := []float64{3, 4, 5, 6}
	p := &Problem{RowLower: []float64{-Inf}, RowUpper: []float64{5}, MaxSeconds: 10}
	for j := range w {
		p.Cols = append(p.Cols, []Entry{{0, w[j]}})
		p.ColLower = append(p.ColLower, 0)
		p.ColUpper = append(p.ColUpper, 1)
		p.Obj = append(p.Obj, -v[j])
		p.Integer = append(p.Integer, j)
	}
	p.Start = []float64{0, 0, 0, 1} // feasible, value 6
	sol, err := Solve(p)
	if err != nil {
		t.Fatal(err)
	}
	if sol.Status != Optimal || math.Abs(sol.Objective+7) > 1e-9 || math.Abs(sol.Bound+7) > 1e-6 {
		t.Fatalf("got %+v, want optimal -7", sol)
	}
	want := []float64{1, 1, 0, 0}
	for j := range want {
		if math.Abs(sol.X[j]-want[j]) > 1e-6 {
			t.Fatalf("x = %v, want %v", sol.X, want)
		}
	}
}

func TestInfeasible(t *testing.T) {
	// x >= 2 and x <= 1.
	p := &Problem{
		Cols: [][]Entry{{{0, 1}}}, ColLower: []float64{0}, ColUpper: []float64{1},
		Obj: []float64{1}, RowLower: []float64{2}, RowUpper: []float64{Inf}, Integer: []int{0},
	}
	sol, err := Solve(p)
	if err != nil {
		t.Fatal(err)
	}
	if sol.Status != Infeasible {
		t.Fatalf("status %v, want infeasible", sol.Status)
	}
}

func TestBadDimensions(t *testing.T) {
	if _, err := Solve(&Problem{Cols: [][]Entry{{}}}); err == nil {
		t.Fatal("accepted a problem without bounds")
	}
}
