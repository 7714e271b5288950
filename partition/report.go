package partition

import (
	"math"
	"strings"

	"github.com/opplace/opplace/graph"
)

// Plan is a pipeline partition and its predicted behaviour.
type Plan struct {
	Partitioner  string    `json:"partitioner"`
	Schedule     Schedule  `json:"schedule"`
	Objective    Objective `json:"objective"`
	Training     bool      `json:"training"`
	MicroBatches int       `json:"micro_batches"`
	Stages       []Stage   `json:"stages"`
	// BottleneckMs is the slowest stage's time per micro-batch, transfers
	// and its share of weight synchronisation included (the throughput
	// objective); ObjectiveMs is the value the partitioner minimised
	// (equal to BottleneckMs for throughput, the sum of stage times for
	// latency).
	BottleneckMs float64 `json:"bottleneck_ms"`
	ObjectiveMs  float64 `json:"objective_ms"`
	// StepMs is the estimated time of one step: M micro-batches through
	// the schedule the simulator runs (sim.Passes), sends overlapping the
	// next pass's compute, each stage's all-reduce and update after its
	// last pass.
	StepMs float64 `json:"step_ms"`
	// BubbleFraction is the share of stage time idle during the
	// pipelined part of the step.
	BubbleFraction float64 `json:"bubble_fraction"`
	// Recompute says the stages recompute activations
	// (Options.Recompute on a training step): what the partitioner priced.
	Recompute bool     `json:"-"`
	Warnings  []string `json:"warnings,omitempty"`
	// Exact says how the "exact" partitioner searched and how close to
	// the optimum its plan is proven to be; nil for the others.
	Exact *ExactInfo `json:"exact,omitempty"`
	// OpStage is the stage of every op (indexed by graph.OpID).
	OpStage []int `json:"-"`

	value, step float64 // unrounded objective and step, seconds
}

// ExactInfo is the search and optimality certificate of an "exact" plan.
type ExactInfo struct {
	// Units is the unit graph's size; ReducedUnits what remained after
	// merging side branches whose compute was under Epsilon of the total
	// (0: nothing merged); Downsets how many cuts the search covered.
	Units        int     `json:"units"`
	ReducedUnits int     `json:"reduced_units"`
	Epsilon      float64 `json:"epsilon"`
	Downsets     int     `json:"downsets"`
	// LowerBoundMs is a proven lower bound on the objective of every split
	// of the unit graph at this plan's micro-batch count (the optimum of
	// the reduced graph with the merged units made free); Gap is how far
	// above it the plan is, as a fraction of the plan's objective.
	LowerBoundMs float64 `json:"lower_bound_ms"`
	Gap          float64 `json:"gap"`
	// Optimal is true when the plan is proven optimal over every
	// contiguous split of the unit graph at its micro-batch count.
	Optimal bool `json:"optimal"`
}

// ms converts seconds to milliseconds rounded to the nanosecond, so plans
// print short, stable numbers (as plan.MS does).
func ms(seconds float64) float64 { return math.Round(seconds*1e9) / 1e6 }

// Stage is one pipeline stage.
type Stage struct {
	Index      int      `json:"index"`
	DeviceType string   `json:"device_type"`
	Devices    []string `json:"devices"`
	// DeviceIndex holds the cluster indices of Devices.
	DeviceIndex []int `json:"-"`
	Replicas    int   `json:"replicas"`
	// Ops lists the stage's ops in topological order of their units.
	Ops []string `json:"ops"`
	// FirstOp and LastOp are the stage's first and last forward ops in
	// that order that compute (bookkeeping ops skipped); ModulePrefix is
	// the longest module path its forward ops share ("/blocks/blocks.11/";
	// "/" when only the root) when op names carry one, else empty;
	// FirstModule and LastModule the modules, at the level stages are cut
	// at, of FirstOp and LastOp (see StageSplit).
	FirstOp      string `json:"first_op"`
	LastOp       string `json:"last_op"`
	ModulePrefix string `json:"module_prefix,omitempty"`
	FirstModule  string `json:"first_module,omitempty"`
	LastModule   string `json:"last_module,omitempty"`
	// Times per micro-batch: compute of the stage's ops, sends to its
	// neighbours, and its share of the per-step all-reduce and update.
	ComputeMs float64 `json:"compute_ms"`
	CommMs    float64 `json:"comm_ms"`
	SyncMs    float64 `json:"sync_ms"`
	TimeMs    float64 `json:"time_ms"`
	// SendBytes is what the stage sends to the next stage per step
	// (activations, relayed ones included; the same again comes back as
	// gradients when training).
	SendBytes int64 `json:"send_bytes"`
	// PeakMemoryBytes is one device's parameters, activation stash of the
	// micro-batches alive at once, and largest scratch buffer.
	PeakMemoryBytes int64 `json:"peak_memory_bytes"`
	// AliveMicroBatches is how many micro-batches' activations the stage
	// holds at its peak.
	AliveMicroBatches int `json:"alive_micro_batches"`
	// StartMs and EndMs are when the stage starts its first micro-batch
	// and ends its last in the simulated step (before the all-reduce).
	StartMs float64 `json:"start_ms"`
	EndMs   float64 `json:"end_ms"`
}

