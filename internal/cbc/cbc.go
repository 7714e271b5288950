// Package cbc is a thin cgo layer over COIN-OR Cbc's C interface
// (Debian coinor-libcbc-dev): load a mixed-integer program in column form,
// mark integer columns, give a starting solution and a time limit, solve,
// and read back the incumbent and the proven bound. SolveLP solves a
// linear program with Clp's dual simplex, through Clp's C interface.
//
// Only what opplace's exact placer, tensor-parallel splits and linear
// programs need is wrapped. Every call copies its
// arguments into C memory, so Go slices are never retained by the solver.
package cbc

// #cgo pkg-config: cbc
// #include <stdlib.h>
// #include <coin/Cbc_C_Interface.h>
// #include <coin/Clp_C_Interface.h>
import "C"

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"unsafe"
)

// solving serialises Solve: Cbc's C interface parses parameters through
// its command-line reader, whose state is global, so two solves at once
// garble each other's settings (and print the garble on stdout).
var solving sync.Mutex

// Inf is the bound meaning "no bound".
var Inf = math.Inf(1)

// Problem is a minimisation problem: minimise Obj·x subject to
// RowLower <= A x <= RowUpper and ColLower <= x <= ColUpper, with the
// columns listed in Integer taking integer values.
type Problem struct {
	// Cols holds A column by column: Cols[j] lists the nonzeros of column j.
	Cols               [][]Entry
	ColLower, ColUpper []float64
	Obj                []float64
	RowLower, RowUpper []float64
	Integer            []int
	// Start, if not nil, is a feasible solution the solver starts from.
	Start []float64
	// MaxSeconds limits the solve; zero means no limit. A search stopped
	// by time depends on the machine's speed; MaxNodes does not.
	MaxSeconds float64
	// MaxNodes limits the branch-and-bound nodes; zero means no limit.
	MaxNodes int
	// NoCuts turns Cbc's cut generators off: weaker bounds, but a root
	// node that costs one LP instead of seconds on big-M models.
	NoCuts bool
	// RelaxFirst solves the linear relaxation first (Clp's dual simplex,
	// under MaxSeconds): when its optimum is integral it is the
	// program's, returned as Optimal without Cbc's cuts, heuristics and
	// search, which cost several times the LP on programs whose
	// relaxation is tight (shard's, about 4 s instead of 0.7 s on
	// DenseNet-121's). Otherwise Cbc solves the program as without it.
	RelaxFirst bool
}

// Entry is one nonzero of a column.
type Entry struct {
	Row   int
	Value float64
}

// Status says how a solve ended.
type Status int

const (
	// Optimal: the incumbent is proven optimal.
	Optimal Status = iota
	// Feasible: the time limit stopped the search with an incumbent.
	Feasible
	// Infeasible: the problem has no solution.
	Infeasible
	// NoSolution: the search stopped before finding any solution.
	NoSolution
)

func (s Status) String() string {
	return [...]string{"optimal", "stopped at its node or time limit", "infeasible", "no solution found"}[s]
}

// Solution is what Solve returns.
type Solution struct {
	Status Status
	// X is the incumbent (nil without one); Objective its value.
	X         []float64
	Objective float64
	// Bound is the best proven lower bound on the objective.
	Bound float64
	// Overran says Cbc ran past its time limit (by more than
	// overrunGrace allows) and was stopped: Status is NoSolution.
	Overran bool
}

// Solve runs Cbc on p. A large problem with a time limit runs in a child
// process (see solveApart), stopped when it overruns the limit.
func Solve(p *Problem) (*Solution, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	if p.MaxSeconds > 0 && p.nonzeros() >= apartNonzeros {
		sol, err := solveApart(p)
		if !errors.Is(err, errNoChild) {
			return sol, err
		}
	}
	return solveHere(p)
}

// apartNonzeros is the size from which a solve with a time limit runs in
// a child process. A child costs about 15 ms (starting this executable),
// which the tensor strategy's programs (up to about 3,100 nonzeros, 40 of
// them for GPT-2 XL) would pay for nothing: an LP that small solves in
// milliseconds. The solves that overran had from 50,000 rows up.
const apartNonzeros = 10_000

// nonzeros counts the constraint matrix's nonzeros.
func (p *Problem) nonzeros() int {
	n := 0
	for _, c := range p.Cols {
		n += len(c)
	}
	return n
}

