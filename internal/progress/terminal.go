package progress

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rivo/uniseg"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// IsTerminal reports whether w is a terminal (an *os.File, or anything
// with a file descriptor, open on a tty).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// ForWriter is the reporter a command line uses for w (its stderr): a
// Terminal when w is a terminal and quiet is false, else Nop.
func ForWriter(w io.Writer, quiet bool) Reporter {
	if quiet || !IsTerminal(w) {
		return Nop()
	}
	opts := []Option{}
	if f, ok := w.(interface{ Fd() uintptr }); ok {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
			opts = append(opts, Columns(cols))
		}
	}
	return NewTerminal(w, opts...)
}

// Terminal draws the newest running task as one progress bar
// (github.com/schollz/progressbar/v3) on a terminal: its stage (after the
// stages it runs inside, "compare 4/13 › exact: downsets"), the part done,
// the time spent and the time left. A task shows only once it has run
// for a while (ShowAfter), so quick work prints nothing; bars are redrawn
// on a timer (Refresh), never by Add or Set, and are cleared when their
// task is done, so nothing is left on the terminal.
type Terminal struct {
	w        io.Writer
	delay    time.Duration
	interval time.Duration
	cols     int

	mu      sync.Mutex
	tasks   []*termTask // running, oldest first
	shown   *termTask
	running bool // the drawing goroutine
	closed  bool

	draws atomic.Int64 // redraws so far, for tests to wait on
}

// Option configures a Terminal.
type Option func(*Terminal)

// ShowAfter sets how long a task runs before its bar is drawn (default
// 300 ms).
func ShowAfter(d time.Duration) Option { return func(t *Terminal) { t.delay = d } }

// Refresh sets how often the bar is redrawn (default 100 ms).
func Refresh(d time.Duration) Option {
	return func(t *Terminal) {
		if d > 0 {
			t.interval = d
		}
	}
}

// Columns sets the terminal's width (default 80).
func Columns(n int) Option {
	return func(t *Terminal) {
		if n > 0 {
			t.cols = n
		}
	}
}

// NewTerminal returns a reporter drawing on w whether or not w is a
// terminal (ForWriter checks).
func NewTerminal(w io.Writer, opts ...Option) *Terminal {
	t := &Terminal{w: w, delay: 300 * time.Millisecond, interval: 100 * time.Millisecond, cols: 80}
	for _, o := range opts {
		o(t)
	}
	return t
}

// Start begins a task counting items.
func (t *Terminal) Start(stage string, total int64) Task { return t.StartUnit(stage, total, Items) }

// StartUnit begins a task counting unit.
func (t *Terminal) StartUnit(stage string, total int64, unit Unit) Task {
	k := &termTask{t: t, unit: unit, total: max(total, 0), start: time.Now()}
	k.gate.w = t.w
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nopTask{}
	}
	desc := stage
	if n := len(t.tasks); n > 0 {
		desc = t.tasks[n-1].label() + " › " + stage
	}
	k.desc = desc
	k.bar = t.newBar(k, desc)
	k.bar.StartWithoutRender()
	t.tasks = append(t.tasks, k)
	if !t.running {
		t.running = true
		go t.loop()
	}
	return k
}

func (t *Terminal) newBar(k *termTask, desc string) *progressbar.ProgressBar {
	// After the description: " 45% |bar| (11/13) [1m2s] ", or sizes
	// and a rate for bytes; the bar takes what is left of the line, 10
	// to 30 columns, and the description (the ETA included) at most the
	// rest.
	rest := 5 + 2 + 20 + 1
	if k.unit == Bytes {
		rest += 17
	}
	if k.total > 0 {
		rest += etaWidth
	}
	width := min(30, max(10, t.cols-rest-uniseg.StringWidth(desc)-1))
	k.short = truncateLeft(desc, max(16, t.cols-rest-width-1))
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(&k.gate),
		progressbar.OptionSetDescription(k.describe(time.Now())),
		progressbar.OptionSetWidth(width),
		progressbar.OptionThrottle(0),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionUseANSICodes(true),
		progressbar.OptionSetPredictTime(false), // the ETA is ours, in the description
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionSetSpinnerChangeInterval(0), // one frame per redraw: no goroutine of its own
	}
	switch k.unit {
	case Items:
		opts = append(opts, progressbar.OptionShowCount())
	case Bytes:
		opts = append(opts, progressbar.OptionShowBytes(true), progressbar.OptionShowCount())
	}
	if k.total <= 0 {
		if k.unit == Items {
			opts = opts[:len(opts)-1] // a spinner: no count
		}
		return progressbar.NewOptions64(-1, opts...)
	}
	return progressbar.NewOptions64(k.total, opts...)
}

// etaWidth is the width of the ETA after a description.
const etaWidth = len(" (ETA 59m59s)")

// describe is the bar's description at now: the stage and, with a
// total, the time left at the task's average rate so far ("?" until a
// unit is done), padded so the bar does not move.
func (k *termTask) describe(now time.Time) string {
	if k.total <= 0 {
		return k.short + " "
	}
	left := "?"
	if n := min(k.n.Load(), k.total); n > 0 {
		elapsed := now.Sub(k.start)
		left = formatETA(time.Duration(float64(elapsed) * float64(k.total-n) / float64(n)))
	}
	eta := " (ETA " + left + ")"
	return k.short + eta + strings.Repeat(" ", max(0, etaWidth-len(eta))) + " "
}

