package pipeline

import (
	"context"
	"errors"
	"fmt"
	"github.com/opplace/opplace/constraint"
	"math"
	"slices"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/partition"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/sim"
	"github.com/opplace/opplace/strategy"
	"github.com/opplace/opplace/train"
)

// assemble writes the kept plan and its simulated step into the plan
// document: devices, ops, transfers, all-reduces, stages and, for auto,
// every candidate and why it lost.
func assemble(_ context.Context, r *run) error {
	if err := recordTimeline(r); err != nil {
		return err
	}
	g, c, res, pl := r.model.Graph, r.cluster, r.sim, r.placed
	o := r.outcomes[r.chosen]
	if !r.problem.Fits(res) {
		// The bounds that count memory hold for plans that fit.
		r.bound = r.bound.Unfitting()
		r.boundKind = r.bound.Kind()
	}
	p := &plan.Plan{
		Model:           r.opts.ModelPath,
		Cluster:         c.Name,
		Strategy:        r.strategy,
		Family:          o.Family,
		Mode:            r.opts.Mode,
		Precision:       string(r.precision),
		PrecisionHint:   precisionHint(r),
		PredictedStepMS: plan.MS(res.Step),
		LowerBoundMS:    plan.MS(r.bound.Seconds()),
		LowerBoundKind:  r.boundKind,
		LowerBounds:     lowerBounds(r.bound),
		Batch:           r.problem.Batch,
		Fits:            r.problem.Fits(res),
		MicroBatches:    res.MicroBatches,
		Warnings:        slices.Clone(r.model.Warnings),
		Notes:           slices.Clone(o.Notes),
	}
	if o.Estimate > 0 {
		p.EstimatedStepMS = plan.MS(o.Estimate)
	}
	p.ThroughputSamplesPerS = throughput(r.problem.Batch, res.Step)
	if lb := r.bound.Seconds(); lb > 0 {
		p.Gap = plan.Fraction(res.Step/lb - 1)
	}
	p.Candidates = candidates(r)
	opsOn := make([]int, len(c.Devices))
	for _, d := range pl.Device {
		opsOn[d]++
	}
	var breakdown []*plan.MemoryBreakdown
	if r.precision != train.PrecisionDefault {
		fg, fpl := g, pl
		if r.fused != nil { // the fine graph's ops, on their fused op's device
			cg := r.fused.coarse
			fg = cg.Fine
			dev := make([]int, len(fg.Ops))
			for k, members := range cg.Members {
				for _, f := range members {
					dev[f] = pl.Device[k]
				}
			}
			fpl = &sim.Plan{Placement: sim.Placement{Device: dev}, Stages: pl.StageDevices(len(c.Devices))}
			if o.Tensor != nil {
				// The split as the tensor strategy chose it, on the
				// graph before fusion.
				fpl.Split = o.Tensor.Split
			}
		}
		breakdown = memoryBreakdown(fg, fpl, len(c.Devices))
	}
	curves := map[*sim.MemorySample][]plan.MemorySample{} // replicas share their first's samples
	for i, d := range c.Devices {
		var b *plan.MemoryBreakdown
		if breakdown != nil {
			b = breakdown[i]
		}
		var curve []plan.MemorySample
		if samples := res.Memory[i]; len(samples) > 0 {
			cv, ok := curves[&samples[0]]
			if !ok {
				cv = memoryCurve(samples, res.Step)
				curves[&samples[0]] = cv
			}
			curve = slices.Clone(cv)
		}
		p.Devices = append(p.Devices, plan.Device{Breakdown: b,
			Name: d.Name, Type: d.Type.Name, Host: c.Hosts[d.Host].Name,
			MemoryBytes: d.Memory, PeakMemoryBytes: res.PeakMemory[i], ResidentBytes: res.ResidentMemory[i],
			BusyMS: plan.MS(res.Busy[i]), Ops: opsOn[i], Memory: curve,
		})
	}
	if r.rules != nil {
		for i := range p.Devices {
			p.Devices[i].ReservedBytes = r.rules.res.Reserved[i]
		}
		p.Rules = r.rules.report(pl)
	}
	runs := opRuns(res, len(g.Ops))
	p.Ops = make([]plan.Op, 0, len(r.problem.Order))
	for _, id := range r.problem.Order {
		op := &g.Ops[id]
		p.Ops = append(p.Ops, plan.Op{
			Name: op.Name, Type: op.Type, Phase: op.Phase.String(), Device: c.Devices[pl.Device[id]].Name,
			StartMS: plan.MS(res.Start[id]), EndMS: plan.MS(res.End[id]), Runs: runs[id],
		})
	}
	p.Transfers = make([]plan.Transfer, 0, len(res.Transfers))
	for _, t := range res.Transfers {
		p.CrossDeviceBytes += t.Bytes
		p.Transfers = append(p.Transfers, plan.Transfer{
			Tensor: g.Tensors[t.Tensor].Name, MicroBatch: t.MicroBatch, From: c.Devices[t.From].Name, To: c.Devices[t.To].Name,
			Bytes: t.Bytes, StartMS: plan.MS(t.Start), EndMS: plan.MS(t.End),
		})
	}
	for _, a := range res.Collectives {
		ar := plan.AllReduce{Kind: string(a.Kind), Stage: a.Stage, Devices: deviceNames(r, a.Devices),
			Bytes: a.Bytes, StartMS: plan.MS(a.Start), EndMS: plan.MS(a.End)}
		if a.Tensor >= 0 {
			ar.Tensor = g.Tensors[a.Tensor].Name
		}
		p.AllReduces = append(p.AllReduces, ar)
	}
	r.plan = p
	if err := expandFusion(r); err != nil {
		return err
	}
	if ts := o.Tensor; ts != nil {
		// The split is on the original graph, whose ops the plan lists.
		for i := range p.Ops {
			if id, ok := r.model.Graph.OpByName(p.Ops[i].Name); ok && int(id) < len(ts.Choice) {
				p.Ops[i].Shard = ts.Choice[id]
			}
		}
	}
	addStages(r, o.Pipeline)
	addRuntime(r)
	return nil
}

