package report

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/opplace/opplace/plan"
)

const gib = int64(1) << 30

// device returns a device with a small memory curve peaking at peak.
func device(name string, ops int, peak, capacity int64, stepMS float64) plan.Device {
	return plan.Device{Name: name, Type: "A100-80GB", Host: "node0", MemoryBytes: capacity, PeakMemoryBytes: peak,
		ResidentBytes: peak / 4, BusyMS: stepMS / 2, Ops: ops,
		Memory: []plan.MemorySample{{MS: 0, Bytes: peak / 4}, {MS: stepMS / 3, Bytes: peak}, {MS: 2 * stepMS / 3, Bytes: peak / 2}}}
}

// placementPlan is two devices, three ops (one with a hostile name), one
// transfer, one stage, and the candidates auto tried.
func placementPlan() *plan.Plan {
	return &plan.Plan{
		Model: "models/tiny<&>.onnx", Cluster: "2xA100", Strategy: "auto:m-etf", Family: "placement", Mode: "infer",
		PredictedStepMS: 10, LowerBoundMS: 8, LowerBoundKind: "critical path", Gap: 0.25, Batch: 4, ThroughputSamplesPerS: 400,
		Fits: true, CrossDeviceBytes: 1 << 20,
		Devices: []plan.Device{device("gpu0", 2, 2*gib, 80*gib, 10), device("gpu1", 1, gib, 80*gib, 10)},
		Ops: []plan.Op{
			{Name: "/enc/MatMul", Type: "MatMul", Phase: "forward", Device: "gpu0", StartMS: 0, EndMS: 4},
			{Name: `/enc/<script>alert("x")</script> & 'q'`, Type: "Relu", Phase: "forward", Device: "gpu0", StartMS: 4, EndMS: 6},
			{Name: "/head/Gemm", Type: "Gemm", Phase: "forward", Device: "gpu1", StartMS: 7, EndMS: 10},
		},
		Transfers: []plan.Transfer{{Tensor: "act<0>", From: "gpu0", To: "gpu1", Bytes: 1 << 20, StartMS: 6, EndMS: 7}},
		Stages: []plan.Stage{{Index: 0, DeviceType: "A100-80GB", Devices: []string{"gpu0", "gpu1"}, Replicas: 1,
			Ops: []string{"/enc/MatMul", "/head/Gemm"}, FirstOp: "/enc/MatMul", LastOp: "/head/Gemm",
			ComputeMS: 9, CommMS: 1, TimeMS: 10, PeakMemoryBytes: 2 * gib, AliveMicroBatches: 1, EndMS: 10}},
		Candidates: []plan.Candidate{
			{Strategy: "m-etf", Family: "placement", PredictedStepMS: 10, ThroughputSamplesPerS: 400, PeakMemoryBytes: 2 * gib, Fits: true, Shape: "1 stage"},
			{Strategy: "heft", Family: "placement", PredictedStepMS: 12.5, ThroughputSamplesPerS: 320, PeakMemoryBytes: 2 * gib, Fits: true, Why: "25.0% slower"},
			{Strategy: "single", Family: "placement", PredictedStepMS: 30, PeakMemoryBytes: 90 * gib, Fits: false, Why: "does not fit"},
			{Strategy: "m-sct", Family: "placement", Error: "solver <failed> & gave up", Why: "failed"},
			{Strategy: "dp", Family: "data-parallel", Why: "pruned: any data-parallel plan takes at least 20 ms"},
		},
		Warnings: []string{`input "x<y>" has no shape`},
	}
}

