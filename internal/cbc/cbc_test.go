package cbc

import (
	"math"
	"testing"
	"time"
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

// TestOverrun: a solve that runs past its limit and grace is stopped and
// says so; one within them returns its solution from the child process.
func TestOverrun(t *testing.T) {
	knapsack := func() *Problem {
		p := &Problem{RowLower: []float64{-Inf}, RowUpper: []float64{5}, MaxSeconds: 10}
		for j, w := range []float64{2, 3, 4, 5} {
			p.Cols = append(p.Cols, []Entry{{0, w}})
			p.ColLower = append(p.ColLower, 0)
			p.ColUpper = append(p.ColUpper, 1)
			p.Obj = append(p.Obj, -float64(j+3))
			p.Integer = append(p.Integer, j)
		}
		return p
	}
	sol, err := solveApart(knapsack())
	if err != nil {
		t.Fatal(err)
	}
	if sol.Overran || sol.Status != Optimal || math.Abs(sol.Objective+7) > 1e-9 {
		t.Fatalf("got %+v, want optimal -7 from the child", sol)
	}
	// A limit of 1 ns and no grace: the child is killed before it can
	// even read the problem.
	defer func(g func(float64) time.Duration) { overrunGrace = g }(overrunGrace)
	overrunGrace = func(float64) time.Duration { return 0 }
	p := knapsack()
	p.MaxSeconds = 1e-9
	sol, err = solveApart(p)
	if err != nil {
		t.Fatal(err)
	}
	if !sol.Overran || sol.Status != NoSolution || sol.X != nil {
		t.Fatalf("got %+v, want a stopped solve with no solution", sol)
	}
}
