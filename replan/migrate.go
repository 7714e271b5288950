package replan

import (
	"cmp"
	"slices"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/sim"
)

// Checkpoint is the source a move names when the bytes come from the
// job's checkpoint rather than from a device.
const Checkpoint = "checkpoint"

// Move is what one device receives from one source: a device that keeps
// the bytes in the old plan, or the checkpoint.
type Move struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Bytes in all, and by kind of state.
	Bytes          int64 `json:"bytes"`
	WeightBytes    int64 `json:"weight_bytes"`
	OptimizerBytes int64 `json:"optimizer_bytes"`
	GradientBytes  int64 `json:"gradient_bytes,omitempty"`
	// Relayed says the sender read these bytes from the checkpoint
	// first, and passes them on once read.
	Relayed bool `json:"relayed,omitempty"`
	// StartMS and EndMS place the move in the migration's schedule.
	StartMS float64 `json:"start_ms"`
	EndMS   float64 `json:"end_ms"`
}

// migration is what getting from the old plan's state to a layout's
// costs.
type migration struct {
	moves []Move
	// linkBytes moved between devices; checkpointBytes read from the
	// checkpoint; ms the schedule's length; boundMS the least any
	// schedule of these moves takes under the model (the busiest
	// channel's total).
	linkBytes, checkpointBytes int64
	ms, boundMS                float64
}

// pair is a move's source (-1: the checkpoint) and destination, device
// indices of the new cluster.
type pair struct {
	from, to int
	// relay says the bytes are ones the sender read from the
	// checkpoint first.
	relay bool
}

// migrator works out migrations onto one new cluster from one old plan's
// state.
type migrator struct {
	c *cluster.Cluster
	// ps are the pieces of state; have the old plan's holdings, keyed by
	// the new cluster's device index for the devices that survive (keys
	// past the cluster's devices are gone); holders[i] the surviving
	// devices holding piece i, in index order.
	ps      []piece
	have    holdings
	holders [][]int
	// bandwidth is the checkpoint's read rate, in bytes per second.
	bandwidth float64
}

func newMigrator(c *cluster.Cluster, ps []piece, have holdings, bandwidth float64) *migrator {
	m := &migrator{c: c, ps: ps, have: have, holders: make([][]int, len(ps)), bandwidth: bandwidth}
	for d := range c.Devices {
		h := have[d]
		if h == nil {
			continue
		}
		for i, sp := range h {
			if sp.len() > 0 {
				m.holders[i] = append(m.holders[i], d)
			}
		}
	}
	return m
}

// missing is the bytes of need a device d of the new cluster lacks under
// the old plan, summed over the pieces.
func (m *migrator) missing(need []span, d int) int64 {
	h := m.have[d]
	var n int64
	for i, sp := range need {
		if sp.len() == 0 {
			continue
		}
		if h == nil {
			n += sp.len()
			continue
		}
		for _, x := range sp.minus(h[i]) {
			n += x.len()
		}
	}
	return n
}

