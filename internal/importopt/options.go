// Package importopt holds the options the model importers share (onnx
// and tf bind a model's run-time dimensions, loop trip counts and If
// branches the same way) and the names their messages give them, so that
// neither importer imports the other.
package importopt

import (
	"fmt"
	"maps"
	"slices"

	"github.com/opplace/opplace/internal/shapes"
)

// Options bind what the model leaves to run time: the dynamic dimensions
// of its inputs (precedence, highest first: Shapes, Dims, Batch), the trip
// count of data-dependent loops and the branch an If with a run-time
// condition is costed as.
type Options struct {
	// Dims binds a symbolic dimension (dim_param) everywhere it appears.
	Dims map[string]int64
	// Batch binds the leading dimension of every graph input whose leading
	// dimension is dynamic; 0 leaves it unset.
	Batch int64
	// Shapes sets one input's whole shape.
	Shapes map[string][]int64
	// LoopTrips is the iteration count assumed for a Loop whose trip count
	// is not a constant: its cost is the body's times
	// LoopTrips and its scan outputs get LoopTrips as leading dimension.
	// 0 counts one iteration, marks the cost estimated and leaves the scan
	// outputs unshaped. Either way the import warns.
	LoopTrips int64
	// IfBranch is the branch an If whose condition is not a constant is
	// shaped and costed as: IfThen, IfElse or IfMax (the
	// branch with more FLOPs, then on ties); "" means IfMax. An If whose
	// condition folds to a constant always takes that branch.
	IfBranch string
	// Knobs names these settings in the messages that tell the user to
	// change one; nil names the Options fields (Fields{}), and the opplace
	// command sets its flags.
	Knobs Knobs
}

// Values of Options.IfBranch.
const (
	IfMax  = "max"
	IfThen = "then"
	IfElse = "else"
)

// Validate rejects options that bind nothing real: a negative batch or
// trip count, a dimension that is not positive (a 0 makes every tensor
// that carries it empty, and the step a no-op), an unknown If branch.
// Its errors name the option's meaning, not a command-line flag.
func (o Options) Validate() error {
	if o.Batch < 0 {
		return fmt.Errorf("the batch size %d must be positive (0 leaves it unbound)", o.Batch)
	}
	if o.LoopTrips < 0 {
		return fmt.Errorf("the loop trip count %d must be positive (0 counts one iteration)", o.LoopTrips)
	}
	switch o.IfBranch {
	case "", IfMax, IfThen, IfElse:
	default:
		return fmt.Errorf("the If branch %q is not then, else or max", o.IfBranch)
	}
	for _, k := range slices.Sorted(maps.Keys(o.Dims)) {
		if v := o.Dims[k]; v <= 0 {
			return fmt.Errorf("dimension %q bound to %d: a dimension must be positive", k, v)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(o.Shapes)) {
		for i, d := range o.Shapes[k] {
			if d <= 0 {
				return fmt.Errorf("the shape given for input %q has size %d on axis %d: a dimension must be positive", k, d, i)
			}
		}
		if shapes.Prod(o.Shapes[k]) > shapes.MaxElements {
			return fmt.Errorf("the shape given for input %q: shape %v has more than 2^50 elements", k, o.Shapes[k])
		}
	}
	return nil
}
