package partition

import (
	"math"
	"slices"
	"sync"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
)

// model is the cost of a stage, shared by every partitioner, the brute
// force of the tests and the report, so they all judge one objective.
//
// Per stage S of units on r replicas of device class c, with M
// micro-batches (all times per micro-batch):
//
//	forward  = (F - Lf)/(r·M) + Lf + send(cut out of S)
//	backward = (B - Lb)/(r·M) + Lb + send(cut into S)      (training)
//	time     = forward + backward + (allreduce + update)/M
//
// F and B are the stage's forward and backward op times for the whole
// batch on c (the cost table's times), Lf and Lb the part of them that
// every micro-batch pays again: each op's launch and the fixed part of
// its cost.Shape line (a small GEMM's under-use, weights read whole),
// which meets the simulator's run time at shares 1 and 1/4 (FixedAt).
// Compute of a micro-batch is the full-batch time divided by M plus that
// fixed part, so splitting finer is not free; the simulator's time of a
// run, convex in its share, is below this line between 1/4 and 1 and
// above it under 1/4. The plan a partitioner returns reports each
// stage's compute op by op at its real share (runAtShape). Each replica
// takes 1/r of every micro-batch.
// send(b) = latency + b/(M·bandwidth): the whole activation crossing a
// boundary is counted once per boundary it crosses (an activation skipping
// stages is relayed through each) over one link, not split over replicas,
// since replicas of one host share its network card. The all-reduce of the
// stage's gradient bytes across its replicas is priced by
// sim.CollectiveTime on the stage's devices, once per step (training
// only); update ops run once per step on every replica.
//
// Memory per device: parameters, optimizer state and the weight gradients
// the stage's updates read + alive·stash/(r·M) + largest scratch,
// where stash is the forward outputs of S plus everything it receives
// (relayed activations included) and alive is the micro-batches whose
// activations a stage holds at once, sim.InFlight of the schedule:
// min(M, stages-index) under 1F1B, M under GPipe, 1 for inference. Under Options.Recompute the stash
// counts only the checkpoints among S's forward outputs (those a forward
// op of another module reads, and graph outputs), the largest module's
// other saved outputs are added once, (alive·stash + largest)/(r·M), and
// B includes F (each backward runs its forward again).
//
// Devices are taken per class in a fixed order (host, then index); a
// stage holding positions [p, p+r) of its class sends forward over the
// link from its last device to the device at p+r and backward over the
// link from its first device to the one at p-1 (or, at either end of the
// class, the slowest link to a device of another class).
type model struct {
	t        *cost.Table
	opts     Options
	training bool
	classes  []class
	// per unit, per class (unit*nc + c)
	fwd, bwd, upd, fwdL, bwdL []float64
	// banned[unit*nc+c] is 1 when some op of the unit cannot run on c
	// (its time there is +Inf, or the user's rules keep it off c; the times
	// above then leave it out).
	banned []int32
	// apart[unit*na+j] counts the unit's ops in group j of the user's
	// separate rules (every rule's groups numbered together); apartRule[j]
	// is group j's rule. A stage holding two groups of one rule is no
	// stage (see sums.mixed).
	apart     []int32
	apartRule []int
	// per unit
	params, stash, temp []int64
	// grads is per unit the bytes of the weight gradients its updates
	// read: what the stage's replicas all-reduce.
	grads []int64
	// credit is set only on the lower-bound model of sourceBound: per
	// unit and per (class, link) pair j, the least time per step its pure
	// sources can add to the unit's stage, either updated there or
	// received over that pair's link (see sources.go); creditOf[j] is the
	// class and creditAt[k][p] the pair of class k's position p.
	credit   []float64
	creditOf []int
	creditAt [][]int
	// recomputed is, under Options.Recompute, the largest module's saved
	// forward outputs that are no checkpoints (whole batch), 0 otherwise.
	recomputed int64
}

// class is a group of interchangeable devices: one type, one memory size.
type class struct {
	name    string
	typ     *cluster.DeviceType
	memory  int64
	devices []int // cluster device indices in allocation order
	// An all-reduce of b bytes over devices [p, p+r) takes
	// arPerByte[i]·b + arFixed[i], i = p*(n+1)+r: sim.CollectiveTime,
	// linear in the bytes, read at two sizes. next[p]/prev[p] the link a
	// stage ending before p / starting at p uses to its neighbour.
	// (ar, when set, prices them on demand instead: a class of more
	// than eagerAllReduce devices.)
	arPerByte, arFixed []float64
	ar                 *arMemo
	next, prev         []cluster.Link
}