// pipelinePlan is two stages of one device, four micro-batches, with
// every op run per micro-batch, and a replicated last stage.
func pipelinePlan() *plan.Plan {
	p := &plan.Plan{
		Model: "gpt.onnx", Cluster: "4xA100", Strategy: "pipeline:exact", Family: "pipeline", Mode: "train",
		PredictedStepMS: 40, LowerBoundMS: 30, LowerBoundKind: "work", Gap: 1.0/3 - 1e-7, Batch: 8, ThroughputSamplesPerS: 200,
		Fits: true, Schedule: "1f1b", MicroBatches: 4, Replicas: 2, BottleneckMS: 9, BubbleFraction: 0.25,
		Devices: []plan.Device{device("gpu0", 2, 3*gib, 16*gib, 40), device("gpu1", 2, 2*gib, 16*gib, 40),
			device("gpu2", 0, 2*gib, 16*gib, 40), device("gpu3", 0, 0, 16*gib, 40)},
	}
	p.Devices[3].Memory = nil
	for i, op := range []struct{ name, phase, dev string }{
		{"/blocks.0/fc/MatMul", "forward", "gpu0"}, {"/blocks.1/fc/MatMul", "forward", "gpu1"},
		{"/blocks.1/fc/MatMul_grad", "backward", "gpu1"}, {"/blocks.0/fc/MatMul_grad", "backward", "gpu0"},
	} {
		o := plan.Op{Name: op.name, Type: "MatMul", Phase: op.phase, Device: op.dev}
		for mb := 0; mb < 4; mb++ {
			start := float64(mb*8 + i*2)
			o.Runs = append(o.Runs, plan.Run{MicroBatch: mb, StartMS: start, EndMS: start + 2})
		}
		o.StartMS, o.EndMS = o.Runs[0].StartMS, o.Runs[3].EndMS
		p.Ops = append(p.Ops, o)
	}
	for mb := 0; mb < 4; mb++ {
		p.Transfers = append(p.Transfers, plan.Transfer{Tensor: "h", MicroBatch: mb, From: "gpu0", To: "gpu1", Bytes: 1 << 20,
			StartMS: float64(mb*8) + 2, EndMS: float64(mb*8) + 2.5})
	}
	p.AllReduces = []plan.AllReduce{{Stage: 1, Devices: []string{"gpu1", "gpu2"}, Bytes: 64 << 20, StartMS: 36, EndMS: 39}}
	p.Stages = []plan.Stage{
		{Index: 0, DeviceType: "A100-80GB", Devices: []string{"gpu0"}, Replicas: 1, Ops: []string{"a", "b"},
			FirstOp: "/blocks.0/fc/MatMul", LastOp: "/blocks.0/fc/MatMul", ModulePrefix: "/blocks.0/",
			ComputeMS: 8, CommMS: 0.5, SyncMS: 0.1, TimeMS: 8.6, PeakMemoryBytes: 3 * gib, AliveMicroBatches: 2},
		{Index: 1, DeviceType: "A100-80GB", Devices: []string{"gpu1", "gpu2"}, Replicas: 2, Ops: []string{"c", "d"},
			FirstOp: "/blocks.1/fc/MatMul", LastOp: "/blocks.1/fc/MatMul", ModulePrefix: "/blocks.1/",
			ComputeMS: 8, SyncMS: 1, TimeMS: 9, AllReduceMS: 3, AllReduceBytes: 64 << 20, PeakMemoryBytes: 2 * gib, AliveMicroBatches: 1},
	}
	return p
}

// overPlan does not fit: gpu0 needs more than its capacity.
func overPlan() *plan.Plan {
	p := placementPlan()
	p.Fits = false
	p.Devices[0].PeakMemoryBytes = 100 * gib
	p.Devices[0].Memory[1].Bytes = 100 * gib
	p.Candidates = nil
	p.Strategy, p.Family = "single", "placement"
	return p
}

