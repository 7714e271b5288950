package progress

import "sync"

// Recorder is a Reporter that records every call, for tests of the
// code that reports.
type Recorder struct {
	mu     sync.Mutex
	events []Event
}

// Event is one call a Recorder saw.
type Event struct {
	// Stage is the task's stage.
	Stage string
	// Op is "start", "add", "set" or "done".
	Op string
	// N is the total for start, the argument of add and set.
	N int64
	// Unit is the start's unit.
	Unit Unit
}

// Start records a task's start.
func (r *Recorder) Start(stage string, total int64) Task {
	return r.StartUnit(stage, total, Items)
}

// StartUnit records a task's start with its unit.
func (r *Recorder) StartUnit(stage string, total int64, unit Unit) Task {
	r.record(Event{Stage: stage, Op: "start", N: total, Unit: unit})
	return &recTask{r: r, stage: stage}
}

// Events returns what was recorded so far, in order.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Stages returns the stages started, in order.
func (r *Recorder) Stages() []string {
	var s []string
	for _, e := range r.Events() {
		if e.Op == "start" {
			s = append(s, e.Stage)
		}
	}
	return s
}

func (r *Recorder) record(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

type recTask struct {
	r     *Recorder
	stage string
}

func (t *recTask) Add(n int64) { t.r.record(Event{Stage: t.stage, Op: "add", N: n}) }
func (t *recTask) Set(n int64) { t.r.record(Event{Stage: t.stage, Op: "set", N: n}) }
func (t *recTask) Done()       { t.r.record(Event{Stage: t.stage, Op: "done"}) }
