// Package train turns a forward (inference) graph into the graph of one
// training step: a gradient op for every forward op that needs one, the
// weight gradients they produce, and an optimizer update per parameter
// with the optimizer's state.
//
// The synthesis is structural, not symbolic: it reproduces what a
// training step computes and keeps alive, which is what placement needs.
// A gradient op costs Factor times its forward op's FLOPs (about two: one
// product for the input gradient, one for the weight gradient), reads the
// activations its forward op saved (what PyTorch's autograd saves for that
// op type: saved.go) and the gradients of its outputs, and writes a
// gradient for each differentiable input. Saved activations therefore
// live until their gradient op has run, as in real training; the others
// are freed once the forward pass has read them.
package train

import (
	"fmt"
	"math"
	"strings"

	"github.com/opplace/opplace/graph"
)

// Optimizer is an update rule and the state it keeps per parameter.
type Optimizer struct {
	Name string
	// StateCopies is how many parameter-sized state tensors it keeps.
	StateCopies int
	// FLOPsPerElement is the update's arithmetic per parameter element.
	FLOPsPerElement int64
}

// The optimizers opplace knows.
var (
	SGD      = Optimizer{Name: "sgd", StateCopies: 0, FLOPsPerElement: 2}
	Momentum = Optimizer{Name: "momentum", StateCopies: 1, FLOPsPerElement: 4}
	// Adam keeps first and second moments; its update reads both, the
	// gradient and the weight, and does about ten operations per element.
	Adam = Optimizer{Name: "adam", StateCopies: 2, FLOPsPerElement: 10}
)

// ParseOptimizer reads an --optimizer value.
func ParseOptimizer(name string) (Optimizer, error) {
	switch strings.ToLower(name) {
	case "sgd":
		return SGD, nil
	case "momentum":
		return Momentum, nil
	case "adam":
		return Adam, nil
	}
	return Optimizer{}, fmt.Errorf("unknown optimizer %q: use sgd, momentum or adam", name)
}

// Options controls the synthesis.
type Options struct {
	Optimizer Optimizer
	// Factor scales a forward op's FLOPs into its gradient op's; 0 means 2.
	Factor float64
}

// Stats counts what the synthesis added.
type Stats struct {
	Forward, Backward, Update int
	// GradientBytes is the weight gradients' size; StateBytes the
	// optimizer state's.
	GradientBytes, StateBytes int64
}

// Build returns a new graph holding fwd's ops followed by the backward and
// update ops of one training step. fwd is not modified. Every gradient op
// shares its forward op's colocation group (a fresh soft group named after
// the forward op when it had none, graph.SoftColocatePrefix), so placers
// keep a layer and its gradient together, as Baechi and every framework
// do, and fusing two layers keeps both gradients with them.
func Build(fwd *graph.Graph, opts Options) (*graph.Graph, Stats, error) {
	if opts.Factor == 0 {
		opts.Factor = 2
	}
	if !(opts.Factor > 0) || math.IsInf(opts.Factor, 1) {
		return nil, Stats{}, fmt.Errorf("the gradient cost factor %v must be a positive number", opts.Factor)
	}
	if opts.Optimizer.Name == "" {
		opts.Optimizer = SGD
	}
	b := &builder{fwd: fwd, opts: opts}
	if err := b.run(); err != nil {
		return nil, Stats{}, err
	}
	return b.g, b.stats, nil
}

type builder struct {
	fwd   *graph.Graph
	opts  Options
	g     *graph.Graph
	stats Stats

	// needsGrad marks forward ops on a path from a parameter whose output
	// is floating point: only they get gradient ops.
	needsGrad []bool
	// grads lists, per forward tensor, the gradient tensors flowing back
	// into it (one per consuming gradient op).
	grads map[graph.TensorID][]graph.TensorID
	// paramGrads lists, per parameter, the weight gradients computed for it.
	paramGrads map[graph.TensorID][]graph.TensorID
}