// passes are a solution's stage costs and the pass times its schedule
// runs.
func (s *solution) passes() (passTimes, []stageCost) {
	l, m := s.lat, s.lat.m
	S := len(s.stages)
	pt := passTimes{fwd: make([]float64, S), bwd: make([]float64, S), fwdSend: make([]float64, S), bwdSend: make([]float64, S), perStep: make([]float64, S)}
	costs := make([]stageCost, S)
	sm := newSums(l.nc)
	for i, x := range s.stages {
		l.sums(sm, x.from, x.to)
		sc := m.stage(sm, x.class, l.cut[x.from], l.cut[x.to], x.r, x.pos, s.M)
		m.runAtShape(&sc, l.u, l.stageUnits(x.from, x.to), x.class, x.r*s.M)
		costs[i] = sc
		pt.fwd[i], pt.bwd[i] = sc.fwd-sc.fwdSend, sc.bwd-sc.bwdSend
		pt.fwdSend[i], pt.bwdSend[i], pt.perStep[i] = sc.fwdSend, sc.bwdSend, sc.perStep
	}
	return pt, costs
}

// report turns a solution into a Plan, simulating its schedule.
func (p *Problem) report(name string, s *solution) *Plan {
	l, M := s.lat, s.M
	m, u := l.m, l.u
	g := p.Graph
	pl := &Plan{Partitioner: name, Schedule: p.Options.Schedule, Objective: p.Options.Objective,
		Training: m.training, Recompute: p.Options.Recompute && m.training, MicroBatches: M, ObjectiveMs: ms(s.value), value: s.value, OpStage: make([]int, len(g.Ops))}
	S := len(s.stages)
	pt, costs := s.passes()
	temps := make([]int64, S)
	for i, x := range s.stages {
		sc := costs[i]
		cl := &m.classes[x.class]
		st := Stage{Index: i, DeviceType: cl.name, Replicas: x.r,
			ComputeMs: ms(sc.compute), CommMs: ms(sc.comm), SyncMs: ms(sc.sync), TimeMs: ms(sc.time),
			SendBytes: l.cut[x.to]}
		for _, d := range cl.devices[x.pos : x.pos+x.r] {
			st.Devices = append(st.Devices, p.Costs.Cluster.Devices[d].Name)
			st.DeviceIndex = append(st.DeviceIndex, d)
		}
		units := l.stageUnits(x.from, x.to)
		nops := 0
		for _, v := range units {
			nops += len(u.ops[v])
		}
		st.Ops = make([]string, 0, nops)
		all := make([]graph.OpID, 0, nops)
		for _, v := range units {
			temps[i] = max(temps[i], m.temp[v])
			for _, op := range u.ops[v] {
				pl.OpStage[op] = i
				st.Ops = append(st.Ops, g.Ops[op].Name)
				all = append(all, op)
			}
		}
		// The stage's forward ops name it, or all its ops when it has
		// none.
		nfwd := 0
		for _, op := range all {
			if g.Ops[op].Phase == graph.Forward {
				nfwd++
			}
		}
		fwd := all
		if nfwd > 0 && nfwd < len(all) {
			fwd = make([]graph.OpID, 0, nfwd)
			for _, op := range all {
				if g.Ops[op].Phase == graph.Forward {
					fwd = append(fwd, op)
				}
			}
		}
		sp := StageSplit(g, fwd, p.stageKeys())
		st.FirstOp, st.LastOp, st.ModulePrefix, st.FirstModule, st.LastModule = sp.FirstOp, sp.LastOp, sp.ModulePrefix, sp.FirstModule, sp.LastModule
		pl.BottleneckMs = max(pl.BottleneckMs, ms(sc.time))
		pl.Stages = append(pl.Stages, st)
	}
	tl := simulateSchedule(pt, M, p.Options.Schedule, m.training)
	var busy float64
	for i := range pl.Stages {
		pl.Stages[i].AliveMicroBatches = tl.alive[i]
		pl.Stages[i].StartMs, pl.Stages[i].EndMs = ms(tl.start[i]), ms(tl.end[i])
		pl.Stages[i].PeakMemoryBytes = memory(&costs[i], temps[i], tl.alive[i], s.stages[i].r, M)
		busy += tl.busy[i]
	}
	pl.step = tl.step
	pl.StepMs = ms(pl.step)
	if tl.makespan > 0 {
		pl.BubbleFraction = math.Round((1-busy/(float64(S)*tl.makespan))*1e9) / 1e9
	}
	return pl
}

// ModulePrefix is the longest common module path of op names ending at a
// '/' ("/blocks.11/" for "/blocks.11/fc1/MatMul" and
// "/blocks.11/fc2/MatMul"), or empty when they share none.
func ModulePrefix(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return modulePrefix(names)
}

// modulePrefix is the longest common prefix of the names that ends at a
// '/', or empty when the names share no module path ("/" alone is not
// one).
func modulePrefix(names []string) string {
	prefix := names[0]
	for _, n := range names[1:] {
		i := 0
		for i < len(prefix) && i < len(n) && prefix[i] == n[i] {
			i++
		}
		prefix = prefix[:i]
	}
	cut := strings.LastIndexByte(prefix, '/')
	if cut <= 0 {
		return ""
	}
	return prefix[:cut+1]
}
