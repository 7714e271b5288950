package profile

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/onnx/onnxpb"
	"github.com/opplace/opplace/train"
)

// ImportOptions are what ImportWith may use besides the trace.
type ImportOptions struct {
	// Optimized is the optimized model ONNX Runtime wrote for the session
	// the trace profiled (SessionOptions.optimized_model_filepath, at the
	// same graph optimisation level); its initializers' data may be
	// stripped. With it, fused and renamed kernels map to the nodes they
	// compute; without it, events map by name only.
	Optimized []byte
	// OptimizedName labels the optimized model in errors.
	OptimizedName string
	// Optimizer names the optimizer of a training step's trace (sgd,
	// momentum, adam); empty: the one its Optimizer.step range names.
	Optimizer string
	// Precision is how the traced step ran (train.AMPBF16 for a step
	// under torch.autocast(bfloat16), ...); empty: as the model file
	// says. A PyTorch trace is aligned with the model rewritten for it
	// (autocast's casts included, half-size tensors).
	Precision train.Precision
	// Device, when set, is the device type the trace ran on with its
	// peaks per element type: each measurement records how much faster
	// than float32 its op's path runs (Measurement.PathSpeedup).
	Device *cluster.DeviceType
}

// MinMatchedShare is the share of a trace's kernel time below which
// ImportWith warns that the profile misses much of the trace.
const MinMatchedShare = 0.8

// target is where a trace kernel's time goes: graph ops with the
// fraction each gets.
type target struct {
	ops    []graph.OpID
	weight []float64
	// layout marks a kernel that only converts a tensor's layout
	// (ReorderInput/ReorderOutput, an inserted Transpose or Reshape).
	layout bool
	// shapeOp is the op whose output the kernel's output_type_shape
	// describes, for the batch check; -1 when none.
	shapeOp graph.OpID
}

// ortNode is one node of the optimized model.
type ortNode struct {
	name, opType, domain string
	inputs, outputs      []string
	// activation is the op type an NCHWc kernel fused after itself
	// (its "activation" attribute), "" if none.
	activation string
}

// ortMap maps ONNX Runtime kernels (optimized-model nodes) to g's ops.
type ortMap struct {
	g     *graph.Graph
	dt    *DeviceType
	nodes []ortNode
	// byName lists the optimized nodes of each name in file order (ORT
	// gives several fused nodes one name, "Gelu").
	byName map[string][]int
	// alias is the original tensor an optimized-model tensor holds
	// (possibly in another layout).
	alias map[string]graph.TensorID
	// producer and consumers index the optimized model's tensors.
	producer  map[string]int
	consumers map[string][]int
	// folded marks g's ops ONNX Runtime computes when the session starts
	// (constant inputs only, shape arithmetic): no kernel in the trace.
	folded []bool
	est    []float64
	cache  map[int]*target
}

// parseOptimized reads an optimized model and checks it belongs to g.
func parseOptimized(name string, data []byte, g *graph.Graph) ([]ortNode, error) {
	if name == "" {
		name = "optimized model"
	}
	mp := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(data, mp); err != nil {
		return nil, fmt.Errorf("%s: not an ONNX model: %v", name, err)
	}
	if mp.Graph == nil || len(mp.Graph.Node) == 0 {
		return nil, fmt.Errorf("%s: not an ONNX model (no graph nodes)", name)
	}
	var nodes []ortNode
	shared := 0
	for _, n := range mp.Graph.Node {
		on := ortNode{name: n.GetName(), opType: n.GetOpType(), domain: n.GetDomain(), inputs: n.Input, outputs: n.Output}
		for _, a := range n.Attribute {
			if a.GetName() == "activation" {
				on.activation = string(a.GetS())
			}
		}
		nodes = append(nodes, on)
		for _, t := range slices.Concat(n.Input, n.Output) {
			if _, ok := g.TensorByName(t); ok && t != "" {
				shared++
			}
		}
	}
	if shared == 0 {
		return nil, fmt.Errorf("%s: shares no tensor name with the model %s: it is not the optimized form of this model (write it with SessionOptions.optimized_model_filepath in the profiled session)", name, g.Name)
	}
	return nodes, nil
}

