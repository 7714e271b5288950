package tf

import (
	"errors"
	"fmt"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
	attrpb "github.com/wamuir/graft/tensorflow/core/framework/attr_value_go_proto"
	nodepb "github.com/wamuir/graft/tensorflow/core/framework/node_def_go_proto"
)

// node is one TensorFlow node as inference sees it.
type node struct {
	def  *nodepb.NodeDef
	name string
	op   string
	in   []*value
	out  []*value
	// declared holds shapes known from elsewhere for the outputs (the
	// model's signature, or recovered from consumers), nil where none.
	declared []*value
	work     graph.Work
	// ta is the TensorArray a TensorArray op works on, nil when unknown.
	ta *tensorArray
}

// opDef is one op type's inference.
type opDef struct {
	// shape fills n.out. It may leave outputs nil (unknown) and returns
	// errPartial when an input it needs is not fully known.
	shape func(n *node) error
	// cost fills n.work once every shape is known; nil for pure data
	// movement.
	cost func(n *node)
	// same marks ops whose first output has their first input's shape
	// (elementwise unary ops), bcast ops whose output is the numpy
	// broadcast of their inputs: inference recovers unknown input shapes
	// backwards through both.
	same, bcast bool
}

// registry maps an op type to its inference.
var registry = map[string]*opDef{}

// register adds d for every op type in ops.
func register(d *opDef, ops ...string) {
	for _, op := range ops {
		registry[op] = d
	}
}

// Supported lists the op types with shape inference, sorted.
func Supported() []string {
	out := make([]string, 0, len(registry))
	for k := range registry {
		out = append(out, k)
	}
	sortStrings(out)
	return out
}

// errPartial reports that an op needs a fully known input (or known
// contents) that inference does not have.
var errPartial = errors.New("needs an input whose shape or contents are unknown")

// input returns input i or nil.
func (n *node) input(i int) *value {
	if i < 0 || i >= len(n.in) {
		return nil
	}
	return n.in[i]
}

// need returns input i when its shape is fully known.
func (n *node) need(i int) (*value, error) {
	v := n.input(i)
	if v == nil {
		return nil, fmt.Errorf("input %d is missing", i)
	}
	if !v.known() {
		return nil, errPartial
	}
	return v, nil
}

// ints returns the known contents of input i.
func (n *node) ints(i int) ([]int64, error) {
	v := n.input(i)
	if v == nil {
		return nil, fmt.Errorf("input %d is missing", i)
	}
	if !v.hasInts() {
		return nil, errPartial
	}
	return v.ints, nil
}

// set records output i with a fully known shape.
func (n *node) set(i int, dt graph.DType, shape []int64) error {
	if err := checkShape(shape); err != nil {
		return fmt.Errorf("output %d: %v", i, err)
	}
	if shape == nil {
		shape = []int64{}
	}
	return n.setValue(i, &value{dtype: dt, shape: shape, ranked: true})
}

// setValue records output i (possibly partial).
func (n *node) setValue(i int, v *value) error {
	if i >= len(n.out) {
		return nil
	}
	if v.hasInts() && shapes.Prod(v.shape) > maxFold {
		v.ints = nil
	}
	n.out[i] = v
	return nil
}

// setInts records output i with known contents.
func (n *node) setInts(i int, dt graph.DType, shape []int64, ints []int64) error {
	if err := n.set(i, dt, shape); err != nil {
		return err
	}
	if i < len(n.out) && int64(len(ints)) == shapes.Prod(shape) && len(ints) <= maxFold {
		n.out[i].ints = shapes.Clone(ints)
	}
	return nil
}

func (n *node) attr(name string) *attrpb.AttrValue { return n.def.GetAttr()[name] }

func (n *node) attrInt(name string, def int64) int64 {
	if a := n.attr(name); a != nil {
		if _, ok := a.GetValue().(*attrpb.AttrValue_I); ok {
			return a.GetI()
		}
	}
	return def
}

func (n *node) attrBool(name string) bool { return n.attr(name).GetB() }