// recordTimeline simulates the kept plan again, recording every op run
// and each device's memory over the step for the plan's views; the
// search compared step times only. The simulator is deterministic, so the
// step must come out as before.
func recordTimeline(r *run) error {
	if r.placed == nil || r.sim == nil || r.sim.Runs != nil {
		return nil
	}
	p := *r.placed
	p.Record = true
	res, err := r.problem.Simulate(&p)
	if err != nil {
		return err
	}
	if !r.sim.Agrees(res) {
		return fmt.Errorf("the plan's step came out %g s when simulated again, %g s before", res.Step, r.sim.Step)
	}
	r.sim = res
	return nil
}

// opRuns groups the recorded runs of ops that run more than once.
func opRuns(res *sim.Result, n int) [][]plan.Run {
	out := make([][]plan.Run, n)
	for i := 0; i < len(res.Runs); {
		j := i + 1
		for j < len(res.Runs) && res.Runs[j].Op == res.Runs[i].Op {
			j++
		}
		if j-i > 1 {
			runs := make([]plan.Run, j-i)
			for k, run := range res.Runs[i:j] {
				runs[k] = plan.Run{MicroBatch: run.MicroBatch, StartMS: plan.MS(run.Start), EndMS: plan.MS(run.End)}
			}
			out[res.Runs[i].Op] = runs
		}
		i = j
	}
	return out
}

// memoryCurve is a device's recorded memory as the plan's bounded curve.
func memoryCurve(samples []sim.MemorySample, step float64) []plan.MemorySample {
	if len(samples) == 0 {
		return nil
	}
	out := make([]plan.MemorySample, len(samples))
	for i, s := range samples {
		out[i] = plan.MemorySample{MS: plan.MS(s.Time), Bytes: s.Bytes}
	}
	return plan.MemoryEnvelope(out, plan.MS(step), plan.MemorySamples)
}

// throughput is samples per second at a step of the given seconds.
func throughput(batch int64, step float64) float64 {
	if batch <= 0 || step <= 0 {
		return 0
	}
	return math.Round(float64(batch)/step*1e3) / 1e3
}

func deviceNames(r *run, devs []int) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = r.cluster.Devices[d].Name
	}
	return out
}

// shape summarises a plan: "1 stage x 8 replicas", "4 stages (2,2,2,2
// replicas)", with the micro-batches when more than one.
func shape(p *sim.Plan, res *sim.Result, nd int) string {
	if p == nil {
		return ""
	}
	stages := p.StageDevices(nd)
	reps := make([]string, len(stages))
	same := true
	for i, st := range stages {
		reps[i] = fmt.Sprint(len(st.Replicas))
		same = same && reps[i] == reps[0]
	}
	var b strings.Builder
	switch {
	case len(stages) == 1:
		fmt.Fprintf(&b, "1 stage of %d device(s) x %s replica(s)", len(stages[0].Replicas[0]), reps[0])
	case same:
		fmt.Fprintf(&b, "%d stages x %s replica(s)", len(stages), reps[0])
	default:
		fmt.Fprintf(&b, "%d stages (%s replicas)", len(stages), strings.Join(reps, ","))
	}
	if t := stages[0].Tensor; t > 1 {
		fmt.Fprintf(&b, ", tensor-parallel groups of %d", t)
	}
	if m := res.MicroBatches; m > 1 {
		fmt.Fprintf(&b, ", %d micro-batches", m)
	}
	var zs []string
	for _, st := range stages {
		if z := sharding(st); z != "" && !slices.Contains(zs, z) {
			zs = append(zs, z)
		}
	}
	if len(zs) > 0 {
		fmt.Fprintf(&b, ", %s", strings.Join(zs, ","))
	}
	if slices.ContainsFunc(stages, func(st sim.Stage) bool { return st.Recompute }) {
		b.WriteString(", recompute")
	}
	return b.String()
}

