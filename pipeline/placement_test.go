package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/strategy"
)

// layers is a costed chain of five 1 ms ops with module paths, each
// handing 1000 bytes to the next; head/out may carry a device.
const layers = `{"format": "opplace-costed-graph/v1", "ops": [
  {"name": "/enc/l0/mm", "times_ms": {"V100-16GB": 1}, "output_bytes": 1000},
  {"name": "/enc/l0/add", "times_ms": {"V100-16GB": 1}, "output_bytes": 1000},
  {"name": "/enc/l1/mm", "times_ms": {"V100-16GB": 1}, "output_bytes": 1000},
  {"name": "/enc/l1/add", "times_ms": {"V100-16GB": 1}, "output_bytes": 1000},
  {"name": "/head/out", "times_ms": {"V100-16GB": 1}, "output_bytes": 1000 DEVICE}],
 "edges": [{"from": "/enc/l0/mm", "to": "/enc/l0/add"}, {"from": "/enc/l0/add", "to": "/enc/l1/mm"},
  {"from": "/enc/l1/mm", "to": "/enc/l1/add"}, {"from": "/enc/l1/add", "to": "/head/out"}]}`

// threeGPUs share one 10 GB/s link of 10 us: 1000 bytes cross in
// 10.1 us.
const threeGPUs = `hosts: [{name: h, intra: {bandwidth: 10GB/s, latency: 10us}}]
devices:
  - {name: g0, type: V100-16GB, host: h}
  - {name: g1, type: V100-16GB, host: h}
  - {name: g2, type: V100-16GB, host: h}
`

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGivenSelectors: each op takes the most specific entry of a
// placement map (its name, then the longest module, then the pattern with
// the most literal characters), and the judge simulates exactly that
// placement: 5 ms of ops plus 10.1 us per hop between devices.
func TestGivenSelectors(t *testing.T) {
	const hop = 0.0101
	for _, tc := range []struct {
		name      string
		placement string
		fill      string
		respect   bool   // the model's devices are pins
		device    string // head/out's device in the model
		want      []string
		step      float64 // ms
		err       string
	}{
		{name: "by name", placement: "/enc/l0/mm: g0\n/enc/l0/add: g0\n/enc/l1/mm: g1\n/enc/l1/add: g1\n/head/out: g0\n",
			want: []string{"g0", "g0", "g1", "g1", "g0"}, step: 5 + 2*hop},
		{name: "JSON", placement: `{"/enc/l0/mm": "g2", "/enc/l0/add": "g2", "/enc/l1/mm": "g2", "/enc/l1/add": "g2", "/head/out": "g2"}`,
			want: []string{"g2", "g2", "g2", "g2", "g2"}, step: 5},
		{name: "name beats module beats pattern", placement: "module:/enc: g1\nmodule:/enc/l1/: g2\n/enc/l1/add: g0\n/head/*: g1\n",
			want: []string{"g1", "g1", "g2", "g0", "g1"}, step: 5 + 3*hop},
		{name: "the most literal pattern", placement: "/*/*/*: g0\n/enc/l1/*: g1\n/head/out: g2\n",
			want: []string{"g0", "g0", "g1", "g1", "g2"}, step: 5 + 2*hop},
		{name: "module beats a longer pattern", placement: "/enc/*/mm: g1\nmodule:/enc: g2\n/head/out: g2\n",
			want: []string{"g2", "g2", "g2", "g2", "g2"}, step: 5},
		{name: "equal patterns agreeing", placement: "/enc/l?/mm: g1\n/enc/l0/m?: g1\n/*/*/*: g0\n/head/out: g0\n",
			want: []string{"g1", "g0", "g1", "g0", "g0"}, step: 5 + 3*hop},
		{name: "a module outranked everywhere still matches", placement: "module:/enc: g0\n/enc/l0/mm: g1\n/enc/l0/add: g1\n/enc/l1/mm: g1\n/enc/l1/add: g1\n/head/out: g1\n",
			want: []string{"g1", "g1", "g1", "g1", "g1"}, step: 5},
		{name: "filled in", placement: "module:/enc: g1\n", fill: "m-etf",
			want: []string{"g1", "g1", "g1", "g1", "g1"}, step: 5},
		{name: "the model's pin places what the file leaves out", placement: "module:/enc: g1\n", respect: true, device: "g2",
			want: []string{"g1", "g1", "g1", "g1", "g2"}, step: 5 + hop},
		{name: "the file overrides the model's pin", placement: "module:/enc: g1\n/head/out: g0\n", respect: true, device: "g2",
			want: []string{"g1", "g1", "g1", "g1", "g0"}, step: 5 + hop},
		{name: "pins alone, the rest filled in", respect: true, device: "g2", fill: "m-etf",
			want: []string{"g0", "g0", "g0", "g0", "g2"}, step: 5 + hop},

		{name: "equal patterns disagreeing", placement: "/enc/l?/mm: g0\n/enc/l0/m?: g1\n/*/*/*: g2\n",
			err: `p.yaml: entries "/enc/l?/mm" and "/enc/l0/m?" both match op "/enc/l0/mm", equally specific, and put it on g0 and g1`},
		{name: "a module no op is in", placement: "module:/dec: g0\nmodule:/enc: g0\n/head/out: g0\n",
			err: `p.yaml: entry "module:/dec": matches no op of the graph`},
		{name: "a pattern no op matches", placement: "/dec/*: g0\nmodule:/enc: g0\n/head/out: g0\n",
			err: `p.yaml: entry "/dec/*": matches no op of the graph`},
		{name: "an op the graph lacks", placement: "module:/enc: g0\n/head/outt: g0\n",
			err: `p.yaml: entry "/head/outt": no op of the graph is named so (a module is written module:<path>, a pattern uses *, ? or [...])`},
		{name: "a malformed pattern", placement: "/enc/[l: g0\n",
			err: `p.yaml: entry "/enc/[l": a malformed pattern`},
		{name: "a device the cluster lacks", placement: "module:/enc: g0\n/head/out: gpu3\n",
			err: `p.yaml: entry "/head/out": device "gpu3" is not a device of cluster "c" (devices: g0, g1, g2)`},
		{name: "ops left out", placement: "/enc/l0/mm: g0\n/enc/l1/mm: g0\n",
			err: `p.yaml leaves 3 ops of 5 unplaced ("/enc/l0/add", "/enc/l1/add", "/head/out"): give them devices, or name a placer to place them`},
		{name: "an unknown placer", placement: "module:/enc: g0\n", fill: "nope",
			err: `unknown placer "nope" to fill in the placement`},
		{name: "a repeated entry", placement: `{"/head/out": "g0", "/head/out": "g1"}`,
			err: `p.yaml: entry "/head/out" is given twice`},
		{name: "a device that is no name", placement: "/head/out: [g0]\n",
			err: `p.yaml: entry "/head/out" (line 1): expected a device name, got a list`},
		{name: "corrupt JSON", placement: `{"/head/out": "g0",`,
			err: `p.yaml: not valid JSON: unexpected end of JSON input`},
		{name: "an empty file", placement: "\n",
			err: `p.yaml: the file is empty; expected a placement`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			dev := ""
			if tc.device != "" {
				dev = `, "device": "` + tc.device + `"`
			}
			o := pipeline.Options{ModelPath: write(t, dir, "g.json", strings.Replace(layers, " DEVICE", dev, 1)),
				ClusterPath: write(t, dir, "c.yaml", "name: c\n"+threeGPUs), Fill: tc.fill, RespectDevices: tc.respect}
			if tc.placement != "" {
				o.Placement = write(t, dir, "p.yaml", tc.placement)
			} else {
				o.Strategy = strategy.GivenStrategy
			}
			res, err := pipeline.Run(context.Background(), o)
			if tc.err != "" {
				var in *pipeline.InputError
				if !errors.As(err, &in) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v (%T), want an input error with %q", err, err, tc.err)
				}
				if !strings.HasPrefix(err.Error(), dir) && !strings.HasPrefix(tc.err, "unknown placer") {
					t.Errorf("error %q does not name the file first", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, op := range res.Plan.Ops {
				got = append(got, op.Device)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("placed on %v, want %v", got, tc.want)
			}
			if math.Abs(res.Plan.PredictedStepMS-tc.step) > 1e-9 {
				t.Errorf("step %v ms, want %v", res.Plan.PredictedStepMS, tc.step)
			}
			if res.Plan.Strategy != strategy.GivenStrategy || res.Plan.Family != strategy.FamilyPlacement {
				t.Errorf("strategy %s (%s), want given (placement)", res.Plan.Strategy, res.Plan.Family)
			}
		})
	}
}

// TestGivenPlanRoundTrip: a plan file of any strategy, given back as the
// placement, is simulated to the same step, every op at the same time
// (GPT-2 small, the shared export's copy in testdata, trained at batch 8
// with fusion, whose groups the given placement keeps).
func TestGivenPlanRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ strategy, cluster, mode, format string }{
		{"m-etf", "4xV100", pipeline.ModeTrain, "json"},
		{"m-etf", "4xV100", pipeline.ModeInfer, "yaml"},
		{"heft", "4xV100", pipeline.ModeTrain, "json"},
		{"dp", "4xV100", pipeline.ModeTrain, "json"},
		{"pipeline:pipedream", "4xV100", pipeline.ModeTrain, "yaml"},
		{"dp+heft", "8xA100-2host", pipeline.ModeTrain, "json"},
	} {
		name := tc.strategy + "/" + tc.cluster + "/" + tc.mode
		o := opts("gpt2_small", tc.cluster, map[string]int64{"batch": 8})
		o.Strategy, o.Mode = tc.strategy, tc.mode
		first, err := pipeline.Run(context.Background(), o)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var buf bytes.Buffer
		format := plan.JSON
		if tc.format == "yaml" {
			format = plan.YAML
		}
		if err := plan.Write(&buf, first.Plan, format); err != nil {
			t.Fatal(err)
		}
		o.Strategy, o.Placement = "", write(t, dir, strings.ReplaceAll(name, "/", "_")+"."+tc.format, buf.String())
		again, err := pipeline.Run(context.Background(), o)
		if err != nil {
			t.Fatalf("%s given back: %v", name, err)
		}
		a, b := first.Plan, again.Plan
		if b.PredictedStepMS != a.PredictedStepMS || b.Family != a.Family || b.Strategy != strategy.GivenStrategy {
			t.Errorf("%s given back: %v ms (%s, %s), want %v ms (%s)", name, b.PredictedStepMS, b.Strategy, b.Family, a.PredictedStepMS, a.Family)
		}
		if !slices.EqualFunc(a.Ops, b.Ops, func(x, y plan.Op) bool {
			return x.Name == y.Name && x.Device == y.Device && x.StartMS == y.StartMS && x.EndMS == y.EndMS
		}) {
			t.Errorf("%s given back: the ops ran otherwise", name)
		}
		if len(b.Notes) == 0 || !strings.Contains(b.Notes[0], "as the plan ran them") {
			t.Errorf("%s given back: notes %q", name, b.Notes)
		}
	}
}