// migrate works out the moves that bring every device of the new cluster
// what the layout's holdings need: a piece's bytes a device lacks come
// from a surviving device that holds them (the one whose link to it is
// the fastest, ties to the one given the fewest bytes so far, then the
// lowest index), else from the checkpoint (weights and optimizer
// state; gradients no surviving device holds are not moved). Bytes one
// device read from the checkpoint that another needs too it passes on,
// once read, where its link beats reading them again. The moves are
// timed by schedule.
func (m *migrator) migrate(need holdings) migration {
	nd := len(m.c.Devices)
	bytes := map[pair]*[3]int64{}
	sent := make([]int64, nd)
	add := func(from, to, kind int, b int64, relay bool) {
		k := pair{from, to, relay}
		v := bytes[k]
		if v == nil {
			v = &[3]int64{}
			bytes[k] = v
		}
		v[kind] += b
		if from >= 0 {
			sent[from] += b
		}
	}
	// reads are the spans of each piece a device read from the
	// checkpoint: it passes them on to the devices after it that need
	// them too, when its link is faster than the storage.
	type read struct {
		dev int
		sp  span
	}
	reads := make([][]read, len(m.ps))
	var cuts []int64
	for d := range nd {
		h := need[d]
		if h == nil {
			continue
		}
		have := m.have[d]
		for i, sp := range h {
			if sp.len() == 0 {
				continue
			}
			lack := []span{sp}
			if have != nil {
				lack = sp.minus(have[i])
			}
			for _, x := range lack {
				// Cut x where a holder's span starts or ends; each
				// segment then has one set of holders.
				cuts = append(cuts[:0], x.lo, x.hi)
				cut := func(s span) {
					if s.lo > x.lo && s.lo < x.hi {
						cuts = append(cuts, s.lo)
					}
					if s.hi > x.lo && s.hi < x.hi {
						cuts = append(cuts, s.hi)
					}
				}
				for _, src := range m.holders[i] {
					cut(m.have[src][i])
				}
				for _, r := range reads[i] {
					cut(r.sp)
				}
				slices.Sort(cuts)
				cuts = slices.Compact(cuts)
				for j := 0; j+1 < len(cuts); j++ {
					seg := span{cuts[j], cuts[j+1]}
					best, bestT := -1, 0.0
					for _, src := range m.holders[i] {
						s := m.have[src][i]
						if src == d || s.lo > seg.lo || s.hi < seg.hi {
							continue
						}
						t := m.time(src, d, seg.len())
						if best < 0 || t < bestT || t == bestT && sent[src] < sent[best] {
							best, bestT = src, t
						}
					}
					if best >= 0 {
						add(best, d, m.ps[i].kind, seg.len(), false)
						continue
					}
					if kinds[m.ps[i].kind] == KindGradients {
						// No checkpoint holds a step's gradients: those of
						// a lost device are lost, and its share of the
						// accumulation is run again.
						continue
					}
					// From a device that read it from the checkpoint, if
					// that is faster than reading it again.
					bestT = float64(seg.len()) / m.bandwidth
					for _, r := range reads[i] {
						if r.dev == d || r.sp.lo > seg.lo || r.sp.hi < seg.hi {
							continue
						}
						if t := m.time(r.dev, d, seg.len()); t < bestT || best >= 0 && t == bestT && sent[r.dev] < sent[best] {
							best, bestT = r.dev, t
						}
					}
					if best >= 0 {
						add(best, d, m.ps[i].kind, seg.len(), true)
						continue
					}
					add(-1, d, m.ps[i].kind, seg.len(), false)
					reads[i] = append(reads[i], read{d, seg})
				}
			}
		}
	}
	var mg migration
	name := func(d int) string {
		if d < 0 {
			return Checkpoint
		}
		return m.c.Devices[d].Name
	}
	keys := make([]pair, 0, len(bytes))
	for k := range bytes {
		keys = append(keys, k)
	}
	// Sources in the cluster's order, the checkpoint last; then
	// destinations.
	order := func(d int) int {
		if d < 0 {
			return nd
		}
		return d
	}
	slices.SortFunc(keys, func(a, b pair) int {
		return cmp.Or(cmp.Compare(order(a.from), order(b.from)), cmp.Compare(a.to, b.to), boolCmp(a.relay, b.relay))
	})
	for _, k := range keys {
		v := bytes[k]
		mv := Move{From: name(k.from), To: name(k.to), WeightBytes: v[0], OptimizerBytes: v[1], GradientBytes: v[2], Relayed: k.relay}
		mv.Bytes = v[0] + v[1] + v[2]
		if k.from < 0 {
			mg.checkpointBytes += mv.Bytes
		} else {
			mg.linkBytes += mv.Bytes
		}
		mg.moves = append(mg.moves, mv)
	}
	end, bound := m.schedule(keys, mg.moves)
	mg.ms, mg.boundMS = plan.MS(end), plan.MS(bound)
	return mg
}