func (b *builder) run() error {
	fwd := b.fwd
	adj := fwd.BuildAdjacency()
	order, err := fwd.TopoOrder(adj)
	if err != nil {
		return err
	}
	b.g = graph.New(fwd.Name, 3*len(fwd.Ops), 3*len(fwd.Tensors))
	// Copy tensors and ops; IDs stay the same.
	for i := range fwd.Tensors {
		t := fwd.Tensors[i]
		if _, err := b.g.AddTensor(t); err != nil {
			return err
		}
	}
	b.g.Inputs = append([]graph.TensorID(nil), fwd.Inputs...)
	b.g.Outputs = append([]graph.TensorID(nil), fwd.Outputs...)
	for i := range fwd.Ops {
		op := fwd.Ops[i]
		op.Phase = graph.Forward
		if _, err := b.g.AddOp(op); err != nil {
			return err
		}
	}
	b.stats.Forward = len(fwd.Ops)

	b.markNeedsGrad(order)
	b.grads = map[graph.TensorID][]graph.TensorID{}
	b.paramGrads = map[graph.TensorID][]graph.TensorID{}
	for i := len(order) - 1; i >= 0; i-- {
		if b.needsGrad[order[i]] {
			if err := b.addGradient(order[i]); err != nil {
				return err
			}
		}
	}
	if err := b.addUpdates(); err != nil {
		return err
	}
	return nil
}

// maxStepWork bounds the FLOPs and MACs of one op of the training step:
// the importers bound each forward op's at 2^60, and its gradient
// multiplies them by the gradient factor, so a large factor or batch must
// be refused here rather than wrap. The step's totals are not bounded:
// they are summed in float64 wherever they are summed.
const maxStepWork = int64(1) << 62

// scaleWork multiplies forward work by the gradient factor, reporting
// whether the product stays under maxStepWork (never true for NaN).
func scaleWork(x int64, f float64) (int64, bool) {
	v := f * float64(x)
	if !(v < float64(maxStepWork)) {
		return 0, false
	}
	return int64(v), true
}

func (b *builder) markNeedsGrad(order []graph.OpID) {
	fwd := b.fwd
	b.needsGrad = make([]bool, len(fwd.Ops))
	for _, id := range order {
		op := &fwd.Ops[id]
		if !floatOutput(fwd, op) {
			continue
		}
		for _, in := range op.Inputs {
			t := &fwd.Tensors[in]
			if t.Kind == graph.Parameter && t.DType.IsFloat() || t.Producer != graph.NoOp && b.needsGrad[t.Producer] {
				b.needsGrad[id] = true
				break
			}
		}
	}
}

func floatOutput(g *graph.Graph, op *graph.Op) bool {
	for _, o := range op.Outputs {
		if g.Tensors[o].DType.IsFloat() {
			return true
		}
	}
	return false
}

// differentiable reports whether the gradient of op should flow into
// input t: a float parameter, or an activation of an op that needs one.
func (b *builder) differentiable(t *graph.Tensor) bool {
	if !t.DType.IsFloat() {
		return false
	}
	return t.Kind == graph.Parameter || t.Producer != graph.NoOp && b.needsGrad[t.Producer]
}

// fusedAttentionBackward scales the gradient factor of a fused attention
// core (graph.FuseAttention): its backward recomputes the scores from Q
// and K and runs five matmuls against the forward's two, 2.5 times the
// forward's FLOPs where a product's gradient costs two (the count
// FlashAttention's own benchmarks use, Dao-AILab/flash-attention,
// benchmarks/benchmark_flash_attention.py).
const fusedAttentionBackward = 2.5 / 2

