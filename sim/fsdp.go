package sim

import (
	"slices"

	"github.com/opplace/opplace/graph"
)

// fsdp is the books of the fully sharded stages (ZeRO3): each replica
// keeps 1/r of every weight, and each unit (the ops of one module on a
// device, as graph.ModuleKeys gives them, and one more, the root, for the
// ops outside any module) gathers its weights whole before its forward
// and again before its backward pass of every micro-batch, frees them
// once the pass is done there, and reduce-scatters its weight gradients
// after its backward pass of every micro-batch, as PyTorch FSDP's
// FULL_SHARD and DeepSpeed's ZeRO stage 3 do. The root, whose ops span
// the passes (embeddings first, head last), gathers once per micro-batch
// and keeps its weights until its backward pass ends, as FSDP's root
// module does.
//
// Gathers run in the order the stage's passes need them, one at a time
// on the device's collective stream, and at most two gathered units are
// alive at once (FSDP's prefetch of the next unit, with its limit on
// in-flight all-gathers): a gather waits until the gather two before it
// was freed, or until the device has nothing to run (see unstall). Reduce-scatters run in the order their units finish their
// backward pass, on the same channels. The optimizer's updates wait for
// every reduce-scatter of the step, and nothing is gathered after them:
// the updated weights stay sharded.
type fsdp struct {
	// gathered[t]: tensor t is a weight a ZeRO-3 stage shards (a
	// parameter other than optimizer state) or a per-step tensor the
	// forward pass computes from weights (and constants) alone (a weight's
	// cast to half precision, which FSDP's mixed precision gathers instead
	// of the weight).
	gathered []bool
	units    []fsdpUnit
	// opUnit[op] is the unit of an op on a fully sharded device that runs
	// per micro-batch, else -1.
	opUnit []int32
	// ops[u][phase] are unit u's ops of its forward (0) and backward (1)
	// passes, in order.
	ops [][2][]graph.OpID
	// Per device: its gathers in order, the next to launch, whether one is
	// running, its reduce-scatters ready to launch and whether one is
	// running, and its reduce-scatters left in the step.
	gathers    [][]fsdpGather
	nextGather []int
	gathering  []bool
	scatterQ   [][]int32 // unit*M+mb
	scattering []bool
	scatterOut []int32
	updates    [][]graph.OpID // per device: its update ops
	// devs are the devices with units, in order.
	devs []int
	// left[(unit*M+mb)*2+phase] counts the unit's runs of that pass not
	// finished; entry[...] is its gather's index in its device's list, or
	// -1 when the pass gathers nothing.
	left  []int32
	entry []int32
	// started[...]: the unit's pass has started.
	started []bool
	freed   [][]bool // per device, per gather
}

// fsdpUnit is one unit of a fully sharded device.
type fsdpUnit struct {
	dev     int
	devices []int // the counterparts of dev in the stage's replicas
	stage   int
	root    bool // the ops outside any module
	// gather[phase] is the bytes the pass gathers (whole), extra[phase]
	// what that adds on the device beyond the shards it keeps.
	gather, extra [2]int64
	// grads is the unit's weight gradients, whole; gradExtra what they
	// take beyond their shard while a micro-batch's are reduce-scattered.
	grads, gradExtra int64
}

// fsdpGather is one all-gather of a unit's weights for one pass.
type fsdpGather struct {
	unit int32
	mb   int32
	pass int32 // 0 forward, 1 backward
}

// passOf is the pass an op of a unit belongs to: 0 forward, 1 backward.
func passOf(o *graph.Op) int {
	if o.Phase == graph.Backward {
		return 1
	}
	return 0
}

// fullyShards reports whether device d's stage runs ZeRO3.
func (s *state) fullyShards(d int) bool {
	z, _ := s.sharding(d)
	return z == ZeRO3
}

