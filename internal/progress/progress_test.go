package progress

import (
	"bytes"
	"context"
	"io"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFrom(t *testing.T) {
	rec := &Recorder{}
	tests := []struct {
		name    string
		ctx     context.Context
		want    Reporter
		enabled bool
	}{
		{"no reporter", context.Background(), Nop(), false},
		{"nil context", nil, Nop(), false},
		{"recorder", With(context.Background(), rec), rec, true},
		{"nil reporter", With(context.Background(), nil), Nop(), false},
		{"inner wins", With(With(context.Background(), Nop()), rec), rec, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := From(tt.ctx)
			if r != tt.want {
				t.Errorf("From = %#v, want %#v", r, tt.want)
			}
			if Enabled(r) != tt.enabled {
				t.Errorf("Enabled = %v, want %v", Enabled(r), tt.enabled)
			}
		})
	}
}

// TestNop checks that the default reporter's tasks do nothing, whatever
// they are told.
func TestNop(t *testing.T) {
	task := From(context.Background()).Start("stage", 10)
	task.Add(3)
	task.Set(20)
	task.Done()
	task.Done()
	if done := Timed(Nop(), "stage", time.Second); done == nil {
		t.Fatal("Timed returned nil")
	} else {
		done()
	}
}

func TestDefault(t *testing.T) {
	if Default() != Nop() {
		t.Fatalf("Default = %#v before SetDefault", Default())
	}
	rec := &Recorder{}
	restore := SetDefault(rec)
	if From(context.Background()) != rec {
		t.Error("From does not fall back to the default")
	}
	if From(With(context.Background(), Nop())) != Nop() {
		t.Error("the default overrides the context's reporter")
	}
	restore()
	if Default() != Nop() {
		t.Errorf("Default = %#v after restore", Default())
	}
}

// plain is a Reporter that does not tell units apart.
type plain struct{ Recorder }

func (p *plain) Start(stage string, total int64) Task { return p.Recorder.Start(stage, total) }

func TestStartUnit(t *testing.T) {
	tests := []struct {
		name string
		r    interface {
			Reporter
			Events() []Event
		}
		want Unit
	}{
		{"unit reporter", &Recorder{}, Bytes},
		{"plain reporter", &plain{}, Items},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Reporter = tt.r
			if p, ok := tt.r.(*plain); ok {
				r = struct{ Reporter }{p} // hide StartUnit
			}
			StartUnit(r, "reading", 100, Bytes).Done()
			ev := tt.r.Events()
			if len(ev) != 2 || ev[0].Op != "start" || ev[0].Unit != tt.want || ev[0].N != 100 || ev[1].Op != "done" {
				t.Errorf("events %+v, want a start of 100 %v and a done", ev, tt.want)
			}
		})
	}
}

func TestTimed(t *testing.T) {
	rec := &Recorder{}
	done := Timed(rec, "solver", 10*time.Second)
	// Wait for two updates, however loaded the machine.
	for deadline := time.Now().Add(30 * time.Second); len(rec.Events()) < 3; {
		if time.Now().After(deadline) {
			t.Fatal("no update in 30 s")
		}
		time.Sleep(time.Millisecond)
	}
	done()
	done() // twice is fine
	ev := rec.Events()
	if len(ev) < 3 {
		t.Fatalf("events %+v, want a start, sets and a done", ev)
	}
	if ev[0] != (Event{Stage: "solver", Op: "start", N: 10000, Unit: Millis}) {
		t.Errorf("start %+v", ev[0])
	}
	last := int64(0)
	for _, e := range ev[1 : len(ev)-1] {
		if e.Op != "set" || e.N < last || e.N > 10000 {
			t.Errorf("event %+v after %d ms: want sets of growing elapsed milliseconds", e, last)
		}
		last = e.N
	}
	if ev[len(ev)-1].Op != "done" {
		t.Errorf("last event %+v, want done", ev[len(ev)-1])
	}
	if n := len(rec.Events()); n != len(ev) {
		t.Errorf("%d events after done, %d before", n, len(ev))
	}
}

