package export

import (
	"fmt"
	"slices"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/plan"
)

// launch is the shape of a training plan that runs as tensor x pipeline
// x data parallelism, as Megatron-LM and torch's launchers take it: every
// stage the same replica count, tensor degree, ZeRO level and micro-batch
// size.
type launch struct {
	// Stages are the plan's stages in index order.
	Stages []plan.Stage
	// TP, PP and DP are the tensor-parallel degree (1 without), the
	// stages and the replicas of each.
	TP, PP, DP int
	// MicroBatch is the samples per replica per micro-batch; Accum the
	// micro-batches per step (gradient accumulation steps).
	MicroBatch int64
	Accum      int
	// Sharding is the stages' ZeRO level ("", zero1, zero2, zero3), Recompute
	// whether every stage recomputes.
	Sharding  string
	Recompute bool
	// Types are the device types the plan runs on.
	Types []string
}

// launchShape checks that p is a training plan of uniform stages that
// target can launch, and returns its shape. Every refusal names the plan
// field and what to do; runtime names the runtime in messages.
func launchShape(p *plan.Plan, o Options, runtime string) (*launch, error) {
	src := o.source()
	if p.Mode != "" && p.Mode != "train" {
		return nil, errorf(Invalid, "%s: mode %q: %s takes a training plan (plan the training step, not inference)", src, p.Mode, runtime)
	}
	if p.Batch <= 0 {
		return nil, errorf(Invalid, "%s: batch: the plan's batch is unknown, and %s needs the global and micro-batch sizes (plan a model whose inputs have a batch dimension, or bind its batch)", src, runtime)
	}
	if len(p.Stages) == 0 {
		return nil, errorf(Invalid, "%s: stages: the plan has none", src)
	}
	stages := slices.Clone(p.Stages)
	slices.SortFunc(stages, func(a, b plan.Stage) int { return a.Index - b.Index })
	for i, st := range stages {
		if st.Index != i {
			return nil, errorf(Invalid, "%s: stages: indices are not 0..%d (found %d at position %d); is the plan file edited?", src, len(stages)-1, st.Index, i)
		}
	}
	first := stages[0]
	tp := func(st plan.Stage) int { return max(st.TensorParallel, 1) }
	for _, st := range stages {
		switch {
		case len(st.ReplicaDevices) > 0 && st.TensorParallel <= 1:
			fam := p.Family
			if fam == "" {
				fam = "placement or hybrid"
			}
			return nil, errorf(Invalid, "%s: stages[%d].replica_devices: a replica spans %d devices placed op by op (a %s plan), and %s runs a replica as whole layers on tensor-parallel groups: plan with the dp, tensor or a pipeline strategy", src, st.Index, len(st.ReplicaDevices[0]), fam, runtime)
		case st.Replicas != first.Replicas:
			return nil, errorf(Invalid, "%s: stages[%d].replicas: %d against stage 0's %d: %s runs every stage on the same data-parallel degree (replan, or run the stages without their replicas)", src, st.Index, st.Replicas, first.Replicas, runtime)
		case tp(st) != tp(first):
			return nil, errorf(Invalid, "%s: stages[%d].tensor_parallel: %d against stage 0's %d: %s runs one tensor-parallel degree for the whole model", src, st.Index, tp(st), tp(first), runtime)
		case st.Sharding != first.Sharding:
			return nil, errorf(Invalid, "%s: stages[%d].sharding: %q against stage 0's %q: %s takes one ZeRO level for the whole model", src, st.Index, st.Sharding, first.Sharding, runtime)
		case st.Recompute != first.Recompute:
			return nil, errorf(Invalid, "%s: stages[%d].recompute: only some stages recompute, and %s recomputes all layers or none (plan with recomputation in every stage or in none)", src, st.Index, runtime)
		case st.MicroBatchSize <= 0:
			return nil, errorf(Invalid, "%s: stages[%d].micro_batch_size: missing: the plan predates whole micro-batches; plan again", src, st.Index)
		case st.MicroBatchSize != first.MicroBatchSize:
			return nil, errorf(Invalid, "%s: stages[%d].micro_batch_size: %d against stage 0's %d: %s runs one micro-batch size", src, st.Index, st.MicroBatchSize, first.MicroBatchSize, runtime)
		}
	}
	switch first.Sharding {
	case "", "zero1", "zero2", "zero3":
	default:
		return nil, errorf(Invalid, "%s: stages[0].sharding: %q is no ZeRO level opplace plans (zero1, zero2 or zero3)", src, first.Sharding)
	}
	l := &launch{Stages: stages, TP: tp(first), PP: len(stages), DP: first.Replicas, MicroBatch: first.MicroBatchSize,
		Accum: max(p.MicroBatches, 1), Sharding: first.Sharding, Recompute: first.Recompute}
	if l.MicroBatch*int64(l.Accum)*int64(l.DP) != p.Batch {
		return nil, errorf(Invalid, "%s: stages[0].micro_batch_size: %d x %d micro-batches x %d replicas is not the batch of %d; is the plan file edited?", src, l.MicroBatch, l.Accum, l.DP, p.Batch)
	}
	for _, d := range p.Devices {
		if d.Ops > 0 && !slices.Contains(l.Types, d.Type) {
			l.Types = append(l.Types, d.Type)
		}
	}
	return l, nil
}