// candidates lists every strategy tried, best first, with why each lost.
func candidates(r *run) []plan.Candidate {
	if len(r.outcomes) < 2 {
		return nil
	}
	best := r.outcomes[r.chosen]
	var out []plan.Candidate
	var broke *constraint.Violation
	for i, o := range r.outcomes {
		c := plan.Candidate{Strategy: o.Strategy, Family: o.Family, Fits: o.Fits, SolveMS: plan.MS(o.Solve.Seconds())}
		if o.Sim != nil {
			c.PredictedStepMS = plan.MS(o.Sim.Step)
			c.ThroughputSamplesPerS = throughput(r.problem.Batch, o.Sim.Step)
			c.PeakMemoryBytes = slices.Max(o.Sim.PeakMemory)
			c.Shape = shape(o.Plan, o.Sim, len(r.cluster.Devices))
		}
		why, chooser := r.why[o.Strategy]
		switch {
		case i == r.chosen:
		case chooser:
			c.Why = why
			if o.Err != nil {
				c.Error = o.Err.Error()
			}
		case o.Pruned != "":
			c.Why = "pruned: " + o.Pruned
		case o.Err != nil && errors.Is(o.Err, strategy.ErrNotApplicable):
			c.Why = "not applicable"
			c.Error = o.Err.Error()
		case o.Sim != nil && !o.Fits:
			c.Why = "does not fit"
			c.Error = o.Err.Error()
		case errors.As(o.Err, &broke):
			c.Why = "breaks a rule"
			c.Error = o.Err.Error()
		case o.Err != nil:
			c.Why = "failed"
			c.Error = o.Err.Error()
		case (o.Penalty > 0 || best.Penalty > 0) && o.Objective() <= best.Objective()*(1+1e-9):
			c.Why = fmt.Sprintf("same step and soft rules' penalty as %s (%.3f ms)", best.Strategy, best.Penalty*1e3)
		case o.Penalty > 0 || best.Penalty > 0:
			c.Why = fmt.Sprintf("%.1f%% slower with the soft rules' penalties (%.3f ms here, %.3f ms for %s)",
				100*(o.Objective()/best.Objective()-1), o.Penalty*1e3, best.Penalty*1e3, best.Strategy)
		case o.Sim.Step <= best.Sim.Step*(1+1e-9):
			c.Why = "same step as " + best.Strategy + " to the nanosecond"
		default:
			c.Why = fmt.Sprintf("%.1f%% slower", 100*(o.Sim.Step/best.Sim.Step-1))
		}
		out = append(out, c)
	}
	slices.SortStableFunc(out, func(a, b plan.Candidate) int {
		ra, rb := candidateRank(a), candidateRank(b)
		if ra != rb {
			return ra - rb
		}
		switch {
		case a.PredictedStepMS < b.PredictedStepMS:
			return -1
		case a.PredictedStepMS > b.PredictedStepMS:
			return 1
		}
		return 0
	})
	return out
}

// candidateRank orders fitting plans first, then ones that do not fit,
// then failures, then strategies pruned or not applicable.
func candidateRank(c plan.Candidate) int {
	switch {
	case strings.HasPrefix(c.Why, "pruned") || c.Why == "not applicable":
		return 3
	case c.Error != "" && c.PredictedStepMS == 0:
		return 2
	case !c.Fits:
		return 1
	}
	return 0
}

