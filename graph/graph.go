// Package graph is the operator DAG every opplace pass shares: operators
// with typed, shaped tensors on their edges, parameters told apart from
// activations, a stable topological order and cycle detection.
//
// Ops and tensors live in slices and refer to each other by dense integer
// IDs, so a graph of a million ops costs a few allocations per op and
// algorithms index arrays instead of maps.
package graph

import (
	"fmt"
	"strings"
	"sync"
)

// OpID indexes Graph.Ops.
type OpID int32

// TensorID indexes Graph.Tensors.
type TensorID int32

// NoOp marks a tensor with no producing op (a graph input or a parameter).
const NoOp OpID = -1

// TensorKind says where a tensor's memory comes from.
type TensorKind uint8

const (
	// Activation is produced by an op during the step.
	Activation TensorKind = iota
	// Input is fed to the graph from outside (data, labels).
	Input
	// Parameter is a trained weight: resident on every device that uses it
	// for the whole step.
	Parameter
	// Constant is a non-trained constant baked into the graph.
	Constant
)

var kindNames = [...]string{"activation", "input", "parameter", "constant"}

func (k TensorKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("TensorKind(%d)", k)
}

// IsResident reports whether a tensor of this kind occupies memory for the
// whole step rather than from its producer to its last consumer.
func (k TensorKind) IsResident() bool { return k == Parameter || k == Constant }

// Tensor is a value flowing along the graph's edges.
type Tensor struct {
	Name  string
	DType DType
	// Shape holds concrete dimensions; it is meaningful only when
	// ShapeKnown is set.
	Shape      []int64
	ShapeKnown bool
	Kind       TensorKind
	// Producer is the op that writes the tensor, or NoOp.
	Producer OpID
	// Consumers lists the ops reading the tensor, in the order they were
	// added (an op reading a tensor twice appears twice).
	Consumers []OpID
}

// Elements is the number of elements, or 0 when the shape is unknown.
func (t *Tensor) Elements() int64 {
	if !t.ShapeKnown {
		return 0
	}
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Bytes is the tensor's size in memory, or 0 when the shape is unknown.
func (t *Tensor) Bytes() int64 { return t.Elements() * t.DType.Size() }

// ShapeString renders the shape as "32x3x224x224", "scalar" or "?".
func (t *Tensor) ShapeString() string { return FormatShape(t.Shape, t.ShapeKnown) }

// FormatShape renders a shape as "32x3x224x224", "scalar" or "?".
func FormatShape(shape []int64, known bool) string {
	if !known {
		return "?"
	}
	if len(shape) == 0 {
		return "scalar"
	}
	var b strings.Builder
	for i, d := range shape {
		if i > 0 {
			b.WriteByte('x')
		}
		fmt.Fprint(&b, d)
	}
	return b.String()
}

// Work is what an op computes, as counted by the importer that knows the
// op's semantics.
type Work struct {
	// FLOPs counts every floating-point operation (a multiply-accumulate is
	// two).
	FLOPs int64
	// MACs counts the multiply-accumulates of Conv, ConvTranspose, Gemm and
	// MatMul (and their fused forms); zero for other ops.
	MACs int64
	// TempBytes is scratch memory the op needs while it runs and frees
	// right after (workspaces).
	TempBytes int64
	// Estimated marks work that is a conservative guess (an unknown op).
	Estimated bool
}

// Phase says which part of a training step an op belongs to.
type Phase uint8

const (
	// Forward ops compute the model's outputs (all ops of an inference
	// graph).
	Forward Phase = iota
	// Backward ops compute gradients.
	Backward
	// Update ops apply the optimizer to parameters.
	Update
)

var phaseNames = [...]string{"forward", "backward", "update"}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("Phase(%d)", p)
}

// Op is one operator of the DAG.
type Op struct {
	// Name is unique within the graph and stable across runs.
	Name   string
	Type   string
	Domain string
	// Attrs holds the op's attributes as the importer read them.
	Attrs   Attrs
	Inputs  []TensorID
	Outputs []TensorID
	// ControlDeps are ops that must finish first without passing data.
	ControlDeps []OpID
	// Colocate names a group whose ops must all share one device; empty
	// for none.
	Colocate string
	// Device pins the op to a named device; empty for none.
	Device string
	Phase  Phase
	Work   Work
}