func render(t testing.TB, p *plan.Plan, o Options) string {
	t.Helper()
	var b bytes.Buffer
	if err := Write(context.Background(), &b, p, o); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestReportContent(t *testing.T) {
	cases := []struct {
		name    string
		plan    func() *plan.Plan
		want    []string
		notWant []string
	}{
		{
			name: "escaping",
			plan: placementPlan,
			want: []string{
				`<title>Plan report: tiny&lt;&amp;&gt;.onnx</title>`,
				`/enc/&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; &#39;q&#39;`,
				`transfer of act&lt;0&gt;`,
				`input &#34;x&lt;y&gt;&#34; has no shape`,
				`solver &lt;failed&gt; &amp; gave up`,
			},
			notWant: []string{`<script>alert`, `act<0>`, `tiny<&>`},
		},
		{
			name: "precision",
			plan: func() *plan.Plan { p := placementPlan(); p.Precision = "amp-bf16"; return p },
			want: []string{"precision amp-bf16"},
		},
		{
			name: "candidates",
			plan: placementPlan,
			want: []string{
				`<tr class="chosen"><td class="mono">m-etf</td>`,
				`<tr class="slower"><td class="mono">heft</td>`,
				`<tr class="nofit"><td class="mono">single</td>`,
				`<tr class="failed"><td class="mono">m-sct</td>`,
				`<tr class="pruned"><td class="mono">dp</td>`,
				`10.000 ms · chosen`, `12.500 ms · 25.0% slower`, `30.000 ms · does not fit: peak 90.00 GiB`,
				`failed: solver &lt;failed&gt; &amp; gave up`,
				`pruned: any data-parallel plan takes at least 20 ms`,
				`lower bound 8.00 ms (critical path)`,
				`class="cbc"`, `class="cbn"`,
			},
		},
		{
			name: "sharded, recomputing stages",
			plan: func() *plan.Plan {
				p := pipelinePlan()
				p.Stages[0].Sharding, p.Stages[0].Recompute = "zero3", true
				return p
			},
			want: []string{fmt.Sprintf(`<td class="num">%d (zero3) (recompute)</td>`, pipelinePlan().Stages[0].Replicas)},
		},
		{
			name:    "empty candidates",
			plan:    pipelinePlan,
			want:    []string{`Only pipeline:exact was run`},
			notWant: []string{`<table class="candidates">`, `class="cands chart"`},
		},
		{
			name: "single stage",
			plan: placementPlan,
			want: []string{
				`<table class="stages">`, `<td class="mono op">/<wbr>enc/<wbr>MatMul</td>`, `<td class="mono op">/<wbr>head/<wbr>Gemm</td>`,
				`<div class="tcell">`, `10.000</span>`,
				// the summary
				`<div class="k">Predicted step</div><div class="v">10.000 ms</div>`,
				`<div class="k">Lower bound</div><div class="v">8.000 ms</div><div class="n">critical path</div>`,
				`<div class="k">Gap to the bound</div><div class="v">25.0%</div>`,
				`<div class="v">400.0 samples/s</div><div class="n">batch 4</div>`,
				`<div class="k">Strategy</div><div class="v">auto:m-etf</div><div class="n">placement</div>`,
				`<span class="big">FITS</span>`,
				// the schedule: one row per device, the transfer under its sender
				`>gpu0<`, `>gpu1<`, `→ gpu1`, `/enc/MatMul (MatMul)`, `0.000 ms – 4.000 ms (4.000 ms)`,
				`predicted step 10.000 ms`,
				// memory against capacity
				`peak 2.00 GiB of 80.00 GiB (2.5%), capacity above the scale`, `peak 2.00 GiB at 3.33 ms`,
			},
			notWant: []string{`<th>Modules</th>`, `The slowest stage`, `stage 0 replica`, `DOES NOT FIT`},
		},
		{
			name: "pipeline with runs",
			plan: pipelinePlan,
			want: []string{
				`forward, micro-batch 3`, `backward, micro-batch 0`, `class="gf1"`, `class="gb1"`,
				`odd micro-batches (lighter shade)`, `<div class="v">4</div><div class="n">1f1b schedule, bubble 25.0%</div>`,
				`>stage 1<`, `all-reduce of stage 1 gradients`, `64.00 MiB across 2 devices`,
				`The other replicas, on gpu2 (1 device), run the same schedule`, `stage 1 replica`,
				`<th>Modules</th>`, `/<wbr>blocks.1/<wbr>`, `<tr class="bottleneck"><td class="num">1</td>`,
				`64.00 MiB<div class="subnum">in 3.000 ms</div>`,
				`The slowest stage (highlighted) sets the pipeline&#39;s pace: 9.000 ms per micro-batch.`,
				`Not drawn, holding nothing: gpu3.`,
				`transfer of h`, `gpu0 → gpu1, 1.00 MiB, micro-batch 2`,
			},
		},
		{
			name: "does not fit",
			plan: overPlan,
			want: []string{
				`<div class="verdict bad" id="fits"><span class="big">DOES NOT FIT</span>`,
				`A device exceeds its memory: gpu0 needs 100.00 GiB of 80.00 GiB.`,
				`<div class="card bad"><div class="k">Fits in memory</div><div class="v">NO</div>`,
				`<div class="mempanel over">`, `over by 20.00 GiB`, `<tr class="over">`,
				`class="cap"`, `capacity 80.00 GiB</text>`, `Only single was run`,
			},
			notWant: []string{`<span class="big">FITS</span>`},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			html := render(t, c.plan(), Options{NoGraphviz: true})
			for _, w := range c.want {
				if !strings.Contains(html, w) {
					t.Errorf("report lacks %q", w)
				}
			}
			for _, w := range c.notWant {
				if strings.Contains(html, w) {
					t.Errorf("report has %q", w)
				}
			}
			checkSelfContained(t, html)
		})
	}
}