// TestForWriter checks that no bar is made for what is not a terminal,
// or with quiet.
func TestForWriter(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	tests := []struct {
		name  string
		w     io.Writer
		quiet bool
	}{
		{"buffer", &bytes.Buffer{}, false},
		{"pipe", w, false},
		{"pipe, quiet", w, true},
		{"discard", io.Discard, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if IsTerminal(tt.w) {
				t.Fatal("IsTerminal is true")
			}
			rep := ForWriter(tt.w, tt.quiet)
			if Enabled(rep) {
				t.Fatalf("ForWriter = %#v, want Nop", rep)
			}
			task := rep.Start("stage", 3)
			task.Add(1)
			task.Done()
			if b, ok := tt.w.(*bytes.Buffer); ok && b.Len() > 0 {
				t.Errorf("wrote %q", b.String())
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for the drawing goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// clearLine is what a bar ends with: the line erased.
const clearLine = "\x1b[2K\r"

// TestTerminal draws tasks on a buffer, as if it were a terminal: the
// stage, the count, the ETA, the bar cleared at the end.
func TestTerminal(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, r *Terminal)
		want []string // in the output
		not  []string // not in the output
	}{{
		name: "count",
		run: func(t *testing.T, r *Terminal) {
			task := r.Start("exact: downsets", 4)
			task.Add(1)
			wait(t, r)
			task.Done()
		},
		want: []string{"exact: downsets (ETA ", "25%", "(1/4)", "[0s]"},
	}, {
		name: "nothing done yet",
		run: func(t *testing.T, r *Terminal) {
			task := r.Start("compare", 13)
			wait(t, r)
			task.Done()
		},
		want: []string{"compare (ETA ?)", "(0/13)"},
	}, {
		name: "spinner",
		run: func(t *testing.T, r *Terminal) {
			task := r.Start("exact: enumerating downsets", 0)
			wait(t, r)
			task.Done()
		},
		want: []string{"exact: enumerating downsets "},
		not:  []string{"ETA", "%"},
	}, {
		name: "bytes",
		run: func(t *testing.T, r *Terminal) {
			task := StartUnit(r, "onnx: reading big.onnx", 200<<20, Bytes)
			task.Add(100 << 20)
			wait(t, r)
			task.Done()
		},
		want: []string{"onnx: reading big.onnx", "50%", "MB"},
	}, {
		name: "time budget",
		run: func(t *testing.T, r *Terminal) {
			done := Timed(r, "ilp: Cbc", time.Second)
			wait(t, r)
			done()
		},
		want: []string{"ilp: Cbc (ETA "},
		not:  []string{"/1000"},
	}, {
		name: "nested",
		run: func(t *testing.T, r *Terminal) {
			outer := r.Start("compare", 3)
			outer.Add(1)
			inner := r.Start("exact: downsets", 2)
			wait(t, r)
			inner.Done()
			outer.Done()
		},
		want: []string{"compare 2/3 › exact: downsets"},
	}, {
		name: "over the total",
		run: func(t *testing.T, r *Terminal) {
			task := r.Start("stage", 2)
			task.Set(5)
			wait(t, r)
			task.Done()
		},
		not: []string{"(5/2)"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf syncBuffer
			r := NewTerminal(&buf, ShowAfter(0), Refresh(2*time.Millisecond), Columns(120))
			tt.run(t, r)
			r.Close()
			out := buf.String()
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%q", w, out)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%q", w, out)
				}
			}
			if out != "" && !strings.HasSuffix(out, clearLine) {
				t.Errorf("the bar is not cleared at the end:\n%q", out)
			}
		})
	}
}