func newORTMap(g *graph.Graph, dt *DeviceType, nodes []ortNode) *ortMap {
	m := &ortMap{g: g, dt: dt, nodes: nodes, byName: map[string][]int{}, alias: map[string]graph.TensorID{},
		producer: map[string]int{}, consumers: map[string][]int{}, cache: map[int]*target{}}
	m.folded = foldedOps(g)
	m.est = opEstimates(g, dt)
	for i, n := range nodes {
		m.byName[n.name] = append(m.byName[n.name], i)
		for _, t := range n.outputs {
			m.producer[t] = i
		}
		for _, t := range n.inputs {
			m.consumers[t] = append(m.consumers[t], i)
		}
		for _, t := range slices.Concat(n.inputs, n.outputs) {
			if id, ok := g.TensorByName(t); ok {
				m.alias[t] = id
			}
		}
	}
	// A node ORT renamed after the tensor it computes (the NCHWc
	// convolution "<tensor>_nchwc" writing "reorder_token_5") holds that
	// tensor; a node that kept its op's name (an NCHWc Concat) holds the
	// op's outputs.
	for _, n := range nodes {
		if len(n.outputs) == 0 {
			continue
		}
		if _, ok := m.alias[n.outputs[0]]; ok {
			continue
		}
		if id, ok := m.renamedTensor(n); ok {
			m.alias[n.outputs[0]] = id
		} else if op, ok := g.OpByName(n.name); ok && len(g.Ops[op].Outputs) == len(n.outputs) {
			for j, t := range n.outputs {
				if _, ok := m.alias[t]; !ok {
					m.alias[t] = g.Ops[op].Outputs[j]
				}
			}
		}
	}
	// Layout kernels pass their tensor through: forward from an aliased
	// input, backward from an aliased output, until nothing changes.
	for changed := true; changed; {
		changed = false
		for _, n := range nodes {
			if !m.isLayout(n) || len(n.inputs) == 0 || len(n.outputs) == 0 {
				continue
			}
			a, aok := m.alias[n.inputs[0]]
			b, bok := m.alias[n.outputs[0]]
			switch {
			case aok && !bok:
				m.alias[n.outputs[0]] = a
				changed = true
			case bok && !aok:
				m.alias[n.inputs[0]] = b
				changed = true
			}
		}
	}
	return m
}

// renamedTensor is the model tensor an NCHWc kernel computes, from the
// name ORT gave it: "<tensor>_nchwc" for a convolution,
// "<tensor>_bn_nchwc" for a BatchNormalization it turned into one. A
// kernel that fused an activation after itself writes that activation's
// output when the named tensor feeds only it (DenseNet's BN+ReLU).
func (m *ortMap) renamedTensor(n ortNode) (graph.TensorID, bool) {
	for _, suffix := range []string{"_bn_nchwc", "_nchwc"} {
		base, ok := strings.CutSuffix(n.name, suffix)
		if !ok {
			continue
		}
		id, ok := m.g.TensorByName(base)
		if !ok {
			continue
		}
		t := &m.g.Tensors[id]
		if n.activation != "" && t.Producer != graph.NoOp && m.g.Ops[t.Producer].Type != n.activation && len(t.Consumers) == 1 {
			if c := &m.g.Ops[t.Consumers[0]]; c.Type == n.activation && len(c.Outputs) == 1 {
				id = c.Outputs[0]
			}
		}
		return id, true
	}
	return 0, false
}

// isLayout reports whether an optimized node only moves its input into
// another layout or shape: ORT's NCHWc reorders, and view-like nodes ORT
// inserted (their name is no op of the model, or they read or write a
// tensor the model does not have).
func (m *ortMap) isLayout(n ortNode) bool {
	switch n.opType {
	case "ReorderInput", "ReorderOutput":
		return true
	case "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity":
		if len(n.inputs) == 0 || len(n.outputs) == 0 {
			return false
		}
		if _, ok := m.g.OpByName(n.name); !ok {
			return true
		}
		for _, t := range []string{n.inputs[0], n.outputs[0]} {
			if _, ok := m.g.TensorByName(t); !ok {
				return true
			}
		}
	}
	return false
}