// external matches anything that would make a browser fetch: the report
// must load nothing.
var external = regexp.MustCompile(`(?i)(src\s*=\s*["']?\s*(https?:|//)|href\s*=\s*["']?\s*(https?:|//)|@import|url\(\s*["']?\s*(https?:|//)|<link\b|<script[^>]+src|<iframe|<img\b|<object\b)`)

func checkSelfContained(t *testing.T, html string) {
	t.Helper()
	if m := external.FindString(html); m != "" {
		t.Errorf("report references something outside itself: %q", m)
	}
	for _, w := range []string{"<!DOCTYPE html>", `<meta charset="utf-8">`, "<style>", "</html>"} {
		if !strings.Contains(html, w) {
			t.Errorf("report lacks %q", w)
		}
	}
	if strings.Count(html, "<svg") != strings.Count(html, "</svg>") {
		t.Errorf("unbalanced svg elements: %d open, %d closed", strings.Count(html, "<svg"), strings.Count(html, "</svg>"))
	}
}

func TestReportDeterministic(t *testing.T) {
	for _, mk := range []func() *plan.Plan{placementPlan, pipelinePlan, overPlan} {
		p := mk()
		a := render(t, p, Options{Source: "plan.json"})
		b := render(t, mk(), Options{Source: "plan.json"})
		if a != b {
			t.Fatalf("two reports of the same plan differ")
		}
		// Through the plan file, JSON and YAML: the same page.
		for _, enc := range []plan.Format{plan.JSON, plan.YAML} {
			var buf bytes.Buffer
			if err := plan.Write(&buf, p, enc); err != nil {
				t.Fatal(err)
			}
			q, err := plan.Decode(buf.Bytes())
			if err != nil {
				t.Fatalf("%s: %v", enc, err)
			}
			if c := render(t, q, Options{Source: "plan.json"}); c != a {
				t.Errorf("the report of the plan read back from %s differs", enc)
			}
		}
	}
}