// medianBucket is the plan's median gradient bucket of a stage in bytes
// (0 without any): the simulator fills buckets to a cap, but for the last
// and for tensors larger than it, so the median is the cap's size.
func medianBucket(p *plan.Plan, stage int) int64 {
	var buckets []int64
	for _, a := range p.AllReduces {
		if a.Tensor == "" && a.Kind != "all-gather" && a.Stage == stage {
			buckets = append(buckets, a.Bytes)
		}
	}
	if len(buckets) == 0 {
		return 0
	}
	slices.Sort(buckets)
	return buckets[len(buckets)/2]
}

// blockOf splits a module's FQN at its first numbered atom: the container
// of numbered modules ("blocks", "encoder.layers") and the numbered module
// the FQN is in ("blocks.6" for blocks.6.attn.qkv); both empty when no
// atom after the first is a number.
func blockOf(fqn string) (container, block string) {
	atoms := strings.Split(fqn, ".")
	for i := 1; i < len(atoms); i++ {
		if isNumber(atoms[i]) {
			return strings.Join(atoms[:i], "."), strings.Join(atoms[:i+1], ".")
		}
	}
	return "", ""
}

// blocks are a model's repeated layers as its op names show them: the
// numbered modules of the container that holds the most (GPT-2's
// blocks.0 .. blocks.11 in blocks), in the order the plan lists their
// forward ops.
type blocks struct {
	Container string
	Names     []string
}

func (b *blocks) has(fqn string) bool { return slices.Contains(b.Names, fqn) }

// modelBlocks finds the repeated layers of p's model; nil when no
// container holds two or more numbered modules.
func modelBlocks(p *plan.Plan) *blocks {
	per := map[string][]string{}
	var order []string
	for _, op := range p.Ops {
		path := modulePath(op.Name)
		if op.Phase != "forward" || path == "" || graph.Bookkeeping(op.Type) {
			continue
		}
		c, b := blockOf(FQN(path))
		if b == "" || slices.Contains(per[c], b) {
			continue
		}
		if per[c] == nil {
			order = append(order, c)
		}
		per[c] = append(per[c], b)
	}
	best := ""
	for _, c := range order {
		if len(per[c]) > len(per[best]) {
			best = c
		}
	}
	if len(per[best]) < 2 {
		return nil
	}
	return &blocks{Container: best, Names: per[best]}
}

// linear is one module whose forward op multiplies by a weight, with the
// split a tensor-parallel plan gives that op.
type linear struct {
	FQN, Op, Type, Shard string
	// Index is the op's index in the plan's ops; Param is set when the
	// plan updates a parameter of the module itself (its weight).
	Index int
	Param bool
}

// weightOps are the forward MatMul, Gemm and Conv ops of p that read a
// weight, by module: those a tensor-parallel plan splits by column or row
// (only a weight's matmul is), and those of a module holding a parameter
// the plan updates (a token split or a replicated weight's matmul).
func weightOps(p *plan.Plan) []linear {
	params := map[string]bool{} // modules with a parameter
	for _, op := range p.Ops {
		if op.Phase != "update" {
			continue
		}
		name, _, ok := strings.Cut(op.Name, "/")
		if i := strings.LastIndexByte(name, '.'); ok && i > 0 {
			params[name[:i]] = true
		}
	}
	var out []linear
	for i, op := range p.Ops {
		path := modulePath(op.Name)
		if op.Phase != "forward" || path == "" || (op.Type != "MatMul" && op.Type != "Gemm" && op.Type != "Conv") {
			continue
		}
		fqn := FQN(path)
		if op.Shard == "column" || op.Shard == "row" || params[fqn] {
			out = append(out, linear{FQN: fqn, Op: op.Name, Type: op.Type, Shard: op.Shard, Index: i, Param: params[fqn]})
		}
	}
	return out
}

// stepLine is the "step:" line of a header: the predicted step, the batch
// and the throughput.
func stepLine(p *plan.Plan) string {
	step := fmt.Sprintf("%s predicted", plan.FormatMS(p.PredictedStepMS))
	if p.Batch > 0 {
		step += fmt.Sprintf(", batch %d, %.1f samples/s", p.Batch, p.ThroughputSamplesPerS)
	}
	return step
}
