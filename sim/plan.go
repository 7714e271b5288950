package sim

import (
	"fmt"
	"slices"

	"github.com/opplace/opplace/graph"
)

// Placement assigns every op to a device and, optionally, an order.
type Placement struct {
	// Device is the device index of each op (in a replicated stage: the
	// device of the stage's first replica that runs it).
	Device []int
	// Priority orders the ready ops of one device: the lowest value runs
	// first. Nil means the position in the topological order.
	Priority []int32
}

// Schedule names the order in which a pipeline stage runs the forward and
// backward passes of its micro-batches.
type Schedule string

const (
	// OneFOneB is PipeDream-Flush: after min(stages-i-1, M) warm-up
	// forwards, stage i alternates one forward and one backward, so it
	// keeps at most min(M, stages-i) micro-batches of activations alive.
	OneFOneB Schedule = "1f1b"
	// GPipe runs every forward, then every backward.
	GPipe Schedule = "gpipe"
)

// DefaultBucketBytes is the gradient bucket of PyTorch DDP (bucket_cap_mb
// = 25): gradients are all-reduced in buckets of about this size, each as
// soon as every gradient in it is ready, overlapping the backward pass.
const DefaultBucketBytes = 25 << 20

// Sharding is how the replicas of a stage keep their optimizer state and
// weight gradients, and under stage 3 their weights: ZeRO's stages 1 to 3 (Rajbhandari et al., "ZeRO:
// Memory Optimizations Toward Training Trillion Parameter Models", SC20).
// It changes nothing on a stage of one replica, nor in a graph without
// optimizer ops.
type Sharding uint8

const (
	// NoSharding is PyTorch DDP: every replica holds all the optimizer
	// state and gradients, gradients are all-reduced, every replica runs
	// every update.
	NoSharding Sharding = iota
	// ZeRO1 shards the optimizer state: each of r replicas holds 1/r of
	// every state tensor and runs 1/r of every update; gradients are
	// all-reduced as in DDP, and the updated parameters are all-gathered
	// after the updates (PyTorch's ZeroRedundancyOptimizer).
	ZeRO1
	// ZeRO2 also shards the gradients: each bucket is reduce-scattered
	// instead of all-reduced, after which a replica keeps 1/r of its
	// gradients; updates and the all-gather as ZeRO1.
	ZeRO2
	// ZeRO3 also shards the weights (PyTorch FSDP's FULL_SHARD,
	// DeepSpeed's ZeRO stage 3): each replica keeps 1/r of every weight
	// and gathers a module's weights whole before each forward and
	// backward pass of it and frees them after; each module's gradients
	// are reduce-scattered after every micro-batch's backward pass (see
	// fsdp.go). Updates run on the shard, and nothing is gathered after
	// them.
	ZeRO3
)

var shardingNames = [...]string{"none", "zero1", "zero2", "zero3"}

func (z Sharding) String() string {
	if int(z) < len(shardingNames) {
		return shardingNames[z]
	}
	return fmt.Sprintf("Sharding(%d)", z)
}

// ParseSharding reads "none", "zero1", "zero2" or "zero3".
func ParseSharding(s string) (Sharding, error) {
	for i, n := range shardingNames {
		if s == n {
			return Sharding(i), nil
		}
	}
	return 0, fmt.Errorf("unknown sharding %q (use none, zero1, zero2 or zero3)", s)
}

