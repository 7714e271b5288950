package importopt

import (
	"fmt"
	"strconv"
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

// ShapeRankError is the error for a shape given for input (Options.Shapes,
// given) with another number of axes than the model declares for it
// (declared, one entry per axis: a size, a symbolic name or "?"). It
// blames the setting by name, before any node trips over the shape.
func ShapeRankError(k Knobs, input string, given []int64, declared []string) error {
	if k == nil {
		k = Fields{}
	}
	dims := make([]string, len(given))
	for i, d := range given {
		dims[i] = strconv.FormatInt(d, 10)
	}
	decl := "a scalar"
	if len(declared) > 0 {
		decl = strings.Join(declared, "×")
	}
	return fmt.Errorf("%s: the model declares %s with %s (%s), the shape given has %d",
		k.Shape(input, strings.Join(dims, ",")), input, axes(len(declared)), decl, len(given))
}

func axes(n int) string {
	if n == 1 {
		return "1 axis"
	}
	return fmt.Sprintf("%d axes", n)
}

// BatchUnused is the warning for a batch (Options.Batch) that binds no
// input's leading dimension, so the plan keeps the file's batch. input
// and declared (one entry per axis) name the first input whose leading
// size the file fixes at another value ("": none); byDim, when not
// empty, is the dimension setting that binds the leading dimension
// instead.
func BatchUnused(k Knobs, batch int64, input string, declared []string, byDim string) string {
	if k == nil {
		k = Fields{}
	}
	msg := fmt.Sprintf("%s binds nothing: no input of the model has a free leading dimension", k.Batch(strconv.FormatInt(batch, 10)))
	switch {
	case byDim != "":
		return fmt.Sprintf("%s (%s binds it, and takes precedence)", msg, byDim)
	case input == "" || len(declared) == 0:
		return msg
	}
	given := append([]string{strconv.FormatInt(batch, 10)}, declared[1:]...)
	return fmt.Sprintf("%s (input %q is %s in the file), so the plan keeps the file's batch; set it with %s",
		msg, input, strings.Join(declared, "×"), k.Shape(input, strings.Join(given, ",")))
}