// newFSDP sets up the fully sharded stages of s's plan, nil when it has
// none.
func newFSDP(s *state) *fsdp {
	if !slices.ContainsFunc(s.stages, func(st Stage) bool { z, _ := stageSharding(&st, s.training); return z == ZeRO3 }) {
		return nil
	}
	g := s.g
	f := &fsdp{
		opUnit:     make([]int32, len(g.Ops)),
		gathers:    make([][]fsdpGather, s.nd),
		nextGather: make([]int, s.nd),
		gathering:  make([]bool, s.nd),
		scatterQ:   make([][]int32, s.nd),
		scattering: make([]bool, s.nd),
		scatterOut: make([]int32, s.nd),
		freed:      make([][]bool, s.nd),
	}
	uf := s.units()
	f.gathered = uf.gathered
	// Units: per device of a fully sharded stage, its modules and the ops
	// outside any module, numbered as their first op runs.
	unitOf := map[[2]int]int32{} // (device, module+1)
	for i := range f.opUnit {
		f.opUnit[i] = -1
	}
	order := s.order()
	for _, op := range order {
		d := s.dev[op]
		if !s.perMB[op] || !s.fullyShards(d) || g.Ops[op].Phase == graph.Update {
			continue
		}
		k := uf.module[op]
		id := [2]int{d, int(k) + 1}
		u, ok := unitOf[id]
		if !ok {
			if g.Ops[op].Phase != graph.Forward && k >= 0 {
				id[1] = 0 // a backward op of a module with no forward op here
				u, ok = unitOf[id]
			}
			if !ok {
				u = int32(len(f.units))
				unitOf[id] = u
				f.units = append(f.units, fsdpUnit{dev: d, devices: s.ringOf(d), stage: s.devStage[d], root: id[1] == 0})
			}
		}
		f.opUnit[op] = u
	}
	f.ops = make([][2][]graph.OpID, len(f.units))
	for _, op := range order {
		if u := f.opUnit[op]; u >= 0 {
			ph := passOf(&g.Ops[op])
			f.ops[u][ph] = append(f.ops[u][ph], op)
		}
	}
	M := s.M
	f.left = make([]int32, len(f.units)*M*2)
	f.started = make([]bool, len(f.units)*M*2)
	f.entry = make([]int32, len(f.units)*M*2)
	for i := range f.entry {
		f.entry[i] = -1
		f.left[i] = int32(len(f.ops[i/(2*M)][i%2]))
	}
	// What each unit gathers per pass, and its gradients.
	seen := make([]int32, len(g.Tensors))
	for i := range seen {
		seen[i] = -1
	}
	for op := range g.Ops {
		u := f.opUnit[op]
		if u < 0 {
			continue
		}
		un := &f.units[u]
		ph := passOf(&g.Ops[op])
		gph := ph
		if un.root {
			gph = 0 // gathered once for both passes, as FSDP's root
		}
		for _, in := range s.inputs[op] {
			if !f.gathered[in] {
				continue
			}
			if mark := u*2 + int32(gph); seen[in] != mark {
				seen[in] = mark
				whole := s.wholeBytes(in, un.dev)
				un.gather[gph] += whole
				un.extra[gph] += whole - ceilDiv(whole, int64(len(un.devices)))
			}
		}
		for _, out := range g.Ops[op].Outputs {
			if s.accum[out] {
				whole := s.wholeBytes(out, un.dev)
				un.grads += whole
				un.gradExtra += whole - ceilDiv(whole, int64(len(un.devices)))
			}
		}
	}
	// The gathers, in the order each stage runs its passes. Per device:
	// its root unit first, then its modules in the order
	// their first forward op runs (units are numbered so); a backward
	// pass visits the modules in reverse.
	byDev := make([][]int32, s.nd)
	for u := range f.units {
		d := f.units[u].dev
		if f.units[u].root {
			byDev[d] = append([]int32{int32(u)}, byDev[d]...)
		} else {
			byDev[d] = append(byDev[d], int32(u))
		}
	}
	for d, us := range byDev {
		if len(us) == 0 {
			continue
		}
		f.devs = append(f.devs, d)
		bwd := slices.Clone(us)
		if f.units[us[0]].root {
			slices.Reverse(bwd[1:])
		} else {
			slices.Reverse(bwd)
		}
		st := s.devStage[d]
		for _, p := range Passes(s.sched, s.training, len(s.stages), st, M) {
			ph, list := 0, us
			if p.Backward {
				ph, list = 1, bwd
			}
			for _, u := range list {
				if f.units[u].gather[ph] == 0 {
					continue
				}
				f.entry[(int(u)*M+p.MicroBatch)*2+ph] = int32(len(f.gathers[d]))
				f.gathers[d] = append(f.gathers[d], fsdpGather{unit: u, mb: int32(p.MicroBatch), pass: int32(ph)})
			}
			if p.Backward {
				for _, u := range us {
					if f.units[u].grads > 0 {
						f.scatterOut[d]++
					}
				}
			}
		}
		f.freed[d] = make([]bool, len(f.gathers[d]))
	}
	f.updates = make([][]graph.OpID, s.nd)
	for op := range g.Ops {
		if d := s.dev[op]; g.Ops[op].Phase == graph.Update && f.scatterOut[d] > 0 {
			f.updates[d] = append(f.updates[d], graph.OpID(op))
		}
	}
	return f
}