// check reports a problem whose arrays disagree in length.
func (p *Problem) check() error {
	nc, nr := len(p.Cols), len(p.RowLower)
	if len(p.ColLower) != nc || len(p.ColUpper) != nc || len(p.Obj) != nc || len(p.RowUpper) != nr {
		return errors.New("cbc: inconsistent problem dimensions")
	}
	if p.Start != nil && len(p.Start) != nc {
		return errors.New("cbc: start solution has the wrong length")
	}
	for j, c := range p.Cols {
		for _, e := range c {
			if e.Row < 0 || e.Row >= nr {
				return fmt.Errorf("cbc: column %d has row %d of %d", j, e.Row, nr)
			}
		}
	}
	return nil
}

// solveHere runs Cbc on p in this process.
// arrays is a problem in C memory, as Cbc's and Clp's loadProblem take
// it: the matrix in compressed column form, the bounds and the objective.
type arrays struct {
	start, index                           *C.int
	value, collb, colub, obj, rowlb, rowub *C.double
}

// load copies p into C memory, in one pass (a column at a time through
// a C++ matrix's appendCol costs a reallocation per column: seconds on
// m-SCT's LP of GPT-2 XL).
func load(p *Problem) *arrays {
	nc := len(p.Cols)
	nnz := p.nonzeros()
	a := &arrays{start: cInts(nc + 1), index: cInts(max(nnz, 1)), value: cDoubles(max(nnz, 1))}
	k := 0
	for j, c := range p.Cols {
		setInt(a.start, j, k)
		for _, e := range c {
			setInt(a.index, k, e.Row)
			setDouble(a.value, k, e.Value)
			k++
		}
	}
	setInt(a.start, nc, k)
	a.collb, a.colub, a.obj = cCopy(p.ColLower), cCopy(p.ColUpper), cCopy(p.Obj)
	a.rowlb, a.rowub = cCopy(p.RowLower), cCopy(p.RowUpper)
	return a
}

// free releases a's C memory.
func (a *arrays) free() {
	C.free(unsafe.Pointer(a.start))
	C.free(unsafe.Pointer(a.index))
	for _, ptr := range []*C.double{a.value, a.collb, a.colub, a.obj, a.rowlb, a.rowub} {
		C.free(unsafe.Pointer(ptr))
	}
}

// SolveLP solves p as a linear program (Integer, Start and the limits on
// nodes and cuts ignored; MaxSeconds kept) with Clp's dual simplex, and
// returns its optimum, or an error saying Clp proved none. Clp's models
// are independent, so LPs solve side by side, unlike Solve's programs.
func SolveLP(p *Problem) (*Solution, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	a := load(p)
	defer a.free()
	sol, status := dual(p, a)
	if sol == nil {
		return nil, fmt.Errorf("Clp status %d, not optimal", status)
	}
	return sol, nil
}

func solveHere(p *Problem) (*Solution, error) {
	solving.Lock()
	defer solving.Unlock()
	nc, nr := len(p.Cols), len(p.RowLower)
	a := load(p)
	defer a.free()

	if p.RelaxFirst {
		if sol := relaxed(p, a); sol != nil {
			return sol, nil
		}
	}
	m := C.Cbc_newModel()
	defer C.Cbc_deleteModel(m)
	C.Cbc_loadProblem(m, C.int(nc), C.int(nr), (*C.CoinBigIndex)(unsafe.Pointer(a.start)), a.index, a.value, a.collb, a.colub, a.obj, a.rowlb, a.rowub)
	for _, j := range p.Integer {
		C.Cbc_setInteger(m, C.int(j))
	}
	C.Cbc_setLogLevel(m, 0)
	param(m, "log", "0")
	param(m, "slog", "0")
	param(m, "threads", "1") // deterministic search
	param(m, "timeMode", "elapsed")
	// Prove optimality exactly, so tie-breaking terms in the objective
	// decide between equal solutions.
	param(m, "ratioGap", "0")
	param(m, "allowableGap", "1e-9")
	if p.NoCuts {
		param(m, "cuts", "off")
	}
	if p.Start != nil {
		// With a MIP start, Cbc's preprocessing crashed (a null pointer
		// inside Cbc_solve) or claimed a model proven infeasible that the
		// start itself satisfies, when the time limit fell inside it:
		// seen on the ilp placer's models with limits of 0.3-0.5 s.
		param(m, "preprocess", "off")
	}
	if p.MaxSeconds > 0 {
		C.Cbc_setMaximumSeconds(m, C.double(p.MaxSeconds))
	}
	if p.MaxNodes > 0 {
		param(m, "maxNodes", fmt.Sprint(p.MaxNodes))
	}
	if p.Start != nil {
		idx := cInts(nc)
		defer C.free(unsafe.Pointer(idx))
		for j := 0; j < nc; j++ {
			setInt(idx, j, j)
		}
		vals := cCopy(p.Start)
		defer C.free(unsafe.Pointer(vals))
		C.Cbc_setMIPStartI(m, C.int(nc), idx, vals)
	}
	C.Cbc_solve(m)

	sol := &Solution{Bound: float64(C.Cbc_getBestPossibleObjValue(m))}
	switch {
	case C.Cbc_isProvenInfeasible(m) != 0:
		sol.Status = Infeasible
		return sol, nil
	case C.Cbc_isProvenOptimal(m) != 0:
		sol.Status = Optimal
	default:
		sol.Status = Feasible
	}
	if C.Cbc_numberSavedSolutions(m) == 0 && sol.Status != Optimal {
		sol.Status = NoSolution
		return sol, nil
	}
	x := C.Cbc_getColSolution(m)
	if x == nil {
		sol.Status = NoSolution
		return sol, nil
	}
	sol.X = make([]float64, nc)
	for j := range sol.X {
		sol.X[j] = getDouble(x, j)
	}
	sol.Objective = float64(C.Cbc_getObjValue(m))
	if sol.Status == Optimal {
		sol.Bound = sol.Objective
	}
	return sol, nil
}