// addStages writes the plan's stages, once its ops are the original ones
// again (after fusion expanded them): one stage for a placement or a
// data-parallel plan, one per pipeline stage otherwise, each with its
// split points and its share of the simulated step.
func addStages(r *run, pp *partition.Plan) {
	p, pl, res, g := r.plan, r.placed, r.sim, r.model.Graph
	S, M := pl.NumStages(), res.MicroBatches
	if S > 1 || M > 1 {
		p.Schedule = string(pl.Schedule)
		if p.Schedule == "" {
			p.Schedule = string(sim.OneFOneB)
		}
	}
	if S > 1 {
		p.BubbleFraction = math.Round(res.Bubble*1e9) / 1e9
	}
	if pp != nil {
		p.Warnings = append(p.Warnings, pp.Warnings...)
	}
	stageOf := func(op graph.OpID) int {
		if pl.OpStage == nil {
			return 0
		}
		return pl.OpStage[op]
	}
	stages := pl.StageDevices(len(r.cluster.Devices))
	devStage := make([]int, len(r.cluster.Devices))
	for d := range devStage {
		devStage[d] = -1
	}
	for i := 0; i < S; i++ {
		reps := stages[i].Replicas
		sr := res.Stages[i]
		st := plan.Stage{Index: i, Replicas: len(reps), AliveMicroBatches: sr.AliveMicroBatches, Sharding: sharding(stages[i]), Recompute: stages[i].Recompute,
			PeakMemoryBytes: sr.PeakMemory, AllReduceMS: plan.MS(sr.AllReduce), AllReduceBytes: sr.AllReduceBytes,
			StartMS: plan.MS(sr.Start), EndMS: plan.MS(sr.End)}
		var types []string
		for _, rep := range reps {
			names := deviceNames(r, rep)
			st.Devices = append(st.Devices, names...)
			if len(rep) > 1 {
				st.ReplicaDevices = append(st.ReplicaDevices, names)
			}
			for _, d := range rep {
				devStage[d] = i
				if t := r.cluster.Devices[d].Type.Name; !slices.Contains(types, t) {
					types = append(types, t)
				}
			}
		}
		st.DeviceType = strings.Join(types, ",")
		st.MicroBatchSize = strategy.MicroBatchSize(r.problem.Batch, M, len(reps))
		fm := float64(M)
		if stages[i].Tensor > 1 {
			st.TensorParallel, st.TensorSyncMS, st.TensorSyncBytes = stages[i].Tensor, plan.MS(sr.TensorSync/fm), sr.TensorSyncBytes/int64(M)
			st.TensorSyncExposedMS = plan.MS(sr.TensorSyncExposed / fm)
			p.TensorParallel = max(p.TensorParallel, st.TensorParallel)
		}
		compute, comm, sync := sr.Compute/fm, sr.Send/fm, (sr.AllReduce+sr.Update+sr.TensorSyncExposed)/fm
		st.ComputeMS, st.CommMS, st.SyncMS = plan.MS(compute), plan.MS(comm), plan.MS(sync)
		st.TimeMS = plan.MS(compute + comm + sync)
		p.BottleneckMS = max(p.BottleneckMS, st.TimeMS)
		p.Replicas = max(p.Replicas, st.Replicas)
		p.Stages = append(p.Stages, st)
	}
	// Bytes each stage sends to later stages, per step.
	for _, t := range res.Transfers {
		if from, to := devStage[t.From], devStage[t.To]; from >= 0 && to > from {
			p.Stages[from].SendBytes += t.Bytes
		}
	}
	forward, all := make([][]graph.OpID, S), make([][]graph.OpID, S)
	for i := range p.Ops {
		op := &p.Ops[i]
		id, _ := g.OpByName(op.Name)
		s := stageOf(id)
		if S > 1 {
			op.Stage = &s
		}
		st := &p.Stages[s]
		st.Ops = append(st.Ops, op.Name)
		all[s] = append(all[s], id)
		if g.Ops[id].Phase == graph.Forward {
			forward[s] = append(forward[s], id)
		}
	}
	keys := partition.ModuleKeys(g)
	for i, ops := range forward {
		if len(ops) == 0 {
			ops = all[i]
		}
		sp := partition.StageSplit(g, ops, keys)
		st := &p.Stages[i]
		st.FirstOp, st.LastOp, st.ModulePrefix, st.FirstModule, st.LastModule = sp.FirstOp, sp.LastOp, sp.ModulePrefix, sp.FirstModule, sp.LastModule
	}
}

// lowerBounds lists every part of the plan's bound.
func lowerBounds(b strategy.Bound) []plan.LowerBound {
	out := make([]plan.LowerBound, 0, len(b.Parts))
	for _, p := range b.Parts {
		out = append(out, plan.LowerBound{Kind: p.Kind, MS: plan.MS(p.Seconds), Note: p.Note})
	}
	return out
}

// sharding is a stage's ZeRO level as the plan names it: "" for plain DDP
// and for a stage of one replica.
func sharding(st sim.Stage) string {
	if len(st.Replicas) < 2 || st.Sharding == sim.NoSharding {
		return ""
	}
	return st.Sharding.String()
}

// addRuntime names the runtime a plan was made for, and lists under each
// fused attention op the model's ops it runs.
func addRuntime(r *run) {
	r.plan.Runtime = runtimeName(r.opts)
	if len(r.attention) == 0 {
		return
	}
	covers := make(map[string][]string, len(r.attention))
	for _, f := range r.attention {
		covers[f.Op] = f.Covers
	}
	for i := range r.plan.Ops {
		if c, ok := covers[r.plan.Ops[i].Name]; ok {
			r.plan.Ops[i].Covers = c
		}
	}
}