// schedule times the moves on the channels the simulator's transfers
// occupy (sim.Channels: the sender's send channel, the receiver's receive
// channel, and the host fabric or both hosts' network cards on the way):
// a move from a device takes the cluster's transfer time for its bytes
// (cluster.TransferTime, the simulator's); a read from the checkpoint
// takes its bytes over the checkpoint bandwidth, on the receiver's
// receive channel and one channel every read shares (the storage's
// aggregate rate). A channel carries one move at a time, as the
// simulator's transfers take turns. The reads from the checkpoint are
// placed first, then the moves between devices, each group longest first
// (ties by source, then destination), each move at the earliest time all
// its channels are free for its whole length (earlier moves' gaps
// included) and, for a move that passes on bytes its sender read
// (Relayed), no earlier than that read's end. It sets each move's start
// and end and returns the last end and the busiest channel's total in
// seconds, a bound no order of these moves beats.
func (m *migrator) schedule(keys []pair, moves []Move) (float64, float64) {
	nd := len(m.c.Devices)
	storage := sim.NumChannels(m.c)
	type job struct {
		i     int
		read  bool
		dur   float64
		chans []int
		after int // the read a relayed move waits for, -1 none
	}
	readOf := map[int]int{} // device: its read's move
	for i, k := range keys {
		if k.from < 0 {
			readOf[k.to] = i
		}
	}
	jobs := make([]job, len(moves))
	for i, k := range keys {
		j := job{i: i, read: k.from < 0, after: -1}
		if k.relay {
			j.after = readOf[k.from]
		}
		if k.from < 0 {
			j.dur = float64(moves[i].Bytes) / m.bandwidth
			j.chans = []int{storage, nd + k.to}
		} else {
			j.dur = m.c.TransferTime(k.from, k.to, moves[i].Bytes)
			j.chans = sim.Channels(m.c, k.from, k.to, nil)
		}
		jobs[i] = j
	}
	slices.SortStableFunc(jobs, func(a, b job) int {
		if a.read != b.read {
			if a.read {
				return -1
			}
			return 1
		}
		return cmp.Compare(b.dur, a.dur)
	})
	ends := make([]float64, len(moves))
	type interval struct{ start, end float64 }
	busy := map[int][]interval{} // per channel, by start
	total := map[int]float64{}
	fits := func(ch int, start, end float64) bool {
		for _, iv := range busy[ch] {
			if iv.start < end && start < iv.end {
				return false
			}
		}
		return true
	}
	var end, bound float64
	for _, j := range jobs {
		// The earliest start is 0 or the end of a move on one of its
		// channels.
		first := 0.0
		if j.after >= 0 {
			first = ends[j.after]
		}
		starts := []float64{first}
		for _, ch := range j.chans {
			for _, iv := range busy[ch] {
				if iv.end > first {
					starts = append(starts, iv.end)
				}
			}
		}
		slices.Sort(starts)
		start := starts[len(starts)-1]
		for _, s := range starts {
			if !slices.ContainsFunc(j.chans, func(ch int) bool { return !fits(ch, s, s+j.dur) }) {
				start = s
				break
			}
		}
		e := start + j.dur
		for _, ch := range j.chans {
			busy[ch] = append(busy[ch], interval{start, e})
			total[ch] += j.dur
			bound = max(bound, total[ch])
		}
		moves[j.i].StartMS, moves[j.i].EndMS = plan.MS(start), plan.MS(e)
		ends[j.i] = e
		end = max(end, e)
	}
	return end, bound
}

// time is how long bytes take over the link from a to b at its
// bandwidth, latency aside: the moves gather many pieces into one
// transfer per pair, which pays the latency once.
func (m *migrator) time(a, b int, bytes int64) float64 {
	return float64(bytes) / m.c.Path(a, b).Bandwidth
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