// integral is the distance from a whole number within which a relaxed
// solution's integer column counts as whole (Cbc's integer tolerance).
const integral = 1e-6

// relaxed solves p's linear relaxation, loaded in a, and returns its
// optimum when every integer column is
// integral there: nil when it is not, or when the LP did not reach a
// proven optimum (time limit, numerical trouble).
func relaxed(p *Problem, a *arrays) *Solution {
	sol, _ := dual(p, a)
	if sol == nil {
		return nil
	}
	for _, j := range p.Integer {
		if v := sol.X[j]; math.Abs(v-math.Round(v)) > integral {
			return nil
		}
	}
	return sol
}

// dual solves the linear relaxation of p, loaded in a, with Clp's dual
// simplex within p.MaxSeconds: its optimum, or nil and Clp's status when
// Clp proved none.
func dual(p *Problem, a *arrays) (*Solution, int) {
	nc, nr := len(p.Cols), len(p.RowLower)
	m := C.Clp_newModel()
	defer C.Clp_deleteModel(m)
	C.Clp_setLogLevel(m, 0)
	C.Clp_loadProblem(m, C.int(nc), C.int(nr), (*C.CoinBigIndex)(unsafe.Pointer(a.start)), a.index, a.value, a.collb, a.colub, a.obj, a.rowlb, a.rowub)
	if p.MaxSeconds > 0 {
		C.Clp_setMaximumSeconds(m, C.double(p.MaxSeconds))
	}
	C.Clp_dual(m, 0)
	x := C.Clp_getColSolution(m)
	if C.Clp_isProvenOptimal(m) == 0 || x == nil {
		return nil, int(C.Clp_status(m))
	}
	sol := &Solution{Status: Optimal, X: make([]float64, nc), Objective: float64(C.Clp_objectiveValue(m))}
	for j := range sol.X {
		sol.X[j] = getDouble(x, j)
	}
	sol.Bound = sol.Objective
	return sol, 0
}

func param(m unsafe.Pointer, name, value string) {
	cn, cv := C.CString(name), C.CString(value)
	C.Cbc_setParameter(m, cn, cv)
	C.free(unsafe.Pointer(cn))
	C.free(unsafe.Pointer(cv))
}

func cInts(n int) *C.int { return (*C.int)(C.malloc(C.size_t(n) * C.size_t(unsafe.Sizeof(C.int(0))))) }

func cDoubles(n int) *C.double {
	return (*C.double)(C.malloc(C.size_t(max(n, 1)) * C.size_t(unsafe.Sizeof(C.double(0)))))
}

func cCopy(v []float64) *C.double {
	p := cDoubles(len(v))
	for i, x := range v {
		setDouble(p, i, x)
	}
	return p
}

func setInt(p *C.int, i, v int) {
	*(*C.int)(unsafe.Add(unsafe.Pointer(p), uintptr(i)*unsafe.Sizeof(C.int(0)))) = C.int(v)
}

func setDouble(p *C.double, i int, v float64) {
	*(*C.double)(unsafe.Add(unsafe.Pointer(p), uintptr(i)*unsafe.Sizeof(C.double(0)))) = C.double(v)
}

func getDouble(p *C.double, i int) float64 {
	return float64(*(*C.double)(unsafe.Add(unsafe.Pointer(p), uintptr(i)*unsafe.Sizeof(C.double(0)))))
}