// Graph is an operator DAG. The zero value is an empty graph; add tensors
// and ops with AddTensor and AddOp.
type Graph struct {
	Name    string
	Ops     []Op
	Tensors []Tensor
	// Inputs and Outputs are the graph's external interface, in declaration
	// order.
	Inputs  []TensorID
	Outputs []TensorID

	tensorByName map[string]TensorID
	opByName     map[string]OpID
	// pending, when set, says the name maps were left unbuilt by
	// AddTensorUnique or AddOpUnique: the first use builds them.
	pending *pendingIndex
}

// pendingIndex builds a graph's name maps once, on first use, even when
// lookups come from several goroutines.
type pendingIndex struct {
	once  sync.Once
	built bool
}

// index builds the name maps if AddTensorUnique or AddOpUnique left them
// unbuilt.
func (g *Graph) index() {
	pi := g.pending
	if pi == nil {
		return
	}
	pi.once.Do(func() {
		g.tensorByName = make(map[string]TensorID, len(g.Tensors))
		for i := range g.Tensors {
			insertName(g.tensorByName, g.Tensors[i].Name, TensorID(i), func(k int) bool { return g.Tensors[k].Name == g.Tensors[i].Name })
		}
		g.opByName = make(map[string]OpID, len(g.Ops))
		for i := range g.Ops {
			insertName(g.opByName, g.Ops[i].Name, OpID(i), func(k int) bool { return g.Ops[k].Name == g.Ops[i].Name })
		}
		pi.built = true
	})
}

// unindexed drops the name maps until their first use, for an add that
// does not maintain them.
func (g *Graph) unindexed() {
	if g.pending == nil || g.pending.built {
		g.pending = &pendingIndex{}
		g.tensorByName, g.opByName = nil, nil
	}
}

// New returns an empty graph with room for the given number of ops and
// tensors.
func New(name string, opHint, tensorHint int) *Graph {
	return &Graph{
		Name:         name,
		Ops:          make([]Op, 0, opHint),
		Tensors:      make([]Tensor, 0, tensorHint),
		tensorByName: make(map[string]TensorID, tensorHint),
		opByName:     make(map[string]OpID, opHint),
	}
}

// AddTensor adds t and returns its ID. Its Producer and Consumers are
// filled in by AddOp; names must be unique.
func (g *Graph) AddTensor(t Tensor) (TensorID, error) {
	g.index()
	if g.tensorByName == nil {
		g.tensorByName = make(map[string]TensorID)
	}
	id := TensorID(len(g.Tensors))
	if !insertName(g.tensorByName, t.Name, id, func(i int) bool { return g.Tensors[i].Name == t.Name }) {
		return 0, fmt.Errorf("tensor %q is defined twice", t.Name)
	}
	t.Producer = NoOp
	t.Consumers = nil
	g.Tensors = append(g.Tensors, t)
	return id, nil
}

// AddOp adds op, wiring it as producer of its outputs and consumer of its
// inputs. An output may have only one producer and op names must be unique.
func (g *Graph) AddOp(op Op) (OpID, error) {
	g.index()
	if g.opByName == nil {
		g.opByName = make(map[string]OpID)
	}
	return g.addOp(op, true)
}

// AddTensorUnique is AddTensor for a caller that knows t's name is no
// other tensor's: it leaves the name maps to be built on first use, so
// an importer of a million tensors builds none it does not need.
func (g *Graph) AddTensorUnique(t Tensor) TensorID {
	g.unindexed()
	id := TensorID(len(g.Tensors))
	t.Producer = NoOp
	t.Consumers = nil
	g.Tensors = append(g.Tensors, t)
	return id
}