// Stage is a group of devices running a contiguous piece of the graph,
// replicated for data parallelism.
type Stage struct {
	// Replicas[k] lists the devices of replica k. Replicas[0] are the
	// devices the placement names; Replicas[k][i] runs, on its share of
	// every micro-batch, what Replicas[0][i] runs. All replicas have as
	// many devices as the first.
	Replicas [][]int
	// Sharding is how the replicas keep optimizer state, gradients and,
	// under ZeRO3, weights.
	Sharding Sharding
	// Tensor is the stage's tensor-parallel degree t; 0 and 1 mean none.
	// With t > 1 every replica is one tensor-parallel group of exactly t
	// devices, every op of the stage is placed on Replicas[0][0], and the
	// members of a group run their shares of each op (Plan.Split) in
	// lockstep, as Megatron-LM's tensor-parallel layers do.
	Tensor int
	// Recompute is activation recomputation (PyTorch's
	// torch.utils.checkpoint around every module, Megatron-LM's "full"
	// recompute per transformer layer). The stage's forward ops fall into
	// segments: on each device, the ops of one module (the units
	// graph.ModuleKeys gives, such as one transformer block), and one
	// more for the ops outside any module. A segment's checkpoints — the
	// activations a forward op of another segment reads, those read on
	// another device, and the graph's outputs — are kept as usual; every
	// other activation of the segment that backward ops read (saved for
	// backward, the inner tensors of fused ops included) is freed as soon
	// as it is produced and its forward readers are done. When a
	// micro-batch's backward op first needs a freed activation, the
	// segment's forward is run again on the device, its time added to
	// that backward op's, and the segment's saved activations are
	// allocated again at its start and freed after their last backward
	// reader. It changes nothing in a graph without backward ops.
	Recompute bool
}

// TensorSplit is how the members of a tensor-parallel group share a
// graph's ops and tensors (package shard chooses it). It applies to the
// ops and tensors of stages whose Tensor degree is above 1; elsewhere it
// is ignored. Its slices are indexed by op and tensor of the graph the
// plan runs.
type TensorSplit struct {
	// Split[op] is the part of op's work divided evenly among the
	// group: 1 for an op each of t members runs 1/t of, 0 for an op
	// every member runs whole (a replicated op, like Megatron-LM's layer
	// norms); between for a fused kernel of both kinds, of which a member
	// runs (1-s) + s/t. Nil: every op 0.
	Split []float32
	// Divided[t] says each member holds 1/t of tensor t (a column block
	// of a weight, some heads of an activation, and the gradients and
	// optimizer state of a divided weight). Otherwise each member holds
	// it whole: replicated, or a partial sum awaiting its all-reduce.
	Divided []bool
	// Syncs[op] are the collectives op's group runs on tensors op
	// computes. On a tensor op writes, a sync runs on the group's
	// tensor-parallel stream once op's compute is done: the tensor's
	// readers wait for it, the group's other work does not (Megatron-LM's
	// asynchronous tensor-parallel all-reduce). Within op (Sync.Within,
	// or a tensor op does not write) it runs in op's time: the kernel
	// stops for it. Nil: none.
	Syncs [][]Sync
}

// Share is the part of op's work one member of a group of t runs: of the
// op's share s divided among the group, (1-s) + s/t.
func (sp *TensorSplit) Share(op graph.OpID, t int) float64 {
	if sp == nil || sp.Split == nil || t < 2 {
		return 1
	}
	s := float64(sp.Split[op])
	return 1 - s + s/float64(t)
}

// SyncTime is how long op's syncs take over the group x prices when each
// moves 1/div of its tensor (div 1: the whole step's).
func (sp *TensorSplit) SyncTime(x *GroupCollectives, op graph.OpID, div int64) float64 {
	if sp == nil || sp.Syncs == nil {
		return 0
	}
	var t float64
	for _, y := range sp.Syncs[op] {
		t += x.Time(y.Kind, ceilDiv(y.Bytes, div))
	}
	return t
}

// Sync is one collective over a tensor-parallel group, on an activation
// (or an activation's gradient) of the step.
type Sync struct {
	Kind CollectiveKind
	// Tensor is the tensor the collective is on.
	Tensor graph.TensorID
	// Bytes is the collective's buffer for the whole step's batch: the
	// full tensor's size. The simulator takes each micro-batch's and
	// replica's share of it, as it does of the tensor.
	Bytes int64
	// Within says the collective is on an intermediate of op's kernel (a
	// fused kernel whose members a split separates), which Tensor, an
	// output of the kernel, only names: the kernel waits for it.
	Within bool
}