// foldedOps marks the ops whose inputs are all parameters, constants or
// outputs of such ops, and shape queries: ONNX Runtime evaluates them once
// when the session starts.
func foldedOps(g *graph.Graph) []bool {
	folded := make([]bool, len(g.Ops))
	order, err := g.TopoOrder(g.BuildAdjacency())
	if err != nil {
		return folded
	}
	constant := func(t graph.TensorID) bool {
		tt := &g.Tensors[t]
		if tt.Producer == graph.NoOp {
			return tt.Kind == graph.Parameter || tt.Kind == graph.Constant
		}
		return folded[tt.Producer]
	}
	for _, id := range order {
		op := &g.Ops[id]
		switch op.Type {
		case "Shape", "Size", "Constant", "ConstantOfShape":
			folded[id] = true
			continue
		}
		all := true
		for _, t := range op.Inputs {
			if !constant(t) {
				all = false
				break
			}
		}
		folded[id] = all
	}
	return folded
}

// nodeFor finds the optimized node an ORT event times: by name, and
// among nodes sharing a name by the rank of the event's node_index.
func (m *ortMap) nodeFor(name string, index string, indices []int) (int, bool) {
	list := m.byName[name]
	switch len(list) {
	case 0:
		return 0, false
	case 1:
		return list[0], true
	}
	idx, err := strconv.Atoi(index)
	if err != nil {
		return list[0], true
	}
	rank := slices.Index(indices, idx)
	if rank < 0 || len(indices) != len(list) {
		return list[0], true
	}
	return list[rank], true
}

// target maps optimized node i to the graph ops it computes.
func (m *ortMap) target(i int) *target {
	if t, ok := m.cache[i]; ok {
		return t
	}
	t := m.resolve(i)
	m.cache[i] = t
	return t
}

func (m *ortMap) resolve(i int) *target {
	n := m.nodes[i]
	g := m.g
	if m.isLayout(n) {
		t := &target{layout: true, shapeOp: -1}
		if len(n.inputs) == 0 || len(n.outputs) == 0 {
			return t
		}
		tid, ok := m.alias[n.inputs[0]]
		if !ok {
			return t
		}
		// ReorderOutput-like (writes a tensor of the model): the op that
		// produces the tensor; ReorderInput-like: the op of the consuming
		// kernel that reads it. Else the heaviest op of the neighbouring
		// kernel.
		var near []graph.OpID
		if _, orig := g.TensorByName(n.outputs[0]); orig || n.opType == "ReorderOutput" {
			if p := g.Tensors[tid].Producer; p != graph.NoOp && !cost.IsMetadataOp(g.Ops[p].Type) {
				t.ops, t.weight = []graph.OpID{p}, []float64{1}
				return t
			}
			if pi, ok := m.producer[n.inputs[0]]; ok {
				near = m.coveredBy(pi)
			}
		} else {
			for _, c := range m.consumers[n.outputs[0]] {
				if c != i && !m.isLayout(m.nodes[c]) {
					near = m.target(c).ops
					break
				}
			}
			for _, c := range near {
				if slices.Contains(g.Ops[c].Inputs, tid) {
					t.ops, t.weight = []graph.OpID{c}, []float64{1}
					return t
				}
			}
			if len(near) == 0 {
				for _, c := range g.Tensors[tid].Consumers {
					if !cost.IsMetadataOp(g.Ops[c].Type) {
						near = []graph.OpID{c}
						break
					}
				}
			}
		}
		if best, ok := m.heaviest(near); ok {
			t.ops, t.weight = []graph.OpID{best}, []float64{1}
		}
		return t
	}
	var in, out []graph.TensorID
	for _, s := range n.inputs {
		if id, ok := m.alias[s]; ok && !m.constant(id) {
			in = append(in, id)
		}
	}
	for _, s := range n.outputs {
		if id, ok := m.alias[s]; ok {
			out = append(out, id)
		}
	}
	ops := m.between(in, out)
	if len(ops) == 0 {
		if id, ok := nameFallback(g, n.name); ok {
			ops = []graph.OpID{id}
		}
	}
	return m.spread(ops)
}

