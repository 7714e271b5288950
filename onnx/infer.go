package onnx

import (
	"fmt"
	"path"
	"runtime"
	"slices"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

// node is one operator as inference sees it: positional inputs and
// outputs (nil for an absent optional input), attributes, and the opset
// version of its domain. An infer function fills out and work.
type node struct {
	name   string
	op     string
	domain string
	opset  int64
	attrs  graph.Attrs
	in     []*value
	out    []*value
	work   graph.Work
	// declared holds shapes the model declares for the outputs (value_info,
	// graph outputs), nil entries where none.
	declared []*value
	// sub holds converted subgraphs by attribute name (control flow).
	sub   map[string]*subgraph
	c     *converter
	scope *scope
}

// inferFunc computes a node's outputs and work. It returns an error only
// for impossible shapes; unknown input shapes are handled by the caller.
type inferFunc func(n *node) error

type opKey struct{ domain, op string }

// registry maps (domain, op type) to the op's inference. The default
// domain is the empty string ("ai.onnx" is normalised to it).
var registry = map[opKey]inferFunc{}

// msDomain is ONNX Runtime's contrib-op domain.
const msDomain = "com.microsoft"

// families maps each registered op to its family: the name of the file
// that registers it (conv, reduce, shapeops...), so that adding a family
// is adding a file. Used to report coverage.
var families = map[opKey]string{}

// register adds f for every op type in ops, in the given domain.
func register(domain string, f inferFunc, ops ...string) {
	family := "other"
	if _, file, _, ok := runtime.Caller(1); ok {
		family = strings.TrimSuffix(path.Base(file), ".go")
	}
	for _, op := range ops {
		registry[opKey{domain, op}] = f
		families[opKey{domain, op}] = family
	}
}

// family returns the family of a supported op, "" for an unknown one.
func family(domain, op string) string { return families[opKey{normDomain(domain), op}] }

// Supported lists the operator types with shape inference, as
// "domain:op" (empty domain for the ONNX standard set), sorted.
func Supported() []string {
	out := make([]string, 0, len(registry))
	for k := range registry {
		out = append(out, k.domain+":"+k.op)
	}
	slices.Sort(out)
	return out
}

// IsSupported reports whether op in domain has shape inference.
func IsSupported(domain, op string) bool {
	_, ok := registry[opKey{normDomain(domain), op}]
	return ok
}

func normDomain(d string) string {
	if d == "ai.onnx" {
		return ""
	}
	return d
}

// input returns input i, or nil when it is absent.
func (n *node) input(i int) *value {
	if i < 0 || i >= len(n.in) {
		return nil
	}
	return n.in[i]
}

// need returns input i, or an error when it is absent.
func (n *node) need(i int) (*value, error) {
	if v := n.input(i); v != nil {
		return v, nil
	}
	return nil, fmt.Errorf("input %d is missing", i)
}

// set records output i with the given type and shape.
func (n *node) set(i int, dt graph.DType, shape []int64) error {
	return n.setValue(i, &value{dtype: dt, shape: shape, known: true})
}

// setValue records output i, checking the shape.
func (n *node) setValue(i int, v *value) error {
	if i >= len(n.out) {
		return nil // optional output not requested
	}
	if v.known {
		if err := checkShape(v.shape); err != nil {
			return fmt.Errorf("output %d: %v", i, err)
		}
		if v.shape == nil {
			v.shape = []int64{}
		}
		if shapes.Prod(v.shape) > maxFold {
			v.ints, v.floats = nil, nil
		}
	}
	n.out[i] = v
	return nil
}

// setInts records output i with known integer contents.
func (n *node) setInts(i int, dt graph.DType, shape []int64, ints []int64) error {
	return n.setValue(i, &value{dtype: dt, shape: shape, known: true, ints: ints})
}

// ints returns the known integer contents of input i.
func (n *node) ints(i int) ([]int64, bool) {
	v := n.input(i)
	if v == nil {
		return nil, false
	}
	return v.intsOf()
}

// outElems is the element count of output i once set.
func (n *node) outElems(i int) int64 {
	if i < len(n.out) && n.out[i] != nil {
		return n.out[i].elems()
	}
	return 0
}

// flops sets the op's FLOPs.
func (n *node) flops(f int64) { n.work.FLOPs = f }

// macs sets the op's MACs and FLOPs (two per MAC plus extra).
func (n *node) macs(m, extra int64) {
	n.work.MACs = m
	n.work.FLOPs = shapes.AddSat(shapes.MulSat(2, m), extra)
}

// estimate marks the work as a conservative guess: a few FLOPs per
// element touched.
func (n *node) estimate() {
	var t int64
	for _, v := range n.in {
		t = shapes.AddSat(t, v.elems())
	}
	for _, v := range n.out {
		t = shapes.AddSat(t, v.elems())
	}
	n.work = graph.Work{FLOPs: shapes.MulSat(4, t), Estimated: true}
}