// waits reports whether run mb of op waits for its unit's gather.
func (f *fsdp) waits(g *graph.Graph, op graph.OpID, mb, M int) bool {
	u := f.opUnit[op]
	return u >= 0 && f.entry[(int(u)*M+mb)*2+passOf(&g.Ops[op])] >= 0
}

// start launches every device's first gathers.
func (f *fsdp) start(s *state) {
	for _, d := range f.devs {
		f.launchGather(s, d, 0, false)
	}
}

// unstall launches, at the end of an instant, the next gather of every
// device left idle with nothing ready while only the prefetch limit holds
// that gather back: its units' passes interleave (a module that reads a
// later module's output), so the unit the limit waits for cannot finish
// first. Prefetching further costs memory, not time.
func (f *fsdp) unstall(s *state, now float64) {
	for _, d := range f.devs {
		if !s.running[d] && s.ready[d].Len() == 0 {
			f.launchGather(s, d, now, true)
		}
	}
}

// launchGather starts device d's next gather when the one before it is
// done and the one two before it was freed (unless forced or that one's
// unit is the ops outside any module, which span the pass).
func (f *fsdp) launchGather(s *state, d int, now float64, force bool) {
	i := f.nextGather[d]
	if f.gathering[d] || i >= len(f.gathers[d]) {
		return
	}
	if i >= 2 && !force && !f.freed[d][i-2] && !f.units[f.gathers[d][i-2].unit].root {
		return
	}
	e := f.gathers[d][i]
	un := &f.units[e.unit]
	ph := e.pass
	start, end := s.occupy(s.bucketChannels(d, un.devices), now, collectiveTime(s.c, AllGather, un.devices, un.gather[ph], s.groupOnHost(d)))
	s.alloc(start, d, un.extra[ph])
	f.gathering[d] = true
	f.nextGather[d]++
	s.recordCollective(AllGather, un.stage, un.devices, un.gather[ph], start, end)
	s.push(event{time: end, kind: evGathered, id: int32(i), dev: int32(d)})
}

// gatheredAt finishes device d's gather i at now: the pass's runs may
// start, and the next gather may.
func (f *fsdp) gatheredAt(s *state, d int, i int32, now float64) {
	e := f.gathers[d][i]
	f.gathering[d] = false
	for _, op := range f.ops[e.unit][e.pass] {
		s.satisfy(s.taskBase[op] + e.mb)
	}
	f.launchGather(s, d, now, false)
}

// runStart counts run mb of op, an op of a unit, started on device d,
// and returns the time it adds to the run. The first run of a pass
// copies the gathered weights out of the all-gather's buffer into the
// module's parameters (FSDP's copy-out, on the compute stream: one more
// kernel launch, and a read and a write of the gathered bytes at the
// device's memory bandwidth),
// and the first of a backward pass allocates the pass's gradients whole,
// which they stay until reduce-scattered.
func (f *fsdp) runStart(s *state, op graph.OpID, mb, d int, now float64) float64 {
	u := f.opUnit[op]
	un := &f.units[u]
	ph := passOf(&s.g.Ops[op])
	i := (int(u)*s.M+mb)*2 + ph
	if f.started[i] {
		return 0
	}
	f.started[i] = true
	if ph == 1 {
		s.alloc(now, d, un.gradExtra)
	}
	if f.entry[i] < 0 {
		return 0
	}
	dt := s.c.Devices[d].Type
	copyOut := dt.LaunchOverhead
	if dt.MemoryBandwidth > 0 {
		copyOut += 2 * float64(un.gather[ph]) / dt.MemoryBandwidth
	}
	return copyOut
}

// runDone counts run mb of op, an op of a unit, finished: after the last
// run of its unit's pass the gathered weights are freed and, after a
// backward pass, the unit's gradients reduce-scattered.
func (f *fsdp) runDone(s *state, op graph.OpID, mb int, now float64) {
	u := f.opUnit[op]
	ph := passOf(&s.g.Ops[op])
	i := (int(u)*s.M+mb)*2 + ph
	f.left[i]--
	if f.left[i] > 0 {
		return
	}
	un := &f.units[u]
	d := un.dev
	free := i
	switch {
	case un.root && ph == 0 && len(f.ops[u][1]) > 0:
		free = -1 // the root's weights stay gathered for its backward pass
	case un.root && ph == 1:
		free = i - 1 // its forward pass's gather
	}
	if free >= 0 {
		if e := f.entry[free]; e >= 0 {
			s.alloc(now, d, -un.extra[free%2])
			f.freed[d][e] = true
			f.launchGather(s, d, now, false)
		}
	}
	if ph == 1 && un.grads > 0 {
		f.scatterQ[d] = append(f.scatterQ[d], int32(int(u)*s.M+mb))
		f.launchScatter(s, d, now)
	}
}