// coveredBy is the ops optimized node i computes, or nil.
func (m *ortMap) coveredBy(i int) []graph.OpID {
	if i < 0 || i >= len(m.nodes) || m.isLayout(m.nodes[i]) {
		return nil
	}
	return m.target(i).ops
}

func (m *ortMap) heaviest(ops []graph.OpID) (graph.OpID, bool) {
	best, found := graph.OpID(-1), false
	for _, id := range ops {
		if !found || m.est[id] > m.est[best] {
			best, found = id, true
		}
	}
	return best, found
}

func (m *ortMap) constant(t graph.TensorID) bool {
	tt := &m.g.Tensors[t]
	if tt.Producer == graph.NoOp {
		return tt.Kind == graph.Parameter || tt.Kind == graph.Constant
	}
	return m.folded[tt.Producer]
}

// between is the ops on paths from tensors in to tensors out (the ops a
// fused kernel reading in and writing out computes), in g's order: the
// ops upstream of out without passing an in tensor that are downstream
// of an in tensor. With no in, the producers of out.
func (m *ortMap) between(in, out []graph.TensorID) []graph.OpID {
	g := m.g
	stop := map[graph.TensorID]bool{}
	for _, t := range in {
		stop[t] = true
	}
	up := map[graph.OpID]bool{}
	var stack []graph.OpID
	for _, t := range out {
		if p := g.Tensors[t].Producer; p != graph.NoOp && !stop[t] && !up[p] {
			up[p] = true
			stack = append(stack, p)
		}
	}
	if len(in) == 0 {
		return sortedOps(up)
	}
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, t := range g.Ops[id].Inputs {
			if stop[t] || m.constant(t) {
				continue
			}
			if p := g.Tensors[t].Producer; p != graph.NoOp && !up[p] {
				up[p] = true
				stack = append(stack, p)
			}
		}
	}
	// Keep those reachable from an in tensor within up.
	down := map[graph.OpID]bool{}
	for _, t := range in {
		for _, c := range g.Tensors[t].Consumers {
			if up[c] && !down[c] {
				down[c] = true
				stack = append(stack, c)
			}
		}
	}
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, t := range g.Ops[id].Outputs {
			for _, c := range g.Tensors[t].Consumers {
				if up[c] && !down[c] {
					down[c] = true
					stack = append(stack, c)
				}
			}
		}
	}
	return sortedOps(down)
}

func sortedOps(set map[graph.OpID]bool) []graph.OpID {
	ops := make([]graph.OpID, 0, len(set))
	for id := range set {
		ops = append(ops, id)
	}
	slices.Sort(ops)
	return ops
}

// spread splits a kernel's time over ops by the model's estimate.
func (m *ortMap) spread(ops []graph.OpID) *target { return spreadOver(m.est, ops) }

// nameFallback maps an ONNX Runtime node name to a graph op without the
// optimized model: the name itself, without ORT's "_nchwc" and
// "_kernel_time" suffixes, a tensor's name (its producer: ORT names
// NCHWc kernels after the tensor they compute), or a fused node's name
// less its trailing "/...Fusion" parts ("/qkv/MatMul/MatMulAddFusion" ->
// "/qkv/MatMul").
func nameFallback(g *graph.Graph, name string) (graph.OpID, bool) {
	name = strings.TrimSuffix(name, "_kernel_time")
	for _, n := range []string{name, strings.TrimSuffix(name, "_nchwc")} {
		if id, ok := g.OpByName(n); ok {
			return id, true
		}
		if t, ok := g.TensorByName(n); ok {
			if p := g.Tensors[t].Producer; p != graph.NoOp {
				return p, true
			}
		}
	}
	for n := strings.TrimSuffix(name, "/"); strings.Contains(n, "/"); {
		n = n[:strings.LastIndex(n, "/")]
		if id, ok := g.OpByName(n); ok {
			return id, true
		}
	}
	return 0, false
}