func newModel(t *cost.Table, u *units, opts Options, apart [][]int8, keys []string) *model {
	c := t.Cluster
	m := &model{t: t, opts: opts, training: u.training}
	for _, devs := range t.Classes() {
		dev := &c.Devices[devs[0]]
		m.classes = append(m.classes, class{name: dev.Type.Name, typ: dev.Type, memory: dev.Memory, devices: devs})
		m.linkTables(&m.classes[len(m.classes)-1])
	}
	g := t.Graph
	nc := len(m.classes)
	m.fwd = make([]float64, u.n*nc)
	m.bwd = make([]float64, u.n*nc)
	m.upd = make([]float64, u.n*nc)
	m.fwdL = make([]float64, u.n*nc)
	m.bwdL = make([]float64, u.n*nc)
	m.banned = make([]int32, u.n*nc)
	m.apartGroups(u, apart)
	m.params = make([]int64, u.n)
	m.stash = make([]int64, u.n)
	m.temp = make([]int64, u.n)
	m.grads = make([]int64, u.n)
	rc := opts.Recompute && u.training
	// The share of an op's work a run does at which its cost line meets
	// the simulator's (cost.Shape.FixedAt), besides the whole batch: a
	// quarter, between the halves and eighths the bundled clusters'
	// pipelines run. Of 1/2, 1/4 and 1/n (n devices) tried on every shared
	// model and bundled cluster (TestPartitionEstimate, before the report
	// priced the chosen split op by op), 1/4 had the smallest worst error
	// of the estimate: 53% against 60% for the other two.
	at := 1 / 4.0
	isOutput := map[graph.TensorID]bool{}
	saved := map[string]int64{} // per module: saved outputs recomputed
	if rc {
		for _, o := range g.Outputs {
			isOutput[o] = true
		}
		defer func() {
			for _, b := range saved {
				m.recomputed = max(m.recomputed, b)
			}
		}()
	}
	for ui, ops := range u.ops {
		seen := map[graph.TensorID]bool{}
		for _, op := range ops {
			o := &g.Ops[op]
			for k := range m.classes {
				dev := m.classes[k].devices[0]
				tm := t.OpTime(op, dev)
				i := ui*nc + k
				if !t.CanRun(op, dev) {
					m.banned[i] = 1
					continue
				}
				var launch float64
				if tm > 0 {
					launch = min(m.classes[k].typ.LaunchOverhead, tm)
					launch += (tm - launch) * t.Shape(op, dev).FixedAt(at)
				}
				switch o.Phase {
				case graph.Forward:
					m.fwd[i] += tm
					m.fwdL[i] += launch
					if rc {
						m.bwd[i] += tm // run again before the backward
						m.bwdL[i] += launch
					}
				case graph.Backward:
					m.bwd[i] += tm
					m.bwdL[i] += launch
				default:
					m.upd[i] += tm
				}
			}
			for _, in := range o.Inputs {
				if tn := &g.Tensors[in]; tn.Kind.IsResident() && !seen[in] {
					seen[in] = true
					m.params[ui] += tn.Bytes()
				}
			}
			if o.Phase == graph.Update {
				// The gradient buffer the update reads lives for the step
				// on its device, as the simulator counts it.
				var grad int64
				for _, in := range o.Inputs {
					if tn := &g.Tensors[in]; tn.Kind == graph.Activation {
						grad = max(grad, tn.Bytes())
					}
				}
				m.params[ui] += grad
				m.grads[ui] += grad
			}
			if o.Phase == graph.Forward {
				if rc {
					m.stash[ui] += rcStash(g, op, keys, isOutput, saved)
				} else {
					m.stash[ui] += t.OutputBytes(op)
				}
			}
			m.temp[ui] = max(m.temp[ui], t.TempBytes(op))
		}
	}
	return m
}

// linkTables precomputes the links a stage at each position of the class
// uses.
func (m *model) linkTables(cl *class) {
	c := m.t.Cluster
	n := len(cl.devices)
	slowest := func(a, b cluster.Link) cluster.Link {
		if a.Bandwidth == 0 || b.Bandwidth < a.Bandwidth || (b.Bandwidth == a.Bandwidth && b.Latency > a.Latency) {
			return b
		}
		return a
	}
	// The slowest link from a device to any device of another class.
	outside := func(d int) cluster.Link {
		var l cluster.Link
		for e := range c.Devices {
			if !slices.Contains(cl.devices, e) {
				l = slowest(l, c.Path(d, e))
			}
		}
		return l
	}
	cl.next = make([]cluster.Link, n+1)
	cl.prev = make([]cluster.Link, n+1)
	for p := 0; p <= n; p++ {
		// next[p]: a stage whose last device is p-1.
		if p > 0 {
			if p < n {
				cl.next[p] = c.Path(cl.devices[p-1], cl.devices[p])
			} else {
				cl.next[p] = outside(cl.devices[p-1])
			}
		}
		// prev[p]: a stage whose first device is p.
		if p < n {
			if p > 0 {
				cl.prev[p] = c.Path(cl.devices[p], cl.devices[p-1])
			} else {
				cl.prev[p] = outside(cl.devices[0])
			}
		}
	}
	if n > eagerAllReduce {
		// Priced on demand: a search by degree costs a few positions
		// and replica counts, not all n² of them.
		cl.ar = &arMemo{}
		return
	}
	cl.arPerByte = make([]float64, (n+1)*(n+1))
	cl.arFixed = make([]float64, (n+1)*(n+1))
	for p := 0; p < n; p++ {
		for r := 2; p+r <= n; r++ {
			i := p*(n+1) + r
			cl.arPerByte[i], cl.arFixed[i] = allReduceFit(c, cl.devices[p:p+r])
		}
	}
}

