package importopt

import (
	"fmt"
	"strings"
)

// Knobs names the settings an import message tells the user to change,
// in the caller's own spelling. Library messages name options; a command
// line maps them to its flags. Each method renders one Options field with
// the value given ("bind it with " + Dim("batch", "N")); an empty argument
// leaves that part out, so Dim("", "") is the setting's bare name.
//
// Options.Knobs nil uses Fields{}, which names the Options fields
// (Options.Dims["batch"] = N); the opplace command sets its flags
// (--dim batch=N).
type Knobs interface {
	Dim(name, value string) string   // a symbolic dimension: Options.Dims
	Shape(input, dims string) string // one input's whole shape: Options.Shapes; dims is comma-separated
	Batch(n string) string           // the dynamic leading dimension: Options.Batch
	LoopTrips(n string) string       // a Loop's assumed trip count: Options.LoopTrips
	IfBranch(b string) string        // an If's branch: Options.IfBranch; b may list alternatives, then|else|max
}

// Fields is the default Knobs: it names the Options fields as a Go caller
// writes them, after Prefix ("Options." when empty; tf uses
// "Options.Import.").
type Fields struct{ Prefix string }

func (f Fields) field(name string) string {
	if f.Prefix == "" {
		return "Options." + name
	}
	return f.Prefix + name
}

func assign(s, value string) string {
	if value == "" {
		return s
	}
	return s + " = " + value
}

func index(s, key string) string {
	if key == "" {
		return s
	}
	return fmt.Sprintf("%s[%q]", s, key)
}

// Dim: Options.Dims["batch"] = N.
func (f Fields) Dim(name, value string) string {
	return assign(index(f.field("Dims"), name), value)
}

// Shape: Options.Shapes["x"] = []int64{D0,D1,...}.
func (f Fields) Shape(input, dims string) string {
	if dims != "" {
		dims = "[]int64{" + dims + "}"
	}
	return assign(index(f.field("Shapes"), input), dims)
}

// Batch: Options.Batch = N.
func (f Fields) Batch(n string) string { return assign(f.field("Batch"), n) }

// LoopTrips: Options.LoopTrips = N.
func (f Fields) LoopTrips(n string) string { return assign(f.field("LoopTrips"), n) }

// IfBranch: Options.IfBranch = "max", each alternative of then|else|max
// quoted.
func (f Fields) IfBranch(b string) string {
	if b == "" {
		return f.field("IfBranch")
	}
	alts := strings.Split(b, "|")
	for i, a := range alts {
		alts[i] = fmt.Sprintf("%q", a)
	}
	return assign(f.field("IfBranch"), strings.Join(alts, "|"))
}
