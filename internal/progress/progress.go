// Package progress lets long computations say how far they are without
// knowing who, if anyone, is watching.
//
// Library code takes the Reporter from its context (From), starts a Task
// per stage of work and adds to it as units of work finish:
//
//	t := progress.From(ctx).Start("exact: downsets", int64(len(Ms)))
//	defer t.Done()
//	for ... { ...; t.Add(1) }
//
// With no reporter in the context, From returns Nop, whose tasks do
// nothing, so library callers and tests see no output and pay one
// interface call per report. The command line puts a Terminal (a
// progress bar on stderr) into its context only when stderr is a terminal
// and --quiet is not given (ForWriter), and makes it the process's Default
// for code that takes no context (model import).
//
// Reports are cheap (Terminal's Add and Set are one atomic operation;
// drawing happens on its own goroutine a few times a second), but hot
// loops should still report in batches: per micro-batch count, per
// strategy, per op measured, per megabyte read.
package progress

import (
	"context"
	"sync/atomic"
	"time"
)

// Reporter starts tasks. Implementations must be safe for concurrent use.
type Reporter interface {
	// Start begins a task: stage names it ("exact: downsets", "compare"),
	// total is the units of work it will do, or 0 (or less) when that is
	// not known (a spinner).
	Start(stage string, total int64) Task
}

// Task is one stage of work under way. Its methods are safe for
// concurrent use; Done may be called more than once.
type Task interface {
	// Add records n more units done.
	Add(n int64)
	// Set records that n units are done in all.
	Set(n int64)
	// Done ends the task (finished or abandoned); its bar, if any, is
	// cleared.
	Done()
}

// Unit says what a task counts, for reporters that format it.
type Unit int

const (
	// Items are counted as they are ("3/11").
	Items Unit = iota
	// Bytes are shown as sizes and rates ("120 MB/1.2 GB, 300 MB/s").
	Bytes
	// Millis are milliseconds of a time budget: only the bar, the time
	// spent and the time left are shown.
	Millis
)

// UnitReporter is a Reporter that formats units other than items.
type UnitReporter interface {
	Reporter
	StartUnit(stage string, total int64, unit Unit) Task
}

// StartUnit starts a task counting unit on r, or a plain task when r does
// not tell units apart.
func StartUnit(r Reporter, stage string, total int64, unit Unit) Task {
	if ur, ok := r.(UnitReporter); ok {
		return ur.StartUnit(stage, total, unit)
	}
	return r.Start(stage, total)
}

// Timed starts a task measuring elapsed time against limit (a solver's
// time budget), in milliseconds, and sets it every 50 ms until the
// returned function is called, which ends the task. On Nop it starts
// nothing.
func Timed(r Reporter, stage string, limit time.Duration) (done func()) {
	if !Enabled(r) || limit <= 0 {
		return func() {}
	}
	t := StartUnit(r, stage, limit.Milliseconds(), Millis)
	begin := time.Now()
	stop := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(timedInterval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				t.Set(min(time.Since(begin), limit).Milliseconds())
			}
		}
	}()
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			close(stop)
			<-finished
			t.Done()
		}
	}
}

// timedInterval is how often Timed updates its task.
const timedInterval = 50 * time.Millisecond

// Nop returns the reporter that reports nothing.
func Nop() Reporter { return nopReporter{} }

type nopReporter struct{}

func (nopReporter) Start(string, int64) Task { return nopTask{} }

type nopTask struct{}

func (nopTask) Add(int64) {}
func (nopTask) Set(int64) {}
func (nopTask) Done()     {}

// Enabled reports whether r shows anything, for callers that would do
// extra work (a goroutine, a counting reader) only to report.
func Enabled(r Reporter) bool {
	_, nop := r.(nopReporter)
	return r != nil && !nop
}

type ctxKey struct{}

// With returns a context carrying r (Nop when r is nil).
func With(ctx context.Context, r Reporter) context.Context {
	if r == nil {
		r = Nop()
	}
	return context.WithValue(ctx, ctxKey{}, r)
}

// From returns the reporter ctx carries, or Default when it carries none
// (ctx may be nil).
func From(ctx context.Context) Reporter {
	if ctx != nil {
		if r, ok := ctx.Value(ctxKey{}).(Reporter); ok {
			return r
		}
	}
	return Default()
}

type holder struct{ r Reporter }

var defaultReporter atomic.Pointer[holder]

// Default is the process's reporter for code that has no context (model
// import): Nop unless a main program set another with SetDefault.
func Default() Reporter {
	if h := defaultReporter.Load(); h != nil {
		return h.r
	}
	return Nop()
}

// SetDefault makes r the process's default reporter and returns a
// function restoring the previous one. Main programs call it, and tests
// of code that takes no context; everything else passes reporters in
// contexts.
func SetDefault(r Reporter) (restore func()) {
	if r == nil {
		r = Nop()
	}
	old := defaultReporter.Swap(&holder{r})
	return func() { defaultReporter.Store(old) }
}
