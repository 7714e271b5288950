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
	p := knapsack(5)
	p.MaxSeconds = 10
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

// knapsack is the 0/1 knapsack of weights 2, 3, 4, 5 and values 3, 4,
// 5, 6 under capacity, as the minimisation of -value.
func knapsack(capacity float64) *Problem {
	w := []float64{2, 3, 4, 5}
	v := []float64{3, 4, 5, 6}
	p := &Problem{RowLower: []float64{-Inf}, RowUpper: []float64{capacity}}
	for j := range w {
		p.Cols = append(p.Cols, []Entry{{0, w[j]}})
		p.ColLower = append(p.ColLower, 0)
		p.ColUpper = append(p.ColUpper, 1)
		p.Obj = append(p.Obj, -v[j])
		p.Integer = append(p.Integer, j)
	}
	return p
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

// TestRelaxFirst solves with RelaxFirst a program whose relaxation is
// integral (an assignment: the LP's optimum is the program's) and one
// whose relaxation is not (the knapsack of TestKnapsack, whose LP takes
// a fraction of item 2): both must come back optimal with the integer
// optimum.
func TestRelaxFirst(t *testing.T) {
	// Assign 3 workers to 3 jobs, cost[w][j]; the optimum is w0-j1,
	// w1-j0, w2-j2 at 2+3+1 = 6.
	cost := [3][3]float64{{4, 2, 8}, {3, 7, 5}, {9, 6, 1}}
	assign := &Problem{RelaxFirst: true, MaxSeconds: 10}
	for w := range 3 {
		for j := range 3 {
			assign.Cols = append(assign.Cols, []Entry{{w, 1}, {3 + j, 1}})
			assign.ColLower = append(assign.ColLower, 0)
			assign.ColUpper = append(assign.ColUpper, 1)
			assign.Obj = append(assign.Obj, cost[w][j])
			assign.Integer = append(assign.Integer, len(assign.Integer))
		}
	}
	for range 6 {
		assign.RowLower = append(assign.RowLower, 1)
		assign.RowUpper = append(assign.RowUpper, 1)
	}
	knap := &Problem{RowLower: []float64{-Inf}, RowUpper: []float64{5}, MaxSeconds: 10, RelaxFirst: true}
	for j, w := range []float64{2, 3, 4, 5} {
		knap.Cols = append(knap.Cols, []Entry{{0, w}})
		knap.ColLower = append(knap.ColLower, 0)
		knap.ColUpper = append(knap.ColUpper, 1)
		knap.Obj = append(knap.Obj, -[]float64{3, 4, 5, 6}[j])
		knap.Integer = append(knap.Integer, j)
	}
	for _, tc := range []struct {
		name string
		p    *Problem
		obj  float64
		x    []float64
	}{
		{"assignment", assign, 6, []float64{0, 1, 0, 1, 0, 0, 0, 0, 1}},
		{"knapsack", knap, -7, []float64{1, 1, 0, 0}},
	} {
		sol, err := Solve(tc.p)
		if err != nil {
			t.Fatal(err)
		}
		if sol.Status != Optimal || math.Abs(sol.Objective-tc.obj) > 1e-9 {
			t.Fatalf("%s: got %v at %g, want optimal at %g", tc.name, sol.Status, sol.Objective, tc.obj)
		}
		for j := range tc.x {
			if math.Abs(sol.X[j]-tc.x[j]) > 1e-6 {
				t.Fatalf("%s: x = %v, want %v", tc.name, sol.X, tc.x)
			}
		}
	}
}

// TestSolveLP solves a knapsack's linear relaxation (integer columns
// relaxed), whose optimum is known by hand: capacity 6, items taken by
// value per weight (1.5, 1.33, 1.25, 1.2), the first two whole and a
// quarter of the third, for 3 + 4 + 1.25 = 8.25 (maximised as a
// minimisation of -value). An infeasible
// LP is an error, and so is a problem whose arrays disagree.
func TestSolveLP(t *testing.T) {
	sol, err := SolveLP(knapsack(6))
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{1, 1, 0.25, 0}
	if sol.Status != Optimal || math.Abs(sol.Objective+8.25) > 1e-9 {
		t.Fatalf("got %+v, want optimal -8.25", sol)
	}
	for j := range want {
		if math.Abs(sol.X[j]-want[j]) > 1e-9 {
			t.Fatalf("x = %v, want %v", sol.X, want)
		}
	}
	infeasible := &Problem{
		Cols: [][]Entry{{{0, 1}}}, ColLower: []float64{0}, ColUpper: []float64{1},
		Obj: []float64{1}, RowLower: []float64{2}, RowUpper: []float64{Inf},
	}
	if _, err := SolveLP(infeasible); err == nil {
		t.Fatal("an infeasible LP solved")
	}
	if _, err := SolveLP(&Problem{Cols: [][]Entry{{}}}); err == nil {
		t.Fatal("accepted a problem without bounds")
	}
}
