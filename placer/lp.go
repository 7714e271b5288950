package placer

import (
	"fmt"

	"github.com/lanl/clp"
)

// minimise solves the linear programme min obj·x subject to rows (the
// bounds of each row of the matrix whose columns cols lists, by their
// nonzeros) and bounds (each column's) with Clp's dual simplex, and
// returns x. m-sct's and m-sct-baechi's favourite-child LPs share it.
func minimise(cols [][]clp.Nonzero, rows, bounds []clp.Bounds, obj []float64) ([]float64, error) {
	mat := clp.NewPackedMatrix()
	mat.SetDimensions(len(rows), 0)
	for _, c := range cols {
		mat.AppendColumn(c)
	}
	s := clp.NewSimplex()
	s.LoadProblem(mat, bounds, obj, rows, nil)
	s.SetOptimizationDirection(clp.Minimize)
	if st := s.Dual(clp.NoValuesPass, clp.NoStartFinishOptions); st != clp.Optimal {
		return nil, fmt.Errorf("Clp status %d, not optimal", st)
	}
	return s.PrimalColumnSolution(), nil
}

// MinimiseLP is minimise for other packages' LPs (strategy's lower
// bound).
func MinimiseLP(cols [][]clp.Nonzero, rows, bounds []clp.Bounds, obj []float64) ([]float64, error) {
	return minimise(cols, rows, bounds, obj)
}
