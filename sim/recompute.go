package sim

import (
	"slices"

	"github.com/opplace/opplace/graph"
)

// moduleIDs numbers the modules graph.ModuleKeys gives g's forward
// ops: -1 for an op outside any module (and for backward and update
// ops), else the key's index in order of first use.
func moduleIDs(g *graph.Graph) []int32 {
	keys := graph.ModuleKeys(g)
	ids := make([]int32, len(keys))
	seen := map[string]int32{}
	for op, k := range keys {
		if k == "" {
			ids[op] = -1
			continue
		}
		id, ok := seen[k]
		if !ok {
			id = int32(len(seen))
			seen[k] = id
		}
		ids[op] = id
	}
	return ids
}

// Instance states of a recomputed activation.
const (
	rcHeld     uint8 = iota // allocated by its producer, not yet dropped
	rcDropped               // freed once its forward readers were done
	rcRestored              // recomputed (or never dropped): freed as usual
)

// recompute is the step's activation recomputation (Stage.Recompute).
type recompute struct {
	// saved[t]: tensor t is an activation of a recomputing segment that
	// backward ops read and that is no checkpoint.
	saved []bool
	// seg[op] is the segment of a forward op of a recomputing stage, -1
	// for other ops.
	seg []int32
	// Per segment: its saved tensors, its device and the forward time of
	// one micro-batch of its ops there.
	tensors [][]graph.TensorID
	dev     []int
	time    []float64
	// fwdLeft[inst] is the forward reads of a saved instance left;
	// state[inst] its rc state; done[seg*M+mb] marks a segment's
	// micro-batch recomputed.
	fwdLeft []int32
	state   []uint8
	done    []bool
	// extra[d] is the recompute time device d ran.
	extra []float64
}

// newRecompute works out the segments and saved tensors of s's plan, or
// nil when no stage recomputes.
func newRecompute(s *state) *recompute {
	if !s.training {
		return nil
	}
	on := false
	for _, st := range s.stages {
		on = on || st.Recompute
	}
	if !on {
		return nil
	}
	g := s.g
	modules := s.modules()
	rc := &recompute{seg: make([]int32, len(g.Ops)), saved: make([]bool, len(g.Tensors)), extra: make([]float64, s.nd)}
	ids := map[[2]int32]int32{}
	for op := range g.Ops {
		rc.seg[op] = -1
		if g.Ops[op].Phase != graph.Forward || !s.perMB[op] || !s.stages[s.opStage[op]].Recompute {
			continue
		}
		d := s.dev[op]
		k := [2]int32{modules[op], int32(d)}
		id, ok := ids[k]
		if !ok {
			id = int32(len(rc.dev))
			ids[k] = id
			rc.dev = append(rc.dev, d)
			rc.time = append(rc.time, 0)
			rc.tensors = append(rc.tensors, nil)
		}
		rc.seg[op] = id
		// A recomputed op's syncs run again, inside the backward op
		// that restores the segment.
		rc.time[id] += s.computeTime(graph.OpID(op), d) + s.runSyncTime(graph.OpID(op), d)
	}
	for t := range g.Tensors {
		if rc.isSaved(s, graph.TensorID(t)) {
			rc.saved[t] = true
			sg := rc.seg[g.Tensors[t].Producer]
			rc.tensors[sg] = append(rc.tensors[sg], graph.TensorID(t))
		}
	}
	ni := len(s.instT)
	rc.fwdLeft = make([]int32, ni)
	rc.state = make([]uint8, ni)
	rc.done = make([]bool, len(rc.dev)*s.M)
	for t, sv := range rc.saved {
		if !sv {
			continue
		}
		var n int32
		for _, c := range s.consumers[t] {
			if g.Ops[c].Phase == graph.Forward {
				n++
			}
		}
		for k := s.tensBase[t]; k < s.tensBase[t+1]; k++ {
			rc.fwdLeft[k] = n
		}
	}
	return rc
}

// isSaved reports whether t is an activation a recomputing segment frees
// after the forward pass and recomputes for the backward: produced per
// micro-batch by a segment's op, read by forward ops of that segment
// only (or by none: the inner tensors of a fused op, which only its
// backward reads) and by backward ops (at least one), all on its
// producer's device, and no graph output.
func (rc *recompute) isSaved(s *state, t graph.TensorID) bool {
	tn := &s.g.Tensors[t]
	if tn.Producer == graph.NoOp || tn.Kind != graph.Activation || s.perStep[t] || s.isOutput[t] {
		return false
	}
	sg := rc.seg[tn.Producer]
	if sg < 0 {
		return false
	}
	d := s.dev[tn.Producer]
	bwd := false
	for _, c := range s.consumers[t] {
		if s.dev[c] != d {
			return false
		}
		switch s.g.Ops[c].Phase {
		case graph.Forward:
			if rc.seg[c] != sg {
				return false // a checkpoint: the next segment's input
			}
		case graph.Backward:
			bwd = true
		default:
			return false
		}
	}
	return bwd
}

// backwardReaders lists, per segment, the backward ops that read its
// saved tensors, each once, in the order of the tensors and their
// consumers: one of them recomputes the segment's forward per
// micro-batch (restore), the first to run.
func (rc *recompute) backwardReaders(s *state) [][]graph.OpID {
	out := make([][]graph.OpID, len(rc.tensors))
	for sg, ts := range rc.tensors {
		for _, t := range ts {
			for _, c := range s.consumers[t] {
				if s.g.Ops[c].Phase == graph.Backward && !slices.Contains(out[sg], c) {
					out[sg] = append(out[sg], c)
				}
			}
		}
	}
	return out
}

// read counts forward op's read of saved tensor in (micro-batch mb),
// already released, and frees the instance once its forward readers are
// done while backward readers are left.
func (rc *recompute) read(s *state, op graph.OpID, in graph.TensorID, mb int, now float64) {
	if !rc.saved[in] || s.g.Ops[op].Phase != graph.Forward {
		return
	}
	inst := s.instance(in, mb)
	rc.fwdLeft[inst]--
	rc.drop(s, in, inst, now)
}

// drop frees instance inst of tensor t once it is produced and its
// forward readers are done, while backward readers are left.
func (rc *recompute) drop(s *state, t graph.TensorID, inst int32, now float64) {
	if !rc.saved[t] || rc.fwdLeft[inst] > 0 || rc.state[inst] != rcHeld || s.prodLeft[inst] > 0 {
		return
	}
	d := s.dev[s.g.Tensors[t].Producer]
	if s.left[s.leftAt(inst, d)] > 0 {
		rc.state[inst] = rcDropped
		s.alloc(now, d, -s.memBytes(t, d))
	}
}

// restore recomputes, before backward op's run of micro-batch mb starts
// at now, the segments whose dropped activations it reads: their saved
// activations are allocated again, and their forward time is returned,
// to be added to the op's.
func (rc *recompute) restore(s *state, op graph.OpID, mb int, now float64) float64 {
	var extra float64
	for _, in := range s.inputs[op] {
		if !rc.saved[in] || rc.state[s.instance(in, mb)] != rcDropped {
			continue
		}
		sg := rc.seg[s.g.Tensors[in].Producer]
		if i := int(sg)*s.M + mb; !rc.done[i] {
			rc.done[i] = true
			d := rc.dev[sg]
			for _, t := range rc.tensors[sg] {
				k := s.instance(t, mb)
				if rc.state[k] == rcDropped {
					s.alloc(now, d, s.memBytes(t, d))
				}
				rc.state[k] = rcRestored
			}
			extra += rc.time[sg]
			rc.extra[d] += rc.time[sg]
		}
	}
	return extra
}