// TestGivenTrainingFollowsForward: a placement of the forward pass (an
// inference plan) places the training step: every gradient op runs with
// its forward op, every update with its layer.
func TestGivenTrainingFollowsForward(t *testing.T) {
	o := opts("gpt2_small", "8xA100-2host", map[string]int64{"batch": 8})
	o.Strategy, o.Mode = "m-etf", pipeline.ModeInfer
	infer, err := pipeline.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := plan.Write(&buf, infer.Plan, plan.JSON); err != nil {
		t.Fatal(err)
	}
	o.Strategy, o.Mode, o.Placement = "", pipeline.ModeTrain, write(t, t.TempDir(), "infer.json", buf.String())
	res, err := pipeline.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	fwd := map[string]string{}
	for _, op := range infer.Plan.Ops {
		fwd[op.Name] = op.Device
	}
	grads, updates := 0, 0
	for _, op := range res.Plan.Ops {
		if d, ok := fwd[op.Name]; ok && op.Device != d {
			t.Errorf("forward op %s moved from %s to %s", op.Name, d, op.Device)
		}
		if f, ok := strings.CutSuffix(op.Name, "/grad"); ok {
			grads++
			if d, ok := fwd[f]; ok && op.Device != d {
				t.Errorf("%s on %s, its forward op on %s", op.Name, op.Device, d)
			}
		}
		if op.Phase == "update" {
			updates++
		}
	}
	if grads == 0 || updates == 0 || len(res.Plan.Ops) <= len(infer.Plan.Ops) {
		t.Fatalf("%d ops, %d gradients, %d updates: not a training step", len(res.Plan.Ops), grads, updates)
	}
	if n := res.Plan.Notes; len(n) == 0 || !strings.Contains(n[0], "following their colocation group") {
		t.Errorf("notes %q", n)
	}
}

