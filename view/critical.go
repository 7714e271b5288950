package view

import (
	"cmp"
	"slices"

	"github.com/opplace/opplace/graph"
)

// run is one run of a plan op: its index in the op's runs (or 0 for an
// op run once).
type run struct {
	op, k int
}

// span is a run's times and micro-batch.
type span struct {
	mb         int
	start, end float64
}

// timeline indexes the plan's runs: each op's spans, each device's runs
// in start order, the graph's dependencies between plan ops, and when
// each tensor copy arrived.
type timeline struct {
	*layout
	spans [][]span
	// onDevice lists each device's runs in start order; pos each run's
	// position there.
	onDevice [][]run
	pos      map[run]int
	// preds[i] are op i's inputs: the producing op and the tensor.
	preds [][]pred
	// arrival[{tensor, micro-batch, device}] is when a copy arrived.
	arrival map[copyKey]float64
}

type pred struct {
	op     int
	tensor string
}

type copyKey struct {
	tensor string
	mb     int
	dev    int
}

func newTimeline(l *layout) *timeline {
	t := &timeline{layout: l, spans: make([][]span, len(l.p.Ops)), onDevice: make([][]run, len(l.p.Devices)), pos: map[run]int{}}
	for i := range l.p.Ops {
		op := &l.p.Ops[i]
		if len(op.Runs) == 0 {
			t.spans[i] = []span{{0, op.StartMS, op.EndMS}}
		} else {
			for _, r := range op.Runs {
				t.spans[i] = append(t.spans[i], span{r.MicroBatch, r.StartMS, r.EndMS})
			}
		}
		for k := range t.spans[i] {
			t.onDevice[l.opDev[i]] = append(t.onDevice[l.opDev[i]], run{i, k})
		}
	}
	for d, runs := range t.onDevice {
		slices.SortStableFunc(runs, func(a, b run) int {
			sa, sb := t.spans[a.op][a.k], t.spans[b.op][b.k]
			return cmp.Or(cmp.Compare(sa.start, sb.start), cmp.Compare(sa.end, sb.end), cmp.Compare(a.op, b.op), cmp.Compare(a.k, b.k))
		})
		for i, r := range runs {
			t.pos[r] = i
		}
		t.onDevice[d] = runs
	}
	t.arrival = make(map[copyKey]float64, len(l.p.Transfers))
	for _, tr := range l.p.Transfers {
		if d, ok := l.devIndex[tr.To]; ok {
			k := copyKey{tr.Tensor, tr.MicroBatch, d}
			t.arrival[k] = max(t.arrival[k], tr.EndMS)
		}
	}
	t.preds = make([][]pred, len(l.p.Ops))
	if g := l.g; g != nil {
		for id := range g.Ops {
			i, ok := l.opIndex[g.Ops[id].Name]
			if !ok {
				continue
			}
			seen := map[int]bool{}
			for _, in := range g.Ops[id].Inputs {
				tn := &g.Tensors[in]
				if tn.Producer == graph.NoOp {
					continue
				}
				if p, ok := l.opIndex[g.Ops[tn.Producer].Name]; ok && !seen[p] {
					seen[p] = true
					t.preds[i] = append(t.preds[i], pred{p, tn.Name})
				}
			}
			for _, c := range g.Ops[id].ControlDeps {
				if p, ok := l.opIndex[g.Ops[c].Name]; ok && !seen[p] {
					seen[p] = true
					t.preds[i] = append(t.preds[i], pred{op: p})
				}
			}
		}
	}
	return t
}

// matching is the run of op p that run r of op c waits for: p's only
// run, the same micro-batch's, or, for an op run once per step after
// per-micro-batch inputs, the last to finish.
func (t *timeline) matching(p int, r run) run {
	ps := t.spans[p]
	if len(ps) == 1 {
		return run{p, 0}
	}
	if len(t.spans[r.op]) == 1 {
		last := 0
		for k := range ps {
			if ps[k].end > ps[last].end {
				last = k
			}
		}
		return run{p, last}
	}
	mb := t.spans[r.op][r.k].mb
	for k := range ps {
		if ps[k].mb == mb {
			return run{p, k}
		}
	}
	return run{p, 0}
}

// criticalPath walks back from the run that finished last through
// whatever it waited for: the input that arrived last (a copy's arrival
// when it crossed devices) or the previous run on its device, whichever
// ended last no later than the run started. The ops and the data edges
// on that chain are what decided the step's end.
type criticalPath struct {
	ops   map[int]bool
	edges map[[2]int]bool
	// runs is the chain, last run first.
	runs []run
}

const slackMS = 1e-6

func (t *timeline) criticalPath() *criticalPath {
	cp := &criticalPath{ops: map[int]bool{}, edges: map[[2]int]bool{}}
	var cur run
	found := false
	for i, spans := range t.spans {
		for k, s := range spans {
			if !found || s.end > t.spans[cur.op][cur.k].end {
				cur, found = run{i, k}, true
			}
		}
	}
	if !found {
		return cp
	}
	visited := map[run]bool{}
	for !visited[cur] {
		visited[cur] = true
		cp.ops[cur.op] = true
		cp.runs = append(cp.runs, cur)
		start := t.spans[cur.op][cur.k].start
		dev := t.opDev[cur.op]
		best, bestAt, viaData := run{}, -1.0, false
		for _, pr := range t.preds[cur.op] {
			m := t.matching(pr.op, cur)
			at := t.spans[m.op][m.k].end
			if a, ok := t.arrival[copyKey{pr.tensor, t.spans[m.op][m.k].mb, dev}]; ok && t.opDev[m.op] != dev {
				at = a
			}
			if at <= start+slackMS && at > bestAt {
				best, bestAt, viaData = m, at, true
			}
		}
		if i := t.pos[cur]; i > 0 {
			prev := t.onDevice[dev][i-1]
			if at := t.spans[prev.op][prev.k].end; at <= start+slackMS && at > bestAt {
				best, bestAt, viaData = prev, at, false
			}
		}
		if bestAt < 0 {
			break
		}
		if viaData {
			cp.edges[[2]int{best.op, cur.op}] = true
		}
		cur = best
	}
	return cp
}