// Plan is one point of opplace's plan space, the only thing the simulator
// runs: the graph cut into stages (S >= 1), each stage on a device group
// replicated r >= 1 times (data parallel over replicas), ops placed on the
// devices of their stage's group, and the step split into micro-batches
// run in a pipeline schedule. The families users know are points of it:
// operator placement (one stage, one replica, one micro-batch), data
// parallelism (one stage of one device replicated N times), pipelines
// (one device per stage) and hybrids.
type Plan struct {
	Placement
	// OpStage is the stage of every op; nil puts every op in stage 0.
	OpStage []int
	// Stages describes each stage's devices; nil means one stage whose
	// only replica is the set of devices the placement uses.
	Stages []Stage
	// MicroBatches splits the step; 0 or 1 runs the whole batch at once.
	MicroBatches int
	// Schedule orders micro-batches in each stage; "" means OneFOneB.
	Schedule Schedule
	// BucketBytes is the gradient all-reduce bucket; 0 means
	// DefaultBucketBytes.
	BucketBytes int64
	// Split is how tensor-parallel stages share ops and tensors; nil
	// when no stage is tensor-parallel.
	Split *TensorSplit
	// Record asks Run for the step's timeline (Result.Runs and
	// Result.Memory), which views and traces draw; searches that only
	// compare step times leave it off.
	Record bool
}

// NumStages is the number of stages the plan has.
func (p *Plan) NumStages() int { return max(1, len(p.Stages)) }

// StageDevices is the plan's stages on a cluster of nd devices: Stages,
// or when nil the one stage whose only replica is the set of devices the
// placement uses, in index order.
func (p *Plan) StageDevices(nd int) []Stage {
	if p.Stages != nil {
		return p.Stages
	}
	used := make([]bool, nd)
	for _, d := range p.Device {
		used[d] = true
	}
	var devs []int
	for d, u := range used {
		if u {
			devs = append(devs, d)
		}
	}
	return []Stage{{Replicas: [][]int{devs}}}
}

// microBatches is the plan's micro-batch count, at least 1.
func (p *Plan) microBatches() int { return max(1, p.MicroBatches) }