// eagerAllReduce is the class size up to which the all-reduce of every
// run of devices is priced when the model is built (n² collectives);
// larger classes price them as the search asks (allReduce).
const eagerAllReduce = 64

// arMemo holds a large class's all-reduce fits as allReduce prices them;
// safe for concurrent use (the partitioners of a problem share its
// model), and read without a lock once a fit is there.
type arMemo struct {
	fits sync.Map // int -> [2]float64
}

// allReduceFit is sim.CollectiveTime of an all-reduce over devs as a
// line, perByte·b + fixed, read at two sizes.
func allReduceFit(c *cluster.Cluster, devs []int) (perByte, fixed float64) {
	const lo, hi = 1 << 20, 1 << 30
	tLo := sim.CollectiveTime(c, sim.AllReduce, devs, lo)
	tHi := sim.CollectiveTime(c, sim.AllReduce, devs, hi)
	perByte = (tHi - tLo) / (hi - lo)
	return perByte, max(0, tLo-perByte*lo)
}

// allReduce is the fit of an all-reduce over the class's devices
// [p, p+r): perByte·b + fixed seconds for b bytes.
func (m *model) allReduce(cl *class, p, r int) (perByte, fixed float64) {
	i := p*(len(cl.devices)+1) + r
	if cl.ar == nil {
		return cl.arPerByte[i], cl.arFixed[i]
	}
	if f, ok := cl.ar.fits.Load(i); ok {
		fit := f.([2]float64)
		return fit[0], fit[1]
	}
	perByte, fixed = allReduceFit(m.t.Cluster, cl.devices[p:p+r])
	cl.ar.fits.Store(i, [2]float64{perByte, fixed})
	return perByte, fixed
}

// sums are the additive quantities of a set of units.
type sums struct {
	ok                        []bool    // per class: every unit can run there
	mixed                     bool      // holds two groups of one separate rule
	fwd, bwd, upd, fwdL, bwdL []float64 // per class
	params, stash, grads      int64
	credit                    []float64 // per model.creditOf pair
}

// stageCost is one stage's evaluation.
type stageCost struct {
	time                 float64 // per micro-batch, the objective's term
	fwd, bwd             float64 // per micro-batch, compute + send
	compute, comm, sync  float64 // per micro-batch: compute, sends, (allreduce+update)/M
	fwdSend, bwdSend     float64 // per micro-batch: the forward's and the backward's sends
	perStep              float64 // allreduce + update, once per step
	paramBytes, stashPer int64
	// recomputed is model.recomputed: held once, not per micro-batch.
	recomputed int64
}

// stage evaluates a stage with the given additive sums (over its units),
// the bytes it receives (cutIn) and sends (cutOut), on r devices of class
// k starting at position p, with M micro-batches.
func (m *model) stage(s *sums, k int, cutIn, cutOut int64, r, p, M int) stageCost {
	var sc stageCost
	m.stageInto(&sc, s, k, cutIn, cutOut, r, p, M)
	return sc
}

// stageInto is stage writing into sc, for the search's inner loop: a
// stageCost is twelve words, and the loop evaluates millions.
func (m *model) stageInto(sc *stageCost, s *sums, k int, cutIn, cutOut int64, r, p, M int) {
	cl := &m.classes[k]
	fM := float64(M)
	rm := float64(r) * fM
	fc := (s.fwd[k]-s.fwdL[k])/rm + s.fwdL[k]
	fs := sendTime(&cl.next[p+r], cutOut, fM)
	*sc = stageCost{fwd: fc + fs, compute: fc, comm: fs, fwdSend: fs}
	if m.training {
		bc := (s.bwd[k]-s.bwdL[k])/rm + s.bwdL[k]
		bs := sendTime(&cl.prev[p], cutIn, fM)
		sc.bwd = bc + bs
		sc.compute += bc
		sc.comm += bs
		sc.bwdSend = bs
		if r > 1 && s.grads > 0 {
			perByte, fixed := m.allReduce(cl, p, r)
			sc.perStep = perByte*float64(s.grads) + fixed
		}
	}
	sc.perStep += s.upd[k]
	if m.creditAt != nil {
		sc.perStep += s.credit[m.creditAt[k][p]]
	}
	sc.sync = sc.perStep / fM
	sc.time = sc.fwd + sc.bwd + sc.sync
	sc.paramBytes = s.params
	sc.stashPer = s.stash + cutIn
	sc.recomputed = m.recomputed
}