// TestReportMergesNarrowRuns: thousands of runs narrower than a pixel
// become at most a bar per pixel column, so big plans stay small.
func TestReportMergesNarrowRuns(t *testing.T) {
	const n = 20000
	p := &plan.Plan{Model: "big.onnx", Cluster: "c", Strategy: "single", Mode: "train", PredictedStepMS: 1800, Fits: true,
		Devices: []plan.Device{device("gpu0", n, gib, 80*gib, 1800)}}
	for i := 0; i < n; i++ {
		phase := "forward"
		if i >= n/2 {
			phase = "backward"
		}
		// A 2 ms gap every 50 runs keeps them from merging into one bar.
		start := float64(i)*0.05 + float64(i/50)*2
		if i%997 == 0 {
			p.Ops = append(p.Ops, plan.Op{Name: fmt.Sprintf("wide%d", i), Type: "MatMul", Phase: phase, Device: "gpu0", StartMS: start, EndMS: start + 5})
			continue
		}
		p.Ops = append(p.Ops, plan.Op{Name: fmt.Sprintf("op%d", i), Type: "Add", Phase: phase, Device: "gpu0", StartMS: start, EndMS: start + 0.04})
	}
	html := render(t, p, Options{NoGraphviz: true})
	g := buildGantt(p, nil)
	rects := len(g.Chart.Rects)
	if rects < 400 || rects > 1000 {
		t.Errorf("%d runs drawn as %d rects, want about one per block of runs (400) and one per wide run (21)", n, rects)
	}
	if len(html) > 600_000 {
		t.Errorf("report of %d runs is %d bytes", n, len(html))
	}
	for _, w := range []string{"op runs, each narrower than a pixel", "wide997 (MatMul)", "forward ", "backward "} {
		if !strings.Contains(html, w) {
			t.Errorf("report lacks %q", w)
		}
	}
}

func TestReportGraphviz(t *testing.T) {
	p := pipelinePlan()
	t.Run("rendered", func(t *testing.T) {
		if _, err := exec.LookPath("dot"); err != nil {
			t.Skip("Graphviz's dot is not installed")
		}
		html := render(t, p, Options{})
		for _, w := range []string{`class="dotview" style="width:100%;height:auto;max-width:`, `<g id="graph0"`, `>gpu0 (A100`} {
			if !strings.Contains(html, w) {
				t.Errorf("report lacks %q", w)
			}
		}
		for _, w := range []string{"<?xml", "<!DOCTYPE svg", "<!--", `id="graphnote"`} {
			if strings.Contains(html, w) {
				t.Errorf("report has %q", w)
			}
		}
		checkSelfContained(t, html)
	})
	t.Run("no graphviz", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		html := render(t, p, Options{})
		if !strings.Contains(html, `<p class="note" id="graphnote">Graphviz&#39;s dot is not installed`) {
			t.Errorf("report does not say Graphviz is missing")
		}
		if strings.Contains(html, `class="dotview"`) {
			t.Errorf("report has a device view without Graphviz")
		}
	})
}

func TestInlineSVG(t *testing.T) {
	in := `<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN"
 "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">
<!-- Generated by graphviz version 2.43.0 (0)
 -->
<!-- Title: g Pages: 1 -->
<svg width="620pt" height="188pt"
 viewBox="0.00 0.00 620.00 188.00" xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">
<g id="graph0" class="graph"><!-- d0 --><text>a &amp; b</text></g>
</svg>
`
	got, err := inlineSVG([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := `<svg
 viewBox="0.00 0.00 620.00 188.00" xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" class="dotview" style="width:100%;height:auto;max-width:620pt">
<g id="graph0" class="graph"><text>a &amp; b</text></g>
</svg>`
	if got != want {
		t.Errorf("inlineSVG =\n%s\nwant\n%s", got, want)
	}
	if _, err := inlineSVG([]byte("dot: syntax error")); err == nil {
		t.Errorf("no error for output without an svg element")
	}
}

func TestTicks(t *testing.T) {
	for _, c := range []struct {
		hi   float64
		n    int
		want string
	}{
		{141.8, 10, "[0 20 40 60 80 100 120 140]"},
		{84.8, 5, "[0 20 40 60 80]"},
		{0.9, 5, "[0.0 0.2 0.4 0.6 0.8]"},
		{0.9, 4, "[0.0 0.5]"},
		{0, 4, "[0]"},
	} {
		vals, step := ticks(c.hi, c.n)
		labels := make([]string, len(vals))
		for i, v := range vals {
			labels[i] = tickLabel(v, step)
		}
		if got := "[" + strings.Join(labels, " ") + "]"; got != c.want {
			t.Errorf("ticks(%g, %d) = %s, want %s", c.hi, c.n, got, c.want)
		}
	}
}