// normalise validates p against a graph of n ops on nd devices and
// returns the stage of every op and every stage's replicas, filling the
// defaults.
func (p *Plan) normalise(g *graph.Graph, nd int) ([]int, []Stage, error) {
	n := len(g.Ops)
	if len(p.Device) != n {
		return nil, nil, fmt.Errorf("placement covers %d ops, the graph has %d", len(p.Device), n)
	}
	if p.Priority != nil && len(p.Priority) != n {
		return nil, nil, fmt.Errorf("placement ranks %d ops, the graph has %d", len(p.Priority), n)
	}
	for op, d := range p.Device {
		if d < 0 || d >= nd {
			return nil, nil, fmt.Errorf("op %q is placed on device %d; the cluster has %d", g.Ops[op].Name, d, nd)
		}
	}
	switch p.Schedule {
	case "", OneFOneB, GPipe:
	default:
		return nil, nil, fmt.Errorf("unknown pipeline schedule %q (use 1f1b or gpipe)", p.Schedule)
	}
	if p.MicroBatches < 0 {
		return nil, nil, fmt.Errorf("micro-batches must be positive, got %d", p.MicroBatches)
	}
	opStage := p.OpStage
	if opStage == nil {
		opStage = make([]int, n)
	} else if len(opStage) != n {
		return nil, nil, fmt.Errorf("stage assignment covers %d ops, the graph has %d", len(opStage), n)
	}
	stages := p.StageDevices(nd)
	owner := make([]int, nd) // stage+1 owning each device
	for s, st := range stages {
		if len(st.Replicas) == 0 {
			return nil, nil, fmt.Errorf("stage %d has no replicas", s)
		}
		if st.Sharding > ZeRO3 {
			return nil, nil, fmt.Errorf("stage %d: unknown sharding %d", s, st.Sharding)
		}
		if st.Tensor < 0 {
			return nil, nil, fmt.Errorf("stage %d: tensor-parallel degree %d is negative", s, st.Tensor)
		}
		if st.Tensor > 1 && len(st.Replicas[0]) != st.Tensor {
			return nil, nil, fmt.Errorf("stage %d is tensor-parallel over %d devices, but its replicas have %d", s, st.Tensor, len(st.Replicas[0]))
		}
		for k, rep := range st.Replicas {
			if len(rep) != len(st.Replicas[0]) {
				return nil, nil, fmt.Errorf("stage %d: replica %d has %d devices, replica 0 has %d", s, k, len(rep), len(st.Replicas[0]))
			}
			for _, d := range rep {
				if d < 0 || d >= nd {
					return nil, nil, fmt.Errorf("stage %d names device %d; the cluster has %d", s, d, nd)
				}
				if owner[d] != 0 {
					return nil, nil, fmt.Errorf("device %d is in two replicas or stages", d)
				}
				owner[d] = s + 1
			}
		}
	}
	for op, s := range opStage {
		if s < 0 || s >= len(stages) {
			return nil, nil, fmt.Errorf("op %q is in stage %d; the plan has %d", g.Ops[op].Name, s, len(stages))
		}
		if !slices.Contains(stages[s].Replicas[0], p.Device[op]) {
			return nil, nil, fmt.Errorf("op %q is in stage %d but placed on device %d, outside the stage's first replica", g.Ops[op].Name, s, p.Device[op])
		}
		if st := stages[s]; st.Tensor > 1 && p.Device[op] != st.Replicas[0][0] {
			return nil, nil, fmt.Errorf("op %q is in tensor-parallel stage %d but placed on device %d, not the group's first device %d", g.Ops[op].Name, s, p.Device[op], st.Replicas[0][0])
		}
	}
	if err := p.Split.check(g); err != nil {
		return nil, nil, err
	}
	return opStage, stages, nil
}

// check validates a split against a graph; a nil split is valid.
func (sp *TensorSplit) check(g *graph.Graph) error {
	if sp == nil {
		return nil
	}
	if sp.Split != nil && len(sp.Split) != len(g.Ops) {
		return fmt.Errorf("tensor split covers %d ops, the graph has %d", len(sp.Split), len(g.Ops))
	}
	if sp.Divided != nil && len(sp.Divided) != len(g.Tensors) {
		return fmt.Errorf("tensor split covers %d tensors, the graph has %d", len(sp.Divided), len(g.Tensors))
	}
	if sp.Syncs != nil && len(sp.Syncs) != len(g.Ops) {
		return fmt.Errorf("tensor split has syncs for %d ops, the graph has %d", len(sp.Syncs), len(g.Ops))
	}
	for op, share := range sp.Split {
		if !(share >= 0 && share <= 1) {
			return fmt.Errorf("op %q: split share %v is outside [0, 1]", g.Ops[op].Name, share)
		}
	}
	for op, syncs := range sp.Syncs {
		for _, y := range syncs {
			switch y.Kind {
			case AllReduce, ReduceScatter, AllGather:
			default:
				return fmt.Errorf("op %q: unknown collective %q", g.Ops[op].Name, y.Kind)
			}
			if y.Bytes < 0 || y.Tensor < 0 || int(y.Tensor) >= len(g.Tensors) {
				return fmt.Errorf("op %q: a %s of %d bytes on tensor %d of %d", g.Ops[op].Name, y.Kind, y.Bytes, y.Tensor, len(g.Tensors))
			}
		}
	}
	return nil
}

// tensorDegree is each device's tensor-parallel degree: its stage's
// Tensor for the devices of a tensor-parallel stage's first replica, else
// 1.
func tensorDegree(stages []Stage, nd int) []int {
	tp := make([]int, nd)
	for d := range tp {
		tp[d] = 1
	}
	for _, st := range stages {
		if st.Tensor > 1 {
			for _, d := range st.Replicas[0] {
				tp[d] = st.Tensor
			}
		}
	}
	return tp
}