func (n *node) attrString(name, def string) string {
	if a := n.attr(name); a != nil {
		if _, ok := a.GetValue().(*attrpb.AttrValue_S); ok {
			return string(a.GetS())
		}
	}
	return def
}

func (n *node) attrInts(name string) []int64 { return n.attr(name).GetList().GetI() }

func (n *node) attrStrings(name string) []string {
	var out []string
	for _, s := range n.attr(name).GetList().GetS() {
		out = append(out, string(s))
	}
	return out
}

// attrType returns a type attribute as a graph.DType (Undefined if absent).
func (n *node) attrType(name string) graph.DType {
	if a := n.attr(name); a != nil {
		if _, ok := a.GetValue().(*attrpb.AttrValue_Type); ok {
			return dtypeOf(a.GetType())
		}
	}
	return graph.Undefined
}

// dt is the op's element type: its T attribute, else its first input's.
func (n *node) dt() graph.DType {
	if d := n.attrType("T"); d != graph.Undefined {
		return d
	}
	for _, v := range n.in {
		if v != nil && v.dtype != graph.Undefined {
			return v.dtype
		}
	}
	return graph.Float32
}

// outElems is the element count of output i (0 when unknown).
func (n *node) outElems(i int) int64 {
	if i < len(n.out) {
		return n.out[i].elems()
	}
	return 0
}

// perOut sets the FLOPs to k per element of the first output.
func perOut(k int64) func(n *node) {
	return func(n *node) { n.work.FLOPs = shapes.MulSat(k, n.outElems(0)) }
}

// macs sets the op's MACs and its FLOPs (two per MAC plus extra).
func (n *node) macs(m, extra int64) {
	n.work.MACs = m
	n.work.FLOPs = shapes.AddSat(shapes.MulSat(2, m), extra)
}

// estimate marks the work as a conservative guess: four FLOPs per
// element read or written.
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

// dataFormat reports whether the op's data_format is channels-first.
func (n *node) channelsFirst() bool {
	f := n.attrString("data_format", "NHWC")
	return len(f) > 1 && f[1] == 'C'
}

// inferNode runs op inference, then takes declared shapes for outputs it
// left unknown, then counts the work. It reports whether every output
// ended up fully known.
func (c *converter) inferNode(n *node) error {
	d := registry[n.op]
	if d == nil {
		c.warn("op:"+n.op, fmt.Sprintf("unknown TensorFlow op %s: output shapes taken from the model's signature where it gives them, cost estimated", n.op))
	} else if err := d.shape(n); err != nil && !errors.Is(err, errPartial) {
		return err
	}
	dt := n.dt()
	for i := range n.out {
		v := n.out[i]
		if v == nil {
			v = unknown(dt)
		}
		if i == 0 && d != nil && d.same && !v.known() && v.count == 0 {
			if x := n.input(0); x != nil {
				v.count = x.numElems()
			}
		}
		if dec := n.declared[i]; dec != nil && !v.known() {
			m, ok := meet(v, dec)
			switch {
			case ok:
				v = m
			case c.strict:
				return fmt.Errorf("output %d: inferred shape %s contradicts %s, known from the signature or the ops consuming it", i, v, dec)
			}
		} else if dec != nil && c.strict {
			if _, ok := meet(v, dec); !ok {
				return fmt.Errorf("output %d: inferred shape %s contradicts %s, known from the signature or the ops consuming it", i, v, dec)
			}
		}
		if v.count > 0 && !v.known() && v.ranked {
			v = &value{dtype: v.dtype, shape: shapes.Clone(v.shape), ranked: true, count: v.count, fromConst: v.fromConst}
			if !complete(v) && c.strict {
				return fmt.Errorf("output %d: shape %s cannot hold %d elements", i, v, v.count)
			}
		}
		n.out[i] = v
	}
	complete := true
	for _, v := range n.in {
		if v != nil && !v.known() {
			complete = false
		}
	}
	for _, v := range n.out {
		if !v.known() {
			complete = false
		}
	}
	switch {
	case d == nil || !complete:
		n.estimate()
	case d.cost != nil:
		d.cost(n)
	}
	return nil
}
