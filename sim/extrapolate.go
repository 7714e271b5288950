package sim

import (
	"math"
)

// Extrapolating a step of many micro-batches (see Run).
//
// A step of many micro-batches repeats itself: once every stage is past
// its warm-up (1F1B's first forwards, a first micro-batch's once-per-step
// work), each further micro-batch of the same size adds the same time to
// every stage, the same bytes to every link and leaves the same memory
// behind. Run exploits that: instead of simulating all M micro-batches
// it simulates the first m, m+1 and m+2 of them (each of the size M
// gives), and when every figure of the result grows by the same amount
// from m to m+1 as from m+1 to m+2, extrapolates each figure to M along
// that line. When any figure does not (the step has not settled by m
// micro-batches) it simulates all M. A step is extrapolated only where
// the three short runs cost well under the long one, and never when the
// plan asks for its timeline (Plan.Record): what a trace or a view draws
// is always simulated run by run.

// extrapolation bounds how far an extrapolated time may stray, as a share
// of the step: two increments of a time must agree within this share of
// the step over the micro-batches added (float rounding of event times
// is some 1e-15 of the step; a step that has not settled differs by a
// share of a micro-batch's time).
const extrapolation = 1e-9

// extrapolatedAt is the micro-batch count m from which a step of plan p,
// of stages stages, is expected to have settled, and whether simulating
// m, m+1 and m+2 micro-batches costs at most half of simulating all of
// them.
func extrapolatedAt(p *Plan, stages []Stage) (int, bool) {
	m := len(stages) + 2
	return m, 2*(3*m+3) <= p.microBatches()
}

// extrapolate is plan p's step extrapolated from three short runs, or
// nil when p asks for its timeline, has too few micro-batches for the
// short runs to save time, or its step has not settled after them.
func (sm *Simulator) extrapolate(p *Plan, opStage []int, stages []Stage) *Result {
	m, ok := extrapolatedAt(p, stages)
	if p.Record || !ok {
		return nil
	}
	var runs [3]*Result
	for i := range runs {
		res, err := sm.simulate(p, opStage, stages, m+i)
		if err != nil {
			return nil // the full run reports it
		}
		runs[i] = res
	}
	return extend(runs, p.microBatches()-m-2)
}

// extend is the result of runs[2] with k more micro-batches, each adding
// what the one before runs[2]'s last added, or nil when runs[0] to
// runs[1] and runs[1] to runs[2] differ in any figure's increment (a
// time's by more than extrapolation's share of the step over k, so that
// k increments stray by no more than that share).
func extend(runs [3]*Result, k int) *Result {
	a, b, c := runs[0].figures(), runs[1].figures(), runs[2].figures()
	tol := extrapolation * runs[2].Step / float64(max(k, 1))
	for i := range c.times {
		if math.Abs((*c.times[i]-*b.times[i])-(*b.times[i]-*a.times[i])) > tol {
			return nil
		}
	}
	for i := range c.sizes {
		if *c.sizes[i]-*b.sizes[i] != *b.sizes[i]-*a.sizes[i] {
			return nil
		}
	}
	for i := range c.counts {
		if *c.counts[i]-*b.counts[i] != *b.counts[i]-*a.counts[i] {
			return nil
		}
	}
	for i := range c.times {
		*c.times[i] += float64(k) * (*c.times[i] - *b.times[i])
	}
	for i := range c.counts {
		*c.counts[i] += k * (*c.counts[i] - *b.counts[i])
	}
	for i := range c.sizes {
		*c.sizes[i] += int64(k) * (*c.sizes[i] - *b.sizes[i])
	}
	res := runs[2]
	res.MicroBatches += k
	res.Transfers, res.Collectives = nil, nil
	res.Extrapolated = true
	if len(res.Stages) > 1 && res.Step > 0 {
		var busy float64
		for _, sr := range res.Stages {
			busy += sr.Compute + sr.Update
		}
		res.Bubble = 1 - busy/(float64(len(res.Stages))*res.Step)
	}
	return res
}

// figureSet points at every figure of a result that a step's length
// moves: times (seconds) and sizes (bytes and counts).
type figureSet struct {
	times  []*float64
	sizes  []*int64
	counts []*int
}

// figures lists r's figures, in one fixed order.
func (r *Result) figures() figureSet {
	var f figureSet
	f.times = append(f.times, &r.Step)
	for i := range r.Start {
		f.times = append(f.times, &r.Start[i], &r.End[i])
	}
	for i := range r.Busy {
		f.times = append(f.times, &r.Busy[i])
	}
	for i := range r.PeakMemory {
		f.sizes = append(f.sizes, &r.PeakMemory[i], &r.ResidentMemory[i])
	}
	f.sizes = append(f.sizes, &r.TransferBytes, &r.CollectiveBytes)
	for i := range r.Stages {
		st := &r.Stages[i]
		f.times = append(f.times, &st.Start, &st.End, &st.Compute, &st.Update, &st.Send, &st.AllReduce, &st.TensorSync, &st.TensorSyncExposed)
		f.sizes = append(f.sizes, &st.AllReduceBytes, &st.TensorSyncBytes, &st.PeakMemory)
		f.counts = append(f.counts, &st.AliveMicroBatches)
	}
	return f
}

// Agrees reports whether full, the same plan's step simulated run by run,
// has r's step: the same, or within extrapolation's tolerance when r was
// extrapolated.
func (r *Result) Agrees(full *Result) bool {
	if r.Extrapolated {
		return math.Abs(r.Step-full.Step) <= extrapolation*full.Step
	}
	return r.Step == full.Step
}
