package tf

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/internal/importopt"
)

// TestBounds checks that sizes and work never wrap and that a dimension
// of 0 is refused when bound and a warning when the graph declares it.
func TestBounds(t *testing.T) {
	matmul := ph("x", 1<<25, 1<<20) + cf("w", 1<<20, 1<<20) + nd("m", "MatMul", in("x", "w"))
	dyn := `node { name: "in" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: -1 } dim { size: 8 } } } } }
` + nd("y", "Relu", in("in"))
	for _, tc := range []struct {
		name    string
		graph   string
		opts    importopt.Options
		err     string
		warning string
	}{
		{name: "work past 2^60", graph: matmul,
			err: `op "m" (MatMul, output 33554432x1048576): its FLOPs reach 2^60 (1.15e18)`},
		{name: "zero bound shape", graph: dyn, opts: importopt.Options{Shapes: map[string][]int64{"in": {0, 8}}},
			err: `the shape given for input "in" has size 0 on axis 0: a dimension must be positive`},
		{name: "negative batch", graph: dyn, opts: importopt.Options{Batch: -2}, err: "the batch size -2 must be positive"},
		{name: "declared zero", graph: ph("x", 4, 0) + nd("y", "Relu", in("x")),
			warning: `input "x" axis 1 has size 0 in the model: the tensor is empty, and so is the work of every op that depends on it`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode([]byte(tc.graph), "t.pbtxt", Options{Import: tc.opts})
			if tc.err != "" {
				var ie *InputError
				if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "--") {
					t.Fatalf("error %v, want an *InputError naming no flag and containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(m.Warnings, tc.warning) {
				t.Errorf("warnings %q lack %q", m.Warnings, tc.warning)
			}
		})
	}
}