// TestGivenKeepsFusionApart: fusion never merges ops a given placement
// puts on different devices, so one LayerNorm given its own device runs
// there, between neighbours elsewhere.
func TestGivenKeepsFusionApart(t *testing.T) {
	const ln = "/blocks/blocks.0/ln1/LayerNormalization"
	o := opts("gpt2_small", "4xV100", map[string]int64{"batch": 8})
	o.Mode, o.Fill = pipeline.ModeInfer, "m-etf"
	o.Placement = write(t, t.TempDir(), "p.yaml", "module:/blocks: gpu0\n"+ln+": gpu1\n")
	res, err := pipeline.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for i, op := range res.Plan.Ops {
		switch {
		case op.Name == ln && op.Device != "gpu1":
			t.Errorf("%s on %s, want gpu1", ln, op.Device)
		case op.Name != ln && strings.HasPrefix(op.Name, "/blocks/") && op.Device != "gpu0":
			t.Errorf("ops[%d] %s on %s, want gpu0", i, op.Name, op.Device)
		}
	}
}

// TestCompareListsGiven: compare runs the given placement beside the
// other strategies when one is given, and not otherwise.
func TestCompareListsGiven(t *testing.T) {
	dir := t.TempDir()
	o := pipeline.Options{ModelPath: write(t, dir, "g.json", strings.Replace(layers, " DEVICE", "", 1)),
		ClusterPath: write(t, dir, "c.yaml", "name: c\n"+threeGPUs)}
	for _, placement := range []string{"", write(t, dir, "p.yaml", "module:/enc: g0\n/head/out: g1\n")} {
		o.Placement = placement
		c, err := pipeline.Compare(context.Background(), pipeline.CompareOptions{Options: o, Strategies: nil})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(c.Strategies, func(s pipeline.StrategyOutcome) bool { return s.Strategy == strategy.GivenStrategy })
		switch {
		case placement == "" && i >= 0:
			t.Errorf("compare without a placement lists given: %+v", c.Strategies[i])
		case placement != "" && i < 0:
			t.Errorf("compare with a placement lists no given row")
		case placement != "" && (c.Strategies[i].PredictedStepMS != 5.0101 || c.Strategies[i].Family != strategy.FamilyPlacement):
			t.Errorf("given: %+v, want 5.0101 ms, placement", c.Strategies[i])
		}
	}
}

// TestGivenCannotRun: an op given a device whose type has no time for it
// is an input error naming the entry.
func TestGivenCannotRun(t *testing.T) {
	dir := t.TempDir()
	o := pipeline.Options{ModelPath: write(t, dir, "g.json", strings.Replace(layers, " DEVICE", "", 1)),
		ClusterPath: write(t, dir, "c.yaml", "name: c\n"+threeGPUs+"  - {name: t, type: T4, host: h}\n"),
		Placement:   write(t, dir, "p.yaml", "module:/enc: g0\n/head/*: t\n")}
	_, err := pipeline.Run(context.Background(), o)
	var in *pipeline.InputError
	want := `p.yaml: entry "/head/*": op "/head/out" is put on t, whose device type T4 cannot run it (the model has no time for it there)`
	if !errors.As(err, &in) || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("error %v, want the input error ...%s", err, want)
	}
}
