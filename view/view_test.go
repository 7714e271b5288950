package view

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/plan"
)

func TestModulePath(t *testing.T) {
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"/layer3/layer3.2/conv1/Conv", []string{"layer3", "layer3.2", "conv1"}},
		{"/layer3/layer3.2/conv1/Conv/grad", []string{"layer3", "layer3.2", "conv1"}},
		{"tower_0/conv1/Conv2D", []string{"tower_0", "conv1"}},
		{"Identity_46", []string{}},
		{"fc.weight/adam", []string{"fc.weight"}},
	} {
		if got := modulePath(tc.name); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("modulePath(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// twoDevicePlan is a training chain a0 -> a1 -> b0 -> b1 and its
// gradients, modules /a/ on gpu0 and /b/ on gpu1, one copy each way,
// with the graph it was made for.
func twoDevicePlan() (*plan.Plan, *graph.Graph) {
	g := graphtest.New("g").Input("x", 8).Param("w", 64).
		Op("/a/l0/MatMul", 1, 1<<20, "x", "w").
		Op("/a/l1/Relu", 1, 1<<20, "/a/l0/MatMul").
		Op("Identity_7", 1, 8, "w").
		Op("/b/l0/MatMul", 1, 2<<20, "/a/l1/Relu", "Identity_7").
		Op("/b/l1/Relu", 1, 8, "/b/l0/MatMul").
		Op("/b/l1/Relu/grad", 1, 8, "/b/l1/Relu").
		Op("/a/l1/Relu/grad", 1, 8, "/b/l1/Relu/grad", "/a/l1/Relu").Output("/a/l1/Relu/grad").G
	p := &plan.Plan{
		Model: "m.onnx", Cluster: "c", Strategy: "m-etf", PredictedStepMS: 10, LowerBoundMS: 8, Gap: 0.25,
		Devices: []plan.Device{
			{Name: "gpu0", Type: "V100", MemoryBytes: 16 << 30, PeakMemoryBytes: 1 << 30, BusyMS: 5, Ops: 3,
				Memory: []plan.MemorySample{{MS: 0, Bytes: 1 << 20}, {MS: 2, Bytes: 1 << 30}, {MS: 9, Bytes: 1 << 20}}},
			{Name: "gpu1", Type: "V100", MemoryBytes: 16 << 30, PeakMemoryBytes: 2 << 30, BusyMS: 4, Ops: 4},
			{Name: "gpu2", Type: "V100", MemoryBytes: 16 << 30},
		},
		Ops: []plan.Op{
			{Name: "/a/l0/MatMul", Type: "MatMul", Phase: "forward", Device: "gpu0", StartMS: 0, EndMS: 1},
			{Name: "/a/l1/Relu", Type: "Relu", Phase: "forward", Device: "gpu0", StartMS: 1, EndMS: 2},
			{Name: "Identity_7", Type: "Identity", Phase: "forward", Device: "gpu1", StartMS: 0, EndMS: 0.5},
			{Name: "/b/l0/MatMul", Type: "MatMul", Phase: "forward", Device: "gpu1", StartMS: 3, EndMS: 5},
			{Name: "/b/l1/Relu", Type: "Relu", Phase: "forward", Device: "gpu1", StartMS: 5, EndMS: 6},
			{Name: "/b/l1/Relu/grad", Type: "ReluGrad", Phase: "backward", Device: "gpu1", StartMS: 6, EndMS: 7},
			{Name: "/a/l1/Relu/grad", Type: "ReluGrad", Phase: "backward", Device: "gpu0", StartMS: 8, EndMS: 10},
		},
		Transfers: []plan.Transfer{
			{Tensor: "/a/l1/Relu", From: "gpu0", To: "gpu1", Bytes: 1 << 20, StartMS: 2, EndMS: 3},
			{Tensor: "/b/l1/Relu/grad", From: "gpu1", To: "gpu0", Bytes: 8, StartMS: 7, EndMS: 8},
		},
		Stages: []plan.Stage{{Index: 0, Devices: []string{"gpu0", "gpu1"}, Replicas: 1}},
	}
	return p, g
}

func TestCriticalPath(t *testing.T) {
	p, g := twoDevicePlan()
	l, err := newLayout(p, g)
	if err != nil {
		t.Fatal(err)
	}
	cp := newTimeline(l).criticalPath()
	// From the last op back: its gradient input arrived at 8 (the copy),
	// b1's grad waited for b1 (device and data), b1 for b0, b0 for the
	// copy of a1 arriving at 3, a1 for a0. Identity_7 ended at 0.5 and
	// decided nothing.
	var names []string
	for _, r := range cp.runs {
		names = append(names, p.Ops[r.op].Name)
	}
	want := []string{"/a/l1/Relu/grad", "/b/l1/Relu/grad", "/b/l1/Relu", "/b/l0/MatMul", "/a/l1/Relu", "/a/l0/MatMul"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("critical path %q, want %q", names, want)
	}
	if !cp.edges[[2]int{1, 3}] || cp.edges[[2]int{2, 3}] {
		t.Errorf("critical edges %v: want a1 -> b0, not Identity_7 -> b0", cp.edges)
	}
}

func TestCriticalPathMicroBatches(t *testing.T) {
	// Two stages, two micro-batches: f0 on gpu0, f1 on gpu1 waiting for
	// f0's copy of the same micro-batch.
	g := graphtest.New("g").Input("x", 8).Op("/s0/f", 1, 8, "x").Op("/s1/f", 1, 8, "/s0/f").Output("/s1/f").G
	p := &plan.Plan{
		PredictedStepMS: 4,
		Devices:         []plan.Device{{Name: "gpu0", Ops: 1}, {Name: "gpu1", Ops: 1}},
		Ops: []plan.Op{
			{Name: "/s0/f", Phase: "forward", Device: "gpu0", StartMS: 0, EndMS: 2, Runs: []plan.Run{{MicroBatch: 0, StartMS: 0, EndMS: 1}, {MicroBatch: 1, StartMS: 1, EndMS: 2}}},
			{Name: "/s1/f", Phase: "forward", Device: "gpu1", StartMS: 1.5, EndMS: 4, Runs: []plan.Run{{MicroBatch: 0, StartMS: 1.5, EndMS: 2.5}, {MicroBatch: 1, StartMS: 3, EndMS: 4}}},
		},
		Transfers: []plan.Transfer{
			{Tensor: "/s0/f", From: "gpu0", To: "gpu1", StartMS: 1, EndMS: 1.5},
			{Tensor: "/s0/f", MicroBatch: 1, From: "gpu0", To: "gpu1", StartMS: 2, EndMS: 3},
		},
	}
	l, err := newLayout(p, g)
	if err != nil {
		t.Fatal(err)
	}
	cp := newTimeline(l).criticalPath()
	var got []string
	for _, r := range cp.runs {
		got = append(got, fmt.Sprintf("%s#%d", p.Ops[r.op].Name, l.p.Ops[r.op].Runs[r.k].MicroBatch))
	}
	// Micro-batch 1 on stage 1 waited for its copy (3), not for its
	// device (free at 2.5).
	if want := []string{"/s1/f#1", "/s0/f#1", "/s0/f#0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("critical path %q, want %q", got, want)
	}
}

func TestModuleBlocks(t *testing.T) {
	p, g := twoDevicePlan()
	l, _ := newLayout(p, g)
	describe := func(blocks []*block) []string {
		var out []string
		for _, b := range blocks {
			out = append(out, fmt.Sprintf("%s %s %s %d", p.Devices[b.dev].Name, strings.Join(b.path, "/"), b.phase, len(b.ops)))
		}
		return out
	}
	for _, tc := range []struct {
		max  int
		want []string
	}{
		// Identity_7 has no module path: it joins the block it runs in.
		{32, []string{"gpu0 a/l0 forward 1", "gpu0 a/l1 forward 1", "gpu0 a/l1 backward 1", "gpu1 b/l0 forward 2", "gpu1 b/l1 forward 1", "gpu1 b/l1 backward 1"}},
		// Level 2 would take six blocks: stay at the top level.
		{5, []string{"gpu0 a forward 2", "gpu0 a backward 1", "gpu1 b forward 3", "gpu1 b backward 1"}},
		// Past the budget at the top level, neighbours merge.
		{2, []string{"gpu0 a mixed 3", "gpu1 b mixed 4"}},
	} {
		o := DefaultOptions()
		o.MaxBlocks = tc.max
		if got := describe(moduleBlocks(l, o)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("budget %d: blocks %q, want %q", tc.max, got, tc.want)
		}
	}
	o := DefaultOptions()
	o.Module = "/b/"
	if got, want := describe(moduleBlocks(l, o)), []string{"gpu1 b/l0 forward 1", "gpu1 b/l1 forward 1", "gpu1 b/l1 backward 1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("module filter: blocks %q, want %q", got, want)
	}
}

func TestWriteDOT(t *testing.T) {
	p, g := twoDevicePlan()
	for _, tc := range []struct {
		detail    Detail
		want, not []string
	}{
		{Devices, []string{`"d0" [label="gpu0 (V100)\n3 ops, busy 5.00 ms (50%)\npeak 1.00 GiB of 16.00 GiB"`,
			`"d0" -> "d1" [label="1.00 MiB in 1 copy\n1.00 ms"`, `unused: gpu2`,
			// 8 B against 1 MiB: counted, not drawn.
			`"small" [label="1 smaller flow not drawn\n(8 B in all)"`}, []string{`"d2"`, `"d1" -> "d0"`}},
		{Stages, []string{`"s0" [label="stage 0 on gpu0, gpu1`}, []string{"->"}},
		{Modules, []string{`subgraph "cluster_dev0"`, `label="/a/l1\nforward: 1 op, 1.00 ms\nparams 0 B, writes 1.00 MiB\n(critical path)"`,
			`"b1" -> "b3" [color="#1f77b4", penwidth="1.5", label="1.00 MiB\n1.00 ms", fontcolor="#1f77b4", color="#d62728", penwidth="2.5"]`},
			[]string{`"/a/l0/MatMul"`}},
		{Ops, []string{`"/a/l1/Relu" -> "/b/l0/MatMul" [label="1.00 MiB"`, `"Identity_7" -> "/b/l0/MatMul";`}, nil},
	} {
		o := DefaultOptions()
		o.Detail = tc.detail
		var b bytes.Buffer
		if err := WriteDOT(&b, p, g, o); err != nil {
			t.Fatalf("%s: %v", tc.detail, err)
		}
		out := b.String()
		if strings.Count(out, "{") != strings.Count(out, "}") {
			t.Errorf("%s: unbalanced braces", tc.detail)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s view lacks %s:\n%s", tc.detail, w, out)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(out, w) {
				t.Errorf("%s view has %s:\n%s", tc.detail, w, out)
			}
		}
	}
}

func TestWriteDOTErrors(t *testing.T) {
	p, g := twoDevicePlan()
	o := DefaultOptions()
	if err := WriteDOT(&bytes.Buffer{}, p, nil, o); err == nil {
		t.Error("module view without the graph: no error")
	}
	o.Stage = 3
	if err := WriteDOT(&bytes.Buffer{}, p, g, o); err == nil || !strings.Contains(err.Error(), "no stage 3") {
		t.Errorf("stage 3 of a one-stage plan: %v", err)
	}
	// An op view past the limit says so, with a typed error.
	b := graphtest.New("big").Input("x", 8)
	big := &plan.Plan{Devices: []plan.Device{{Name: "gpu0"}}}
	prev := "x"
	for i := 0; i <= MaxOpViewOps; i++ {
		name := fmt.Sprintf("op%d", i)
		b.Op(name, 1, 8, prev)
		big.Ops = append(big.Ops, plan.Op{Name: name, Device: "gpu0", StartMS: float64(i), EndMS: float64(i + 1)})
		prev = name
	}
	o = DefaultOptions()
	o.Detail = Ops
	var tooLarge *TooLargeError
	if err := WriteDOT(&bytes.Buffer{}, big, b.G, o); !errors.As(err, &tooLarge) || tooLarge.Ops != MaxOpViewOps+1 {
		t.Errorf("op view of %d ops: %v", MaxOpViewOps+1, err)
	}
	o.Module = "op1"
	if err := WriteDOT(&bytes.Buffer{}, big, b.G, o); err != nil {
		t.Errorf("filtered op view: %v", err)
	}
	if _, err := ParseDetail("layer"); err == nil {
		t.Error("detail layer accepted")
	}
}

func TestDOTEscapesNames(t *testing.T) {
	g := graphtest.New("g").Input("x", 8).Op(`a "quoted"\op`, 1, 1<<20, "x").Op("b\nnewline", 1, 8, `a "quoted"\op`).G
	p := &plan.Plan{
		Devices: []plan.Device{{Name: "gpu0", Ops: 1}, {Name: "gpu1", Ops: 1}},
		Ops: []plan.Op{{Name: `a "quoted"\op`, Phase: "forward", Device: "gpu0", EndMS: 1},
			{Name: "b\nnewline", Phase: "forward", Device: "gpu1", StartMS: 1, EndMS: 2}},
	}
	o := DefaultOptions()
	o.Detail = Ops
	var b bytes.Buffer
	if err := WriteDOT(&b, p, g, o); err != nil {
		t.Fatal(err)
	}
	if want := `"a \"quoted\"\\op" -> "b\nnewline" [label="1.00 MiB"`; !strings.Contains(b.String(), want) {
		t.Errorf("DOT lacks %s:\n%s", want, b.String())
	}
}

func TestRender(t *testing.T) {
	p, g := twoDevicePlan()
	var b bytes.Buffer
	if err := WriteDOT(&b, p, g, DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("dot"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("graphviz is not installed in CI: `make setup` should install it")
		}
		t.Skip("graphviz not installed")
	}
	svg, err := Render(context.Background(), b.Bytes(), "svg", 0)
	if err != nil || !bytes.Contains(svg, []byte("<svg")) {
		t.Fatalf("svg: %v", err)
	}
	png, err := Render(context.Background(), b.Bytes(), "png", 0)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("png: %v", err)
	}
	if _, err := Render(context.Background(), []byte("digraph {"), "svg", 0); err == nil {
		t.Error("broken DOT rendered")
	}
	if _, err := Render(context.Background(), b.Bytes(), "gif", 0); err == nil {
		t.Error("gif accepted")
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := Render(context.Background(), b.Bytes(), "svg", 0); !errors.Is(err, ErrNoGraphviz) {
		t.Errorf("without dot: %v", err)
	}
}

// TestTrace checks the trace against the plan: every op run once per
// micro-batch at the plan's times, every copy on its link's track,
// all-reduces, memory counters and bubbles between runs.
func TestTrace(t *testing.T) {
	p, _ := twoDevicePlan()
	p.Ops[3].Runs = []plan.Run{{MicroBatch: 0, StartMS: 3, EndMS: 4}, {MicroBatch: 1, StartMS: 4, EndMS: 5}}
	p.AllReduces = []plan.AllReduce{{Kind: "reduce-scatter", Stage: 0, Devices: []string{"gpu0", "gpu2"}, Bytes: 64, StartMS: 9, EndMS: 10, Tensor: "h"}}
	var b bytes.Buffer
	if err := WriteTrace(&b, p); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Name, Cat, Ph string
			TS            float64
			Dur           float64
			PID, TID      int
			Args          map[string]any
		} `json:"traceEvents"`
		DisplayTimeUnit string
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("trace is not JSON: %v", err)
	}
	type key struct {
		name string
		mb   int
	}
	runs := map[key][2]float64{}
	var bubbles, copies, reduces, counters int
	for _, e := range doc.TraceEvents {
		switch {
		case e.Ph == "X" && e.PID == tracePIDDevices && e.Cat != "bubble":
			k := key{e.Name, int(e.Args["micro_batch"].(float64))}
			if _, dup := runs[k]; dup {
				t.Errorf("run %v appears twice", k)
			}
			runs[k] = [2]float64{e.TS, e.TS + e.Dur}
		case e.Ph == "X" && e.Cat == "bubble":
			bubbles++
		case e.Ph == "X" && e.PID == tracePIDLinks:
			copies++
		case e.Ph == "X" && e.PID == tracePIDCollectives:
			reduces++
			if e.Name != "reduce-scatter h" || e.Cat != "reduce-scatter" {
				t.Errorf("collective named %q (%s), want its kind and tensor", e.Name, e.Cat)
			}
		case e.Ph == "C":
			counters++
		}
	}
	want := map[key][2]float64{}
	for _, op := range p.Ops {
		if len(op.Runs) == 0 {
			want[key{op.Name, 0}] = [2]float64{op.StartMS * 1000, op.EndMS * 1000}
		}
		for _, r := range op.Runs {
			want[key{op.Name, r.MicroBatch}] = [2]float64{r.StartMS * 1000, r.EndMS * 1000}
		}
	}
	if !reflect.DeepEqual(runs, want) {
		t.Errorf("trace runs %v, want %v", runs, want)
	}
	// gpu0 idles 2..8, gpu1 0.5..3.
	if bubbles != 2 || copies != 2 || reduces != 1 || counters != 3 {
		t.Errorf("%d bubbles, %d copies, %d all-reduces, %d memory samples; want 2, 2, 1, 3", bubbles, copies, reduces, counters)
	}
}
