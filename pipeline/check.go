package pipeline

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/opplace/opplace/graph"
)

// CheckEnv is the environment variable that switches the check between
// stages: "1" on, "0" off. Unset, the check is on in test binaries only.
const CheckEnv = "OPPLACE_CHECK"

// CheckStages says whether the driver runs graph.Check on the graph after
// every stage that writes it (a stage whose writes name model or
// model.Graph), as Go's compiler checks its SSA between passes: on in
// test binaries and where OPPLACE_CHECK=1, off otherwise, so plans and
// timings are as without it. A program may set it before Run.
var CheckStages = checkDefault(os.Getenv(CheckEnv), testing.Testing())

func checkDefault(env string, inTest bool) bool {
	switch env {
	case "1":
		return true
	case "0":
		return false
	}
	return inTest
}

// StageCheckError is a graph a stage left breaking an invariant of
// graph.Check: a bug in that stage, reported as an internal error.
type StageCheckError struct {
	Stage string
	Err   error
}

func (e *StageCheckError) Error() string {
	return fmt.Sprintf("internal error: stage %s left a broken graph: %v (a bug in opplace; please report it with the command line)", e.Stage, e.Err)
}

func (e *StageCheckError) Unwrap() error { return e.Err }

// checkAfter checks the graph a stage wrote: graph.Check, and on a fused
// graph the maps to the original ops too.
func checkAfter(st stage, r *run) error {
	if !st.writesGraph() || r.model == nil {
		return nil
	}
	var err error
	if r.fused != nil && r.model.Graph == r.fused.coarse.Graph {
		err = r.fused.coarse.Check()
	} else {
		err = graph.Check(r.model.Graph)
	}
	if err != nil {
		return &StageCheckError{Stage: st.name, Err: err}
	}
	return nil
}

// writesGraph reports whether the stage writes the graph: the model, the
// graph or a field of its ops.
func (st stage) writesGraph() bool {
	for _, w := range strings.Fields(st.writes) {
		if w == "model" || w == "model.Graph" || strings.HasPrefix(w, "model.Graph.") {
			return true
		}
	}
	return false
}