// formatETA writes d in at most 5 characters: 42s, 3m05s, 2h07m.
func formatETA(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return strconv.FormatInt(s, 10) + "s"
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 100*3600:
		return fmt.Sprintf("%dh%02dm", s/3600, s/60%60)
	}
	return ">99h"
}

// truncateLeft keeps the end of s (the innermost stage) within width
// columns.
func truncateLeft(s string, width int) string {
	if uniseg.StringWidth(s) <= width {
		return s
	}
	g := uniseg.NewGraphemes(s)
	var parts []string
	for g.Next() {
		parts = append(parts, g.Str())
	}
	w := 1 // the ellipsis
	i := len(parts)
	for i > 0 && w+uniseg.StringWidth(parts[i-1]) <= width {
		w += uniseg.StringWidth(parts[i-1])
		i--
	}
	return "…" + strings.Join(parts[i:], "")
}

// loop redraws every interval until no task is left.
func (t *Terminal) loop() {
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	for range tick.C {
		t.mu.Lock()
		if len(t.tasks) == 0 {
			t.running = false
			t.mu.Unlock()
			return
		}
		t.drawLocked(time.Now())
		t.mu.Unlock()
		t.draws.Add(1)
	}
}

// drawLocked shows the newest task that has run past the delay, after
// bringing every task's bar up to date (hidden bars draw into nothing,
// which keeps their rates and time left right for when they show).
func (t *Terminal) drawLocked(now time.Time) {
	var top *termTask
	for i := len(t.tasks) - 1; i >= 0; i-- {
		if now.Sub(t.tasks[i].start) >= t.delay {
			top = t.tasks[i]
			break
		}
	}
	if top != t.shown {
		if t.shown != nil {
			t.shown.bar.Clear()
			t.shown.gate.on.Store(false)
		}
		t.shown = top
		if top != nil {
			top.gate.on.Store(true)
		}
	}
	for _, k := range t.tasks {
		n := k.n.Load()
		if k.total > 0 {
			n = min(max(n, 0), k.total)
		}
		if k != top {
			k.bar.Set64(n) // draws into nothing
			continue
		}
		// The description changes with the ETA: set it without a redraw
		// (Describe redraws), then redraw once.
		progressbar.OptionSetDescription(k.describe(now))(k.bar)
		k.bar.Set64(n) // redraws when the count is shown
		if k.unit == Millis || k.total <= 0 && k.unit == Items {
			k.bar.RenderBlank() // no count shown: redraw for the clock
		}
	}
}

// finish ends k, clearing its bar.
func (t *Terminal) finish(k *termTask) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if k.done {
		return
	}
	k.done = true
	for i, x := range t.tasks {
		if x == k {
			t.tasks = append(t.tasks[:i], t.tasks[i+1:]...)
			break
		}
	}
	k.bar.Finish() // clears the line when shown; writes nowhere otherwise
	k.gate.on.Store(false)
	if t.shown == k {
		t.shown = nil
	}
}

// Close ends every task still running and clears the terminal's line;
// tasks started afterwards report nothing.
func (t *Terminal) Close() {
	t.mu.Lock()
	tasks := append([]*termTask(nil), t.tasks...)
	t.closed = true
	t.mu.Unlock()
	for _, k := range tasks {
		t.finish(k)
	}
}

// Writer returns a writer to the terminal that clears the bar before
// each write, so messages do not land on the bar's line; the bar is
// redrawn below them.
func (t *Terminal) Writer() io.Writer { return termWriter{t} }

type termWriter struct{ t *Terminal }

func (w termWriter) Write(p []byte) (int, error) {
	w.t.mu.Lock()
	defer w.t.mu.Unlock()
	if w.t.shown != nil {
		w.t.shown.bar.Clear()
	}
	return w.t.w.Write(p)
}

// termTask is a task of a Terminal. Add and Set only store the count;
// the drawing goroutine reads it.
type termTask struct {
	t     *Terminal
	unit  Unit
	total int64
	start time.Time
	desc  string // the stage after the stages it runs inside
	short string // desc to fit the line
	n     atomic.Int64
	bar   *progressbar.ProgressBar
	gate  gate
	done  bool // under t.mu
}

func (k *termTask) Add(n int64) { k.n.Add(n) }
func (k *termTask) Set(n int64) { k.n.Store(n) }
func (k *termTask) Done()       { k.t.finish(k) }

// label is how a task is named before the stages running inside it:
// its stage and, counting items, the one under way ("compare 4/13").
func (k *termTask) label() string {
	if k.total > 0 && k.unit == Items {
		return k.desc + " " + strconv.FormatInt(min(k.n.Load()+1, k.total), 10) + "/" + strconv.FormatInt(k.total, 10)
	}
	return k.desc
}

// gate passes a bar's output to the terminal only while the bar is the
// one shown.
type gate struct {
	w  io.Writer
	on atomic.Bool
}

func (g *gate) Write(p []byte) (int, error) {
	if !g.on.Load() {
		return len(p), nil
	}
	return g.w.Write(p)
}