// launchScatter starts device d's next reduce-scatter when none runs.
func (f *fsdp) launchScatter(s *state, d int, now float64) {
	if f.scattering[d] || len(f.scatterQ[d]) == 0 {
		return
	}
	um := f.scatterQ[d][0]
	f.scatterQ[d] = f.scatterQ[d][1:]
	un := &f.units[int(um)/s.M]
	start, end := s.occupy(s.bucketChannels(d, un.devices), now, collectiveTime(s.c, ReduceScatter, un.devices, un.grads, s.groupOnHost(d)))
	f.scattering[d] = true
	s.recordCollective(ReduceScatter, un.stage, un.devices, un.grads, start, end)
	s.push(event{time: end, kind: evScattered, id: um, dev: int32(d)})
}

// scattered finishes a reduce-scatter on device d: the replica keeps its
// shard of the micro-batch's gradients, and after the step's last the
// updates may run.
func (f *fsdp) scattered(s *state, d int, um int32, now float64) {
	un := &f.units[int(um)/s.M]
	s.alloc(now, d, -un.gradExtra)
	s.res.Step = max(s.res.Step, now)
	f.scattering[d] = false
	f.scatterOut[d]--
	if f.scatterOut[d] == 0 {
		for _, op := range f.updates[d] {
			s.satisfy(s.taskBase[op])
		}
	}
	f.launchScatter(s, d, now)
}

// recordCollective adds a replicas' collective to the result and its
// stage's communication time.
func (s *state) recordCollective(kind CollectiveKind, stage int, devs []int, bytes int64, start, end float64) {
	s.res.Collectives = append(s.res.Collectives, Collective{Kind: kind, Stage: stage, Devices: devs, Bytes: bytes, Start: start, End: end, Tensor: -1})
	sr := &s.res.Stages[stage]
	sr.AllReduce += end - start
	sr.AllReduceBytes += bytes
}

// wholeBytes is tensor t's bytes on device d unsharded by ZeRO (divided
// by a tensor-parallel split as usual).
func (s *state) wholeBytes(t graph.TensorID, d int) int64 {
	b := s.bytes[t]
	if s.divided(t, d) {
		b = ceilDiv(b, int64(s.tp[d]))
	}
	return b
}

// unitFacts are what fully sharded plans of one graph share (facts.units).
type unitFacts struct {
	module []int32
	// gathered is fsdp.gathered, the same for every plan.
	gathered []bool
}

// newUnitFacts numbers every op's module and finds the per-step tensors
// computed from weights alone.
func newUnitFacts(g *graph.Graph, f *facts) unitFacts {
	keys := graph.ModuleKeys(g)
	ids := map[string]int32{}
	for _, k := range keys {
		if _, ok := ids[k]; k != "" && !ok {
			ids[k] = int32(len(ids))
		}
	}
	has := func(k string) bool { _, ok := ids[k]; return ok }
	uf := unitFacts{module: make([]int32, len(g.Ops)), gathered: make([]bool, len(g.Tensors))}
	for t := range g.Tensors {
		uf.gathered[t] = g.Tensors[t].Kind == graph.Parameter && !f.optState[t]
	}
	for op := range g.Ops {
		k := keys[op]
		if g.Ops[op].Phase != graph.Forward {
			k = moduleOfName(g.Ops[op].Name, has)
		}
		uf.module[op] = -1
		if k != "" {
			uf.module[op] = ids[k]
		}
	}
	// A forward op run once per step whose inputs are weights, constants
	// or such tensors, one weight at least, computes from weights alone.
	for _, op := range f.order() {
		o := &g.Ops[op]
		if f.perMB[op] || o.Phase != graph.Forward {
			continue
		}
		weights, only := false, true
		for _, in := range f.inputs[op] {
			tn := &g.Tensors[in]
			switch {
			case uf.gathered[in]:
				weights = true
			case tn.Kind == graph.Constant:
			default:
				only = false
			}
		}
		if weights && only {
			for _, out := range o.Outputs {
				uf.gathered[out] = f.perStep[out] && !f.accum[out]
			}
		}
	}
	return uf
}

// moduleOfName is the module of keys whose path starts name (a backward
// op's name begins with its forward op's), "" for none.
func moduleOfName(name string, isKey func(string) bool) string {
	for i := 0; i < len(name); i++ {
		if name[i] == '/' && isKey(name[:i+1]) {
			return name[:i+1]
		}
	}
	return ""
}