func (b *builder) addGradient(id graph.OpID) error {
	g := b.g
	f := &g.Ops[id]
	if f.Colocate == "" {
		f.Colocate = graph.SoftColocatePrefix + f.Name
	}
	grad := graph.Op{
		Name:     uniqueOpName(g, f.Name+"/grad"),
		Type:     f.Type + "Grad",
		Domain:   f.Domain,
		Colocate: f.Colocate,
		Device:   f.Device,
		Phase:    graph.Backward,
		Work:     graph.Work{TempBytes: f.Work.TempBytes, Estimated: f.Work.Estimated},
	}
	factor := b.opts.Factor
	if f.Domain == graph.AttentionDomain {
		factor *= fusedAttentionBackward
	}
	var okF, okM bool
	grad.Work.FLOPs, okF = scaleWork(f.Work.FLOPs, factor)
	grad.Work.MACs, okM = scaleWork(f.Work.MACs, factor)
	if !okF || !okM {
		return fmt.Errorf("op %q: its gradient's FLOPs or MACs (%d × %v) reach 2^62 (4.6e18), beyond any real step; bind a smaller batch or dimension",
			f.Name, max(f.Work.FLOPs, f.Work.MACs), factor)
	}
	seen := map[graph.TensorID]bool{}
	read := func(t graph.TensorID) {
		if !seen[t] {
			seen[t] = true
			grad.Inputs = append(grad.Inputs, t)
		}
	}
	// Gradients of the outputs, then the activations saved for backward.
	for _, out := range f.Outputs {
		for _, dt := range b.grads[out] {
			read(dt)
		}
	}
	for _, t := range b.savedForBackward(f) {
		read(t)
	}
	hasGrad := map[graph.TensorID]bool{}
	for _, in := range f.Inputs {
		t := g.Tensors[in]
		if !b.differentiable(&t) || hasGrad[in] {
			continue
		}
		hasGrad[in] = true // one gradient per distinct input
		dt, err := g.AddTensor(graph.Tensor{
			Name: uniqueTensorName(g, "grad/"+grad.Name+"/"+t.Name), DType: t.DType,
			Shape: t.Shape, ShapeKnown: t.ShapeKnown, Kind: graph.Activation,
		})
		if err != nil {
			return err
		}
		grad.Outputs = append(grad.Outputs, dt)
		if t.Kind == graph.Parameter {
			b.paramGrads[in] = append(b.paramGrads[in], dt)
			b.stats.GradientBytes += t.Bytes()
		} else {
			b.grads[in] = append(b.grads[in], dt)
		}
	}
	if _, err := g.AddOp(grad); err != nil {
		return err
	}
	b.stats.Backward++
	return nil
}

// addUpdates adds one optimizer op per trained parameter, in parameter
// order, colocated with the first op that reads the parameter.
func (b *builder) addUpdates() error {
	g := b.g
	opt := b.opts.Optimizer
	nfwd := len(b.fwd.Tensors)
	for i := 0; i < nfwd; i++ {
		pid := graph.TensorID(i)
		dgs := b.paramGrads[pid]
		if len(dgs) == 0 {
			continue
		}
		p := g.Tensors[pid]
		up := graph.Op{
			Name:   uniqueOpName(g, p.Name+"/"+opt.Name),
			Type:   "Update" + strings.ToUpper(opt.Name[:1]) + opt.Name[1:],
			Phase:  graph.Update,
			Inputs: append([]graph.TensorID{pid}, dgs...),
			Work:   graph.Work{FLOPs: min(opt.FLOPsPerElement, maxStepWork/max(p.Elements(), 1)) * p.Elements()},
		}
		first := g.Tensors[pid].Consumers[0]
		up.Colocate, up.Device = g.Ops[first].Colocate, g.Ops[first].Device
		for s := 0; s < opt.StateCopies; s++ {
			st, err := g.AddTensor(graph.Tensor{
				Name: uniqueTensorName(g, fmt.Sprintf("%s/%s_state%d", p.Name, opt.Name, s)), DType: p.DType,
				Shape: p.Shape, ShapeKnown: p.ShapeKnown, Kind: graph.Parameter,
			})
			if err != nil {
				return err
			}
			up.Inputs = append(up.Inputs, st)
			b.stats.StateBytes += p.Bytes()
		}
		if _, err := g.AddOp(up); err != nil {
			return err
		}
		b.stats.Update++
	}
	return nil
}

func uniqueOpName(g *graph.Graph, name string) string {
	if _, taken := g.OpByName(name); !taken {
		return name
	}
	for i := 2; ; i++ {
		n := fmt.Sprintf("%s_%d", name, i)
		if _, taken := g.OpByName(n); !taken {
			return n
		}
	}
}

func uniqueTensorName(g *graph.Graph, name string) string {
	if _, taken := g.TensorByName(name); !taken {
		return name
	}
	for i := 2; ; i++ {
		n := fmt.Sprintf("%s_%d", name, i)
		if _, taken := g.TensorByName(n); !taken {
			return n
		}
	}
}
