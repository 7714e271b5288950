package view

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/opplace/opplace/internal/printable"
	"github.com/opplace/opplace/plan"
)

// Trace processes: Perfetto and chrome://tracing draw a process as a
// group of tracks.
const (
	tracePIDDevices     = 1
	tracePIDLinks       = 2
	tracePIDCollectives = 3
)

// traceEvent is one event of the Chrome trace event format
// (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU).
// Times are in microseconds.
type traceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`
	Dur  *float64       `json:"dur,omitempty"`
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// WriteTrace writes the plan's simulated step in the Chrome trace event
// format: a track per device with every op run (name, type, phase,
// stage, micro-batch) and the idle time inside its stage's span marked
// as bubbles, a track per link with every copy (tensor, bytes), a track
// per stage's all-reduces, and each device's memory as a counter. Devices
// that mirror a replica are not drawn: the plan's ops name the first
// replica's devices.
func WriteTrace(w io.Writer, p *plan.Plan) error {
	l, err := newLayout(p, nil)
	if err != nil {
		return err
	}
	t := newTimeline(l)
	var events []traceEvent
	// Names come from the model and cluster files: what a trace viewer
	// would act on (controls, bidi overrides) is escaped.
	meta := func(pid, tid int, kind, name string, sort int) {
		events = append(events, traceEvent{Name: kind, Ph: "M", PID: pid, TID: tid, Args: map[string]any{"name": printable.String(name)}})
		if kind == "thread_name" {
			events = append(events, traceEvent{Name: "thread_sort_index", Ph: "M", PID: pid, TID: tid, Args: map[string]any{"sort_index": sort}})
		}
	}
	meta(tracePIDDevices, 0, "process_name", "devices", 0)
	meta(tracePIDLinks, 0, "process_name", "links", 0)
	meta(tracePIDCollectives, 0, "process_name", "all-reduces", 0)
	complete := func(name, cat string, pid, tid int, startMS, endMS float64, args map[string]any) {
		dur := us(endMS - startMS)
		events = append(events, traceEvent{Name: printable.String(name), Cat: cat, Ph: "X", TS: us(startMS), Dur: &dur, PID: pid, TID: tid, Args: printableArgs(args)})
	}
	for dev, runs := range t.onDevice {
		if len(runs) == 0 {
			continue
		}
		d := &p.Devices[dev]
		meta(tracePIDDevices, dev, "thread_name", fmt.Sprintf("%s (%s)", d.Name, d.Type), dev)
		stage := l.stageOf[dev]
		for _, r := range runs {
			op, s := &p.Ops[r.op], t.spans[r.op][r.k]
			args := map[string]any{"type": op.Type, "phase": op.Phase, "stage": max(0, stage), "micro_batch": s.mb}
			complete(op.Name, op.Phase, tracePIDDevices, dev, s.start, s.end, args)
		}
		// Bubbles: the device's idle time between its first start and
		// its last end.
		end := t.spans[runs[0].op][runs[0].k].end
		for _, r := range runs[1:] {
			s := t.spans[r.op][r.k]
			if s.start > end+slackMS {
				complete("idle", "bubble", tracePIDDevices, dev, end, s.start, nil)
			}
			end = max(end, s.end)
		}
	}
	// Links: one track per ordered device pair that copies tensors.
	links := map[[2]int]int{}
	var linkKeys [][2]int
	for _, tr := range p.Transfers {
		k := [2]int{l.devIndex[tr.From], l.devIndex[tr.To]}
		if _, ok := links[k]; !ok {
			links[k] = 0
			linkKeys = append(linkKeys, k)
		}
	}
	slices.SortFunc(linkKeys, func(a, b [2]int) int {
		if a[0] != b[0] {
			return a[0] - b[0]
		}
		return a[1] - b[1]
	})
	for i, k := range linkKeys {
		links[k] = i
		meta(tracePIDLinks, i, "thread_name", p.Devices[k[0]].Name+" -> "+p.Devices[k[1]].Name, i)
	}
	for _, tr := range p.Transfers {
		tid := links[[2]int{l.devIndex[tr.From], l.devIndex[tr.To]}]
		complete(tr.Tensor, "transfer", tracePIDLinks, tid, tr.StartMS, tr.EndMS,
			map[string]any{"bytes": tr.Bytes, "micro_batch": tr.MicroBatch, "from": tr.From, "to": tr.To})
	}
	stagesSeen := map[int]bool{}
	for _, a := range p.AllReduces {
		if !stagesSeen[a.Stage] {
			stagesSeen[a.Stage] = true
			meta(tracePIDCollectives, a.Stage, "thread_name", "stage "+strconv.Itoa(a.Stage), a.Stage)
		}
		kind, args := a.Kind, map[string]any{"bytes": a.Bytes, "devices": a.Devices}
		if kind == "" { // plans written before kinds were recorded
			kind = "all-reduce"
		}
		name := kind
		if a.Tensor != "" { // a tensor-parallel group's collective of one activation
			name += " " + a.Tensor
			args["tensor"] = a.Tensor
		}
		complete(name, kind, tracePIDCollectives, a.Stage, a.StartMS, a.EndMS, args)
	}
	for dev := range p.Devices {
		if len(t.onDevice[dev]) == 0 {
			continue
		}
		name := "memory " + p.Devices[dev].Name
		for _, m := range p.Devices[dev].Memory {
			events = append(events, traceEvent{Name: printable.String(name), Ph: "C", TS: us(m.MS), PID: tracePIDDevices, TID: dev,
				Args: map[string]any{"GiB": math.Round(float64(m.Bytes)/(1<<30)*1e6) / 1e6}})
		}
	}
	bw := bufio.NewWriter(w)
	doc := struct {
		DisplayTimeUnit string         `json:"displayTimeUnit"`
		Metadata        map[string]any `json:"otherData"`
	}{"ms", map[string]any{
		"model": printable.String(p.Model), "cluster": printable.String(p.Cluster), "strategy": p.Strategy,
		"predicted_step_ms": p.PredictedStepMS, "micro_batches": p.MicroBatches,
	}}
	head, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	// One event per line keeps a large trace greppable and diffable.
	bw.Write(head[:len(head)-1])
	bw.WriteString(",\"traceEvents\":[\n")
	for i, e := range events {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		bw.Write(b)
		if i < len(events)-1 {
			bw.WriteByte(',')
		}
		bw.WriteByte('\n')
	}
	bw.WriteString("]}\n")
	return bw.Flush()
}

// us converts ms to the trace's microseconds, rounded to the nanosecond.
func us(ms float64) float64 { return math.Round(ms*1e6) / 1e3 }

// printableArgs escapes the strings of a trace event's arguments in
// place (see printable).
func printableArgs(args map[string]any) map[string]any {
	for k, v := range args {
		switch v := v.(type) {
		case string:
			args[k] = printable.String(v)
		case []string:
			out := make([]string, len(v))
			for i, s := range v {
				out[i] = printable.String(s)
			}
			args[k] = out
		}
	}
	return args
}
