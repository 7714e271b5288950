package placer

import (
	"github.com/opplace/opplace/internal/cbc"
)

// minimise solves the linear programme p (min p.Obj·x within its row and
// column bounds) with Clp's dual simplex, and returns x. m-sct's and
// m-sct-baechi's favourite-child LPs share it.
func minimise(p *cbc.Problem) ([]float64, error) {
	sol, err := cbc.SolveLP(p)
	if err != nil {
		return nil, err
	}
	return sol.X, nil
}
