package importopt

import "testing"

// TestFields: the default Knobs name the Options fields as Go code
// writes them, after the prefix; an empty argument leaves its part out.
func TestFields(t *testing.T) {
	f, tf := Fields{}, Fields{Prefix: "Options.Import."}
	for _, tc := range [][2]string{
		{f.Dim("batch", "N"), `Options.Dims["batch"] = N`},
		{f.Dim("batch", ""), `Options.Dims["batch"]`},
		{f.Dim("", ""), `Options.Dims`},
		{f.Shape("x", "D0,D1,..."), `Options.Shapes["x"] = []int64{D0,D1,...}`},
		{f.Shape("x", ""), `Options.Shapes["x"]`},
		{f.Batch("N"), `Options.Batch = N`},
		{f.Batch(""), `Options.Batch`},
		{f.LoopTrips("7"), `Options.LoopTrips = 7`},
		{f.IfBranch("max"), `Options.IfBranch = "max"`},
		{f.IfBranch("then|else|max"), `Options.IfBranch = "then"|"else"|"max"`},
		{tf.IfBranch(""), `Options.Import.IfBranch`},
	} {
		if tc[0] != tc[1] {
			t.Errorf("got %s, want %s", tc[0], tc[1])
		}
	}
}