// wait returns once r's drawing goroutine has redrawn a few times,
// however loaded the machine (a fixed sleep is not enough on a busy CI
// runner: the goroutine may not have run at all).
func wait(t *testing.T, r *Terminal) {
	t.Helper()
	from := r.draws.Load()
	deadline := time.Now().Add(30 * time.Second)
	for r.draws.Load() < from+3 {
		if time.Now().After(deadline) {
			t.Fatal("the bar was not redrawn in 30 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTerminalQuick checks that work shorter than ShowAfter prints
// nothing at all.
func TestTerminalQuick(t *testing.T) {
	var buf syncBuffer
	r := NewTerminal(&buf, ShowAfter(time.Hour), Refresh(time.Millisecond))
	task := r.Start("stage", 10)
	for range 10 {
		task.Add(1)
	}
	wait(t, r)
	task.Done()
	r.Close()
	if out := buf.String(); out != "" {
		t.Errorf("wrote %q", out)
	}
}

// TestTerminalWriter checks that messages written while a bar shows
// clear it first.
func TestTerminalWriter(t *testing.T) {
	var buf syncBuffer
	r := NewTerminal(&buf, ShowAfter(0), Refresh(time.Millisecond))
	task := r.Start("stage", 10)
	wait(t, r)
	io.WriteString(r.Writer(), "warning: something\n")
	task.Done()
	r.Close()
	out := buf.String()
	i := strings.Index(out, "warning: something\n")
	if i < 0 || !strings.HasSuffix(out[:i], clearLine) {
		t.Errorf("the message does not follow a cleared line:\n%q", out)
	}
}

// TestTerminalConcurrent reports from many goroutines at once (run with
// -race).
func TestTerminalConcurrent(t *testing.T) {
	var buf syncBuffer
	r := NewTerminal(&buf, ShowAfter(0), Refresh(time.Millisecond))
	outer := r.Start("outer", 8)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			task := r.Start("inner", 1000)
			for j := range 1000 {
				task.Add(1)
				if j%100 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
			if i%2 == 0 {
				task.Done()
			}
			outer.Add(1)
		}()
	}
	wg.Wait()
	r.Close() // ends the tasks left running
	if out := buf.String(); !strings.HasSuffix(out, clearLine) {
		t.Errorf("the bar is not cleared at the end:\n%q", out[max(0, len(out)-200):])
	}
	// Tasks started after Close report nothing.
	n := len(buf.String())
	task := r.Start("late", 1)
	task.Add(1)
	task.Done()
	if len(buf.String()) != n {
		t.Error("a task started after Close wrote")
	}
}

func TestTruncateLeft(t *testing.T) {
	tests := []struct {
		s     string
		width int
		want  string
	}{
		{"compare", 10, "compare"},
		{"compare 2/3 › exact: downsets", 29, "compare 2/3 › exact: downsets"},
		{"compare 2/3 › exact: downsets", 16, "…exact: downsets"},
		{"abc", 1, "…"},
	}
	for _, tt := range tests {
		if got := truncateLeft(tt.s, tt.width); got != tt.want {
			t.Errorf("truncateLeft(%q, %d) = %q, want %q", tt.s, tt.width, got, tt.want)
		}
	}
}

func TestFormatETA(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{1400 * time.Millisecond, "1s"},
		{59 * time.Second, "59s"},
		{65 * time.Second, "1m05s"},
		{2*time.Hour + 7*time.Minute, "2h07m"},
		{200 * time.Hour, ">99h"},
	}
	for _, tt := range tests {
		if got := formatETA(tt.d); got != tt.want {
			t.Errorf("formatETA(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestRecorder(t *testing.T) {
	rec := &Recorder{}
	a := rec.Start("a", 2)
	a.Add(1)
	a.Set(2)
	a.Done()
	want := []Event{{"a", "start", 2, Items}, {"a", "add", 1, Items}, {"a", "set", 2, Items}, {"a", "done", 0, Items}}
	if got := rec.Events(); !reflect.DeepEqual(got, want) {
		t.Errorf("events %+v, want %+v", got, want)
	}
}

// BenchmarkAdd is the cost a hot loop pays per report.
func BenchmarkAdd(b *testing.B) {
	for _, bc := range []struct {
		name string
		r    Reporter
	}{
		{"nop", Nop()},
		{"terminal", NewTerminal(io.Discard, ShowAfter(0))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			task := bc.r.Start("stage", int64(b.N))
			for b.Loop() {
				task.Add(1)
			}
			task.Done()
		})
	}
}
