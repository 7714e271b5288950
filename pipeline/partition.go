package pipeline

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/partition"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/sim"
)

// Pipeline strategies are "pipeline" (DefaultPartitioner) or
// "pipeline:<partitioner>".
const (
	PipelineStrategy   = "pipeline"
	DefaultPartitioner = "exact"
)

// pipelinePartitioner reports whether strategy asks for pipeline
// parallelism and with which partitioner.
func pipelinePartitioner(strategy string) (string, bool) {
	if strategy == PipelineStrategy {
		return DefaultPartitioner, true
	}
	name, ok := strings.CutPrefix(strategy, PipelineStrategy+":")
	return name, ok
}

// ParseMicroBatches reads a --microbatches value: a positive count, or
// "auto" (0) for the best count under memory.
func ParseMicroBatches(s string) (int, error) {
	if s == "" || s == "auto" {
		return 0, nil
	}
	m, err := strconv.Atoi(s)
	if err != nil || m <= 0 {
		return 0, fmt.Errorf("--microbatches %q: want a positive count or auto", s)
	}
	return m, nil
}

// evaluatePipeline cuts the graph into pipeline stages and turns the
// simulated schedule into the step result plans and comparisons are made
// from: every op on its stage's first device (replicas run the same ops),
// its time the window its stage is busy in the step, and each device's
// peak memory its stage's.
func evaluatePipeline(ctx context.Context, r *run, name string) Outcome {
	o := Outcome{Strategy: PipelineStrategy + ":" + name}
	part, err := partition.New(name)
	if err != nil {
		o.Err = &InputError{fmt.Errorf("unknown pipeline partitioner %q: use one of %v", name, partition.Names())}
		return o
	}
	batch := batchSize(r.model.Graph)
	if r.opts.MicroBatches > 0 && batch > 0 && int64(r.opts.MicroBatches) > batch {
		o.Err = &InputError{fmt.Errorf("--microbatches %d: the batch is %d, so a micro-batch would hold less than one sample", r.opts.MicroBatches, batch)}
		return o
	}
	prob, err := partition.NewProblem(r.problem.Costs, partition.Options{
		Schedule:        partition.Schedule(r.opts.Schedule),
		Objective:       partition.Objective(r.opts.Objective),
		MicroBatches:    r.opts.MicroBatches,
		MaxMicroBatches: int(min(batch, 32)),
	})
	if err != nil {
		o.Err = &InputError{err}
		return o
	}
	begin := time.Now()
	pp, err := part.Partition(ctx, prob)
	o.Solve = time.Since(begin)
	if err != nil {
		o.Err = err
		return o
	}
	n, nd := len(r.problem.Graph.Ops), r.problem.Costs.NumDevices()
	res := &sim.Result{
		Step:  pp.StepMs / 1e3,
		Start: make([]float64, n), End: make([]float64, n),
		PeakMemory: make([]int64, nd), ResidentMemory: make([]int64, nd), Busy: make([]float64, nd),
	}
	placed := sim.Placement{Device: make([]int, n)}
	for op, s := range pp.OpStage {
		st := &pp.Stages[s]
		placed.Device[op] = st.DeviceIndex[0]
		res.Start[op], res.End[op] = st.StartMs/1e3, st.EndMs/1e3
	}
	for _, st := range pp.Stages {
		for _, d := range st.DeviceIndex {
			res.PeakMemory[d] = st.PeakMemoryBytes
			res.Busy[d] = (st.ComputeMs*float64(pp.MicroBatches) + st.SyncMs) / 1e3
		}
	}
	o.Placement, o.Sim, o.Pipeline = placed, res, pp
	o.Fits = r.problem.Fits(res)
	o.Notes = pp.Warnings
	return o
}

// batchSize is the leading dimension of the graph's first shaped input:
// the batch a step splits into micro-batches, or 0 when it is unknown.
func batchSize(g *graph.Graph) int64 {
	for _, in := range g.Inputs {
		if t := &g.Tensors[in]; t.ShapeKnown && len(t.Shape) > 0 {
			return t.Shape[0]
		}
	}
	return 0
}

// pipelineBound is the bound a pipelined step is held to: pipelining
// overlaps micro-batches along the critical path, so only the work part
// of the bound holds for it.
func pipelineBound(b cost.Bound) cost.Bound { return cost.Bound{Throughput: b.Throughput} }

// crossDeviceBytes is what a pipeline sends between stages in a step:
// activations forward and, when training, as much again as gradients.
func crossDeviceBytes(pp *partition.Plan) int64 {
	var b int64
	for _, st := range pp.Stages {
		b += st.SendBytes
	}
	if pp.Training {
		b *= 2
	}
	return b
}

// addPipeline writes the stages into the plan, once its ops are the
// original ones again (after fusion expanded them).
func addPipeline(r *run) {
	pp, p := r.pipeline, r.plan
	if pp == nil {
		return
	}
	p.Schedule, p.MicroBatches = string(pp.Schedule), pp.MicroBatches
	p.BottleneckMS, p.BubbleFraction = plan.MS(pp.BottleneckMs/1e3), plan.Fraction(pp.BubbleFraction)
	p.Warnings = append(p.Warnings, pp.Warnings...)
	stageOf := map[string]int{}
	for i, st := range pp.Stages {
		stageOf[st.Devices[0]] = i
		p.Stages = append(p.Stages, plan.Stage{
			Index: st.Index, DeviceType: st.DeviceType, Devices: st.Devices, Replicas: st.Replicas,
			ComputeMS: plan.MS(st.ComputeMs / 1e3), CommMS: plan.MS(st.CommMs / 1e3), SyncMS: plan.MS(st.SyncMs / 1e3),
			TimeMS: plan.MS(st.TimeMs / 1e3), SendBytes: st.SendBytes, PeakMemoryBytes: st.PeakMemoryBytes,
			AliveMicroBatches: st.AliveMicroBatches,
		})
	}
	forward := make([][]string, len(p.Stages))
	for _, op := range p.Ops {
		s := stageOf[op.Device]
		st := &p.Stages[s]
		st.Ops = append(st.Ops, op.Name)
		if op.Phase == "forward" {
			forward[s] = append(forward[s], op.Name)
		}
	}
	for i, names := range forward {
		if len(names) > 0 {
			st := &p.Stages[i]
			st.FirstOp, st.LastOp = names[0], names[len(names)-1]
			st.ModulePrefix = partition.ModulePrefix(names)
		}
	}
}