// AddOpUnique is AddOp for a caller that knows op's name is no other
// op's; like AddTensorUnique it leaves the name maps to first use.
func (g *Graph) AddOpUnique(op Op) (OpID, error) {
	g.unindexed()
	return g.addOp(op, false)
}

func (g *Graph) addOp(op Op, indexed bool) (OpID, error) {
	id := OpID(len(g.Ops))
	for _, t := range op.Outputs {
		if int(t) >= len(g.Tensors) || t < 0 {
			return 0, fmt.Errorf("op %q: output tensor id %d out of range", op.Name, t)
		}
		if p := g.Tensors[t].Producer; p != NoOp {
			return 0, fmt.Errorf("op %q: tensor %q is already produced by op %q", op.Name, g.Tensors[t].Name, g.Ops[p].Name)
		}
		if g.Tensors[t].Kind != Activation {
			return 0, fmt.Errorf("op %q: output %q is a %s, not an activation", op.Name, g.Tensors[t].Name, g.Tensors[t].Kind)
		}
	}
	for _, t := range op.Inputs {
		if int(t) >= len(g.Tensors) || t < 0 {
			return 0, fmt.Errorf("op %q: input tensor id %d out of range", op.Name, t)
		}
	}
	for _, d := range op.ControlDeps {
		if int(d) >= len(g.Ops)+1 || d < 0 {
			return 0, fmt.Errorf("op %q: control dependency id %d out of range", op.Name, d)
		}
	}
	if indexed && !insertName(g.opByName, op.Name, id, func(i int) bool { return g.Ops[i].Name == op.Name }) {
		return 0, fmt.Errorf("op name %q is used twice", op.Name)
	}
	for _, t := range op.Outputs {
		g.Tensors[t].Producer = id
	}
	for _, t := range op.Inputs {
		g.Tensors[t].Consumers = append(g.Tensors[t].Consumers, id)
	}
	g.Ops = append(g.Ops, op)
	return id, nil
}

// insertName maps name to id unless it is taken, and reports whether it
// was not. One map operation, not a lookup and then an insert: importers
// add millions of names. A duplicate is rare: the name's first holder,
// the first i isFirst accepts, is put back.
func insertName[ID ~int32](m map[string]ID, name string, id ID, isFirst func(i int) bool) bool {
	n := len(m)
	m[name] = id
	if len(m) > n {
		return true
	}
	for i := 0; i < int(id); i++ {
		if isFirst(i) {
			m[name] = ID(i)
			break
		}
	}
	return false
}

// TensorByName looks a tensor up by name.
func (g *Graph) TensorByName(name string) (TensorID, bool) {
	g.index()
	id, ok := g.tensorByName[name]
	return id, ok
}

// Batch is the leading dimension of the graph's first input of known
// shape: the batch a step splits into micro-batches and replicas, and
// the batch a profile was measured at; 0 when no input has a shape.
func (g *Graph) Batch() int64 {
	for _, in := range g.Inputs {
		if t := &g.Tensors[in]; t.ShapeKnown && len(t.Shape) > 0 {
			return t.Shape[0]
		}
	}
	return 0
}

// QuoteNames quotes the names of the first three of ops for a message,
// and counts the rest: "a", "b", "c", and 4 more.
func (g *Graph) QuoteNames(ops []OpID) string {
	const shown = 3
	var names []string
	for i, op := range ops {
		if i == shown {
			names = append(names, fmt.Sprintf("and %d more", len(ops)-shown))
			break
		}
		names = append(names, fmt.Sprintf("%q", g.Ops[op].Name))
	}
	return strings.Join(names, ", ")
}

// OpByName looks an op up by name.
func (g *Graph) OpByName(name string) (OpID, bool) {
	g.index()
	id, ok := g.opByName[name]
	return id, ok
}

// Tensor returns the tensor with the given ID.
func (g *Graph) Tensor(id TensorID) *Tensor { return &g.Tensors[id] }

// Op returns the op with the given ID.
func (g *Graph) Op(id OpID) *Op { return &g.Ops[id] }

// NumOps is the number of ops.
func (g *Graph) NumOps() int { return len(g.Ops) }
