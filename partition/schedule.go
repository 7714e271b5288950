package partition

// timeline is a simulated pipeline step.
type timeline struct {
	makespan float64 // end of the last forward or backward
	busy     []float64
	alive    []int // most micro-batches whose activations a stage held
	// start and end of each stage's first and last task
	start, end []float64
}

// simulateSchedule runs M micro-batches through stages whose forward and
// backward take f[i] and b[i] per micro-batch (sends included, so a
// task may start when its upstream task ends). Each stage runs its tasks
// in the schedule's fixed order:
//
//	inference: F0 … F(M-1)
//	gpipe:     F0 … F(M-1), B0 … B(M-1)
//	1f1b:      w = min(stages-i-1, M) warm-up forwards, then F(w+j), B(j)
//	           pairs, then the remaining backwards
//
// F(i, m) waits for F(i-1, m); B(i, m) waits for B(i+1, m) and F(i, m).
func simulateSchedule(f, b []float64, M int, sched Schedule, training bool) timeline {
	S := len(f)
	type task struct {
		bwd bool
		mb  int
	}
	seq := make([][]task, S)
	for i := 0; i < S; i++ {
		switch {
		case !training:
			for m := 0; m < M; m++ {
				seq[i] = append(seq[i], task{false, m})
			}
		case sched == GPipe:
			for m := 0; m < M; m++ {
				seq[i] = append(seq[i], task{false, m})
			}
			for m := 0; m < M; m++ {
				seq[i] = append(seq[i], task{true, m})
			}
		default:
			w := min(S-i-1, M)
			for m := 0; m < w; m++ {
				seq[i] = append(seq[i], task{false, m})
			}
			for j := 0; j < M-w; j++ {
				seq[i] = append(seq[i], task{false, w + j}, task{true, j})
			}
			for m := M - w; m < M; m++ {
				seq[i] = append(seq[i], task{true, m})
			}
		}
	}
	const unset = -1.0
	fEnd := make([][]float64, S)
	bEnd := make([][]float64, S)
	for i := range fEnd {
		fEnd[i] = make([]float64, M)
		bEnd[i] = make([]float64, M)
		for m := 0; m < M; m++ {
			fEnd[i][m], bEnd[i][m] = unset, unset
		}
	}
	tl := timeline{busy: make([]float64, S), alive: make([]int, S), start: make([]float64, S), end: make([]float64, S)}
	next := make([]int, S)
	free := make([]float64, S)
	live := make([]int, S)
	for progress := true; progress; {
		progress = false
		for i := 0; i < S; i++ {
			for next[i] < len(seq[i]) {
				t := seq[i][next[i]]
				ready := free[i]
				if !t.bwd {
					if i > 0 {
						if fEnd[i-1][t.mb] == unset {
							break
						}
						ready = max(ready, fEnd[i-1][t.mb])
					}
					fEnd[i][t.mb] = ready + f[i]
					free[i] = ready + f[i]
					tl.busy[i] += f[i]
					live[i]++
					tl.alive[i] = max(tl.alive[i], live[i])
				} else {
					if i+1 < S {
						if bEnd[i+1][t.mb] == unset {
							break
						}
						ready = max(ready, bEnd[i+1][t.mb])
					}
					ready = max(ready, fEnd[i][t.mb])
					bEnd[i][t.mb] = ready + b[i]
					free[i] = ready + b[i]
					tl.busy[i] += b[i]
					live[i]--
				}
				tl.makespan = max(tl.makespan, free[i])
				if next[i] == 0 {
					tl.start[i] = free[i] - f[i] // the first task is a forward
				}
				tl.end[i] = free[i]
				next[i]++
				progress = true
			}
		}
	}
	if !training {
		for i := range tl.alive {
			tl.alive[i] = 1 // a stage holds one micro-batch at a time
		}
	}
	return tl
}