// sendTime is one micro-batch's share (of M) of b bytes over l.
func sendTime(l *cluster.Link, b int64, fM float64) float64 {
	if b <= 0 {
		return 0
	}
	return l.Latency + float64(b)/(fM*l.Bandwidth)
}

// runAtShape replaces sc's compute, the search's line (see model), with
// the simulator's time of each op of the units at the share of the batch
// a run does on class k with rm replicas × micro-batches (cost.Shape):
// what the plan reports and compares micro-batch counts by.
func (m *model) runAtShape(sc *stageCost, u *units, units []int32, k, rm int) {
	t := m.t
	g := t.Graph
	dev := m.classes[k].devices[0]
	share := 1 / float64(rm)
	rc := m.opts.Recompute && m.training
	var fwd, bwd float64
	for _, v := range units {
		for _, op := range u.ops[v] {
			run := t.RunTime(op, dev, share, 1)
			if !(run > 0) {
				continue
			}
			switch g.Ops[op].Phase {
			case graph.Forward:
				fwd += run
				if rc {
					bwd += run
				}
			case graph.Backward:
				bwd += run
			}
		}
	}
	sc.compute += fwd + bwd - (sc.fwd - sc.fwdSend) - (sc.bwd - sc.bwdSend)
	sc.fwd = fwd + sc.fwdSend
	if m.training {
		sc.bwd = bwd + sc.bwdSend
	}
	sc.time = sc.fwd + sc.bwd + sc.sync
}

// alive is how many micro-batches of activations a stage holds when it
// and the stages after it number depth: sim.InFlight of the schedule, in
// closed form for the search's inner loop (TestAliveIsInFlight).
func (m *model) alive(depth, M int) int {
	if !m.training {
		return 1
	}
	if m.opts.Schedule == GPipe {
		return M
	}
	return min(M, depth)
}

// memory is a device's peak bytes for a stage holding alive micro-batches.
func memory(sc *stageCost, temp int64, alive, r, M int) int64 {
	act := (float64(alive)*float64(sc.stashPer) + float64(sc.recomputed)) / float64(r*M)
	return sc.paramBytes + int64(math.Ceil(act)) + temp
}

// combine joins a stage's time with the best of the stages after it.
func (m *model) combine(stage, rest float64) float64 {
	if m.opts.Objective == Latency {
		return stage + rest
	}
	return max(stage, rest)
}

// apartGroups counts each unit's ops in every group of the separate
// rules apart (per rule, each op's group or -1).
func (m *model) apartGroups(u *units, apart [][]int8) {
	first := make([]int, len(apart)) // rule k's groups start at first[k]
	na := 0
	for k, groups := range apart {
		first[k] = na
		top := int8(-1)
		for _, x := range groups {
			top = max(top, x)
		}
		for x := int8(0); x <= top; x++ {
			m.apartRule = append(m.apartRule, k)
		}
		na += int(top) + 1
	}
	if na == 0 {
		return
	}
	m.apart = make([]int32, u.n*na)
	for v, ops := range u.ops {
		for _, op := range ops {
			for k, groups := range apart {
				if x := groups[op]; x >= 0 {
					m.apart[v*na+first[k]+int(x)]++
				}
			}
		}
	}
}

// rcStash is what forward op stashes per micro-batch in a recomputing
// stage: its outputs that are checkpoints (read by a forward op of
// another module, or graph outputs). Its other outputs that backward ops
// read are added to saved[its module], recomputed for the backward.
func rcStash(g *graph.Graph, op graph.OpID, keys []string, isOutput map[graph.TensorID]bool, saved map[string]int64) int64 {
	var stash int64
	key := keys[op]
	for _, out := range g.Ops[op].Outputs {
		tn := &g.Tensors[out]
		ckpt, bwd := isOutput[out], false
		for _, c := range tn.Consumers {
			switch g.Ops[c].Phase {
			case graph.Forward:
				ckpt = ckpt || keys[c] != key
			case graph.Backward:
				bwd = true
			}
		}
		switch {
		case ckpt:
			stash += tn.Bytes()
		case bwd:
			saved[key] += tn.Bytes()
		}
	}
	return stash
}
