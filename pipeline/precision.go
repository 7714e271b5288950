package pipeline

import (
	"fmt"
	"slices"
	"strings"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/sim"
	"github.com/opplace/opplace/train"
)

// applyPrecision rewrites the forward graph for the precision the
// options ask for (train.ApplyPrecision), before the training step is
// built from it, so the step's gradients, saved activations and
// all-reduces carry the precision's types and every strategy and the
// simulator see them. It refuses what the precision cannot mean: a graph
// whose op times were measured, a file that carries its own backward
// ops, and amp-bf16 on a device type with half-precision tensor cores but
// no bfloat16 (V100, T4).
func applyPrecision(r *run) error {
	p, err := train.ParsePrecision(r.opts.Precision)
	if err != nil {
		return &InputError{err}
	}
	r.precision = p
	if p == train.PrecisionDefault || p == train.FP32 {
		r.forward = r.model.Graph // for precisionHint
	}
	if p == train.PrecisionDefault {
		return nil
	}
	if r.model.Costs != nil {
		return &InputError{fmt.Errorf("precision %s: %s carries measured op times, which are planned as measured; plan it without a precision", p, r.opts.ModelPath)}
	}
	if hasPhase(r.model.Graph, graph.Backward) {
		return &InputError{fmt.Errorf("precision %s: %s carries its own backward ops, in the types it declares; plan it without a precision", p, r.opts.ModelPath)}
	}
	var noHalf, noTF32 []string
	for _, dt := range deviceTypes(r.cluster) {
		_, bf16 := dt.PeakFLOPS[graph.BFloat16]
		_, fp16 := dt.PeakFLOPS[graph.Float16]
		switch {
		case p == train.AMPBF16 && !bf16 && fp16:
			return &InputError{fmt.Errorf("precision amp-bf16: device type %s has float16 tensor cores but no bfloat16 (PyTorch's bfloat16 autocast needs compute capability 8.0, Ampere or later); use amp-fp16, or give the type a bfloat16 figure in the cluster file", dt.Name)}
		case p == train.AMPBF16 && !bf16, p == train.AMPFP16 && !fp16:
			noHalf = append(noHalf, dt.Name)
		case p == train.TF32 && dt.TF32FLOPS == 0:
			noTF32 = append(noTF32, dt.Name)
		}
	}
	if len(noHalf) > 0 {
		r.model.Warnings = append(r.model.Warnings, fmt.Sprintf("precision %s: %s %s no %s figure: half-precision ops run there at the float32 figure",
			p, strings.Join(noHalf, ", "), plural(len(noHalf), "has", "have"), p.Half()))
	}
	if len(noTF32) > 0 {
		r.model.Warnings = append(r.model.Warnings, fmt.Sprintf("precision tf32: %s %s no TF32 tensor cores: float32 matmuls run there at the float32 figure, as PyTorch runs them",
			strings.Join(noTF32, ", "), plural(len(noTF32), "has", "have")))
	}
	if r.opts.CostModel != nil {
		r.model.Warnings = append(r.model.Warnings, fmt.Sprintf("precision %s: the profile's measured op times are used as measured; only the ops it has no time for are costed in %s", p, p))
	}
	g, _, err := train.ApplyPrecision(r.model.Graph, p)
	if err != nil {
		return &InputError{fmt.Errorf("%s: %w", r.opts.ModelPath, err)}
	}
	r.model.Graph = g
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// deviceTypes lists c's distinct device types in device order.
func deviceTypes(c *cluster.Cluster) []*cluster.DeviceType {
	var types []*cluster.DeviceType
	for i := range c.Devices {
		if t := c.Devices[i].Type; !slices.Contains(types, t) {
			types = append(types, t)
		}
	}
	return types
}

// precisionHint says, for a float32 plan costed by the roofline on a
// cluster with bfloat16 tensor cores, what amp-bf16 would change: the
// step's ops summed on one device of the first such type, as planned and
// as amp-bf16 would run them (the forward graph rewritten by autocast,
// its training step built again and costed by the same roofline; no
// placement or simulation, so it costs about what the train stage did).
// Empty otherwise.
func precisionHint(r *run) string {
	if r.forward == nil || r.model.Costs != nil {
		return ""
	}
	model := r.costModel()
	if f, ok := model.(fusedCosts); ok {
		model = f.fine
	}
	roof, ok := model.(cost.Roofline)
	if !ok {
		return "" // measured times: the estimate would not be theirs
	}
	var dt *cluster.DeviceType
	for _, t := range deviceTypes(r.cluster) {
		if t.FLOPS(graph.BFloat16) >= 2*t.FLOPS(graph.Float32) {
			dt = t
			break
		}
	}
	if dt == nil {
		return ""
	}
	amp, _, err := train.ApplyPrecision(r.forward, train.AMPBF16)
	if err != nil {
		return ""
	}
	if r.opts.Mode == ModeTrain {
		opt, err := train.ParseOptimizer(r.opts.Optimizer)
		if err != nil {
			return ""
		}
		if amp, _, err = train.Build(amp, train.Options{Optimizer: opt}); err != nil {
			return ""
		}
	}
	planned := r.model.Graph
	if r.fused != nil {
		planned = r.fused.coarse.Fine
	}
	sum := func(g *graph.Graph) float64 {
		var s float64
		for i := range g.Ops {
			s += roof.OpTime(g, graph.OpID(i), dt)
		}
		return s
	}
	fp32, half := sum(planned), sum(amp)
	if half <= 0 || fp32 < 1.05*half {
		return ""
	}
	return fmt.Sprintf("float32 on %s, which has bfloat16 tensor cores: the step's ops take %.1f ms summed on one device, %.1f ms (%.1fx less) with precision amp-bf16 (the step rewritten by autocast and costed alike; placement and communication not redone: plan with amp-bf16 to see which plan wins)",
		dt.Name, 1e3*fp32, 1e3*half, fp32/half)
}

// memoryBreakdown is each device's plan.MemoryBreakdown for placement pl
// of g on nd devices: a parameter read by a forward or backward op is a
// weight on that op's device, one read only by optimizer ops is state; a
// cast of a parameter (train.AutocastDomain) is a half-precision working
// copy; a backward op's output an optimizer op reads is a weight
// gradient. A tensor-parallel group's members each hold 1/t of the
// tensors the split divides (pl.Split.Divided) and the rest whole, as
// the leader the stage's ops are placed on does. A replica's devices hold
// what the first replica's do.
func memoryBreakdown(g *graph.Graph, pl *sim.Plan, nd int) []*plan.MemoryBreakdown {
	out := make([]*plan.MemoryBreakdown, nd)
	for d := range out {
		out[d] = &plan.MemoryBreakdown{}
	}
	// divide[d] is the tensor-parallel degree of the group d leads.
	divide := make([]int64, nd)
	for _, st := range pl.StageDevices(nd) {
		if st.Tensor > 1 && len(st.Replicas) > 0 && len(st.Replicas[0]) > 0 {
			divide[st.Replicas[0][0]] = int64(st.Tensor)
		}
	}
	seen := map[[2]int]bool{} // (tensor, device) counted
	add := func(t graph.TensorID, d int, field *int64) {
		if k := [2]int{int(t), d}; !seen[k] {
			seen[k] = true
			b := g.Tensors[t].Bytes()
			if n := divide[d]; n > 1 && pl.Split != nil && pl.Split.Divided != nil && pl.Split.Divided[t] {
				b = (b + n - 1) / n
			}
			*field += b
		}
	}
	for i := range g.Tensors {
		t := &g.Tensors[i]
		id := graph.TensorID(i)
		switch {
		case t.Kind == graph.Parameter:
			state := !slices.ContainsFunc(t.Consumers, func(c graph.OpID) bool { return g.Ops[c].Phase != graph.Update })
			for _, c := range t.Consumers {
				b := out[pl.Device[c]]
				if state {
					add(id, pl.Device[c], &b.OptimizerStateBytes)
				} else if g.Ops[c].Phase != graph.Update {
					add(id, pl.Device[c], &b.WeightBytes)
				}
			}
		case t.Producer != graph.NoOp:
			p := &g.Ops[t.Producer]
			d := pl.Device[t.Producer]
			if p.Domain == train.AutocastDomain && p.Phase == graph.Forward && g.Tensors[p.Inputs[0]].Kind == graph.Parameter {
				add(id, d, &out[d].HalfWeightBytes)
			}
			if p.Phase == graph.Backward && slices.ContainsFunc(t.Consumers, func(c graph.OpID) bool { return g.Ops[c].Phase == graph.Update }) {
				add(id, d, &out[d].GradientBytes)
			}
		}
	}
	for _, st := range pl.StageDevices(nd) {
		// ZeRO: each replica keeps its 1/r shard of the optimizer state,
		// under ZeRO-2 and 3 of the gradients once reduce-scattered, and
		// under ZeRO-3 of the weights and their half copies (the weights
		// a module gathers whole for a pass are activations here).
		if r := int64(len(st.Replicas)); r > 1 && st.Sharding >= sim.ZeRO1 {
			for _, d := range st.Replicas[0] {
				b := out[d]
				b.OptimizerStateBytes = (b.OptimizerStateBytes + r - 1) / r
				if st.Sharding >= sim.ZeRO2 {
					b.GradientBytes = (b.GradientBytes + r - 1) / r
				}
				if st.Sharding == sim.ZeRO3 {
					b.WeightBytes = (b.WeightBytes + r - 1) / r
					b.HalfWeightBytes = (b.HalfWeightBytes + r - 1) / r
				}
			}
		}
		if st.Tensor > 1 {
			for _, d := range st.Replicas[0][1:] {
				b := *out[st.Replicas[0][0]]
				out[d] = &b
			}
		}
		for _, rep := range st.Replicas[1:] {
			for i, d := range rep {
				b := *out[st.Replicas[0][i]]
				out[d] = &b
			}
		}
	}
	return out
}
