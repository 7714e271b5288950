package partition

import "github.com/opplace/opplace/sim"

// timeline is a simulated pipeline step.
type timeline struct {
	makespan float64 // end of the last forward or backward
	// step is the makespan with each stage's per-step work (all-reduce
	// and update) after its last pass: the latest of end+perStep.
	step  float64
	busy  []float64
	alive []int // most micro-batches whose activations a stage held
	// start and end of each stage's first and last task
	start, end []float64
}

// passTimes are a pipeline's per-micro-batch times, per stage: the
// compute of a forward and of a backward, and the send that follows each
// (to the next stage, to the previous one), and the per-step work after
// the stage's last pass.
type passTimes struct {
	fwd, bwd, fwdSend, bwdSend, perStep []float64
}

// simulateSchedule runs M micro-batches through the stages as the
// simulator does: each stage runs its passes in sim.Passes's order (the
// schedule sim.Run follows), a pass's send occupies the stage's send
// link, not the stage, so the next pass computes while it sends, and a
// stage's all-reduce and update run after its own last pass. F(i, m)
// waits for F(i-1, m)'s send; B(i, m) for B(i+1, m)'s send and F(i, m).
func simulateSchedule(pt passTimes, M int, sched Schedule, training bool) timeline {
	S := len(pt.fwd)
	seq := make([][]sim.Pass, S)
	for i := range seq {
		seq[i] = sim.Passes(sim.Schedule(sched), training, S, i, M)
	}
	const unset = -1.0
	// fArr[i][m]: micro-batch m's activations from stage i arrived at
	// stage i+1; bArr[i][m]: its gradients from stage i at stage i-1;
	// fEnd[i][m]: stage i's forward of m done.
	fArr, bArr, fEnd := make([][]float64, S), make([][]float64, S), make([][]float64, S)
	for i := range fArr {
		fArr[i], bArr[i], fEnd[i] = make([]float64, M), make([]float64, M), make([]float64, M)
		for m := 0; m < M; m++ {
			fArr[i][m], bArr[i][m], fEnd[i][m] = unset, unset, unset
		}
	}
	tl := timeline{busy: make([]float64, S), alive: make([]int, S), start: make([]float64, S), end: make([]float64, S)}
	next := make([]int, S)
	free := make([]float64, S) // the stage's compute
	link := make([]float64, S) // the stage's send link
	live := make([]int, S)
	send := func(i int, at, d float64) float64 {
		if d <= 0 {
			return at
		}
		link[i] = max(link[i], at) + d
		return link[i]
	}
	for progress := true; progress; {
		progress = false
		for i := 0; i < S; i++ {
			for next[i] < len(seq[i]) {
				t := seq[i][next[i]]
				ready := free[i]
				var end float64
				if !t.Backward {
					if i > 0 {
						if fArr[i-1][t.MicroBatch] == unset {
							break
						}
						ready = max(ready, fArr[i-1][t.MicroBatch])
					}
					end = ready + pt.fwd[i]
					fEnd[i][t.MicroBatch] = end
					fArr[i][t.MicroBatch] = send(i, end, pt.fwdSend[i])
					tl.busy[i] += pt.fwd[i]
					live[i]++
					tl.alive[i] = max(tl.alive[i], live[i])
				} else {
					if i+1 < S {
						if bArr[i+1][t.MicroBatch] == unset {
							break
						}
						ready = max(ready, bArr[i+1][t.MicroBatch])
					}
					ready = max(ready, fEnd[i][t.MicroBatch])
					end = ready + pt.bwd[i]
					bArr[i][t.MicroBatch] = send(i, end, pt.bwdSend[i])
					tl.busy[i] += pt.bwd[i]
					live[i]--
				}
				free[i] = end
				tl.makespan = max(tl.makespan, end)
				if next[i] == 0 {
					tl.start[i] = ready // the first task is a forward
				}
				tl.end[i] = end
				next[i]++
				progress = true
			}
		}
	}
	for i := range tl.end {
		var per float64
		if pt.perStep != nil {
			per = pt.perStep[i]
		}
		tl.step = max(tl.step, tl.end[i]+per)
	}
	if !training {
		for i := range tl.alive {
			tl.alive[i] = 1 // a stage holds one micro-batch at a time
		}
	}
	return tl
}
