package costed_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/costed"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
)

const clusterDir = "../testdata/clusters"

// TestSingleStep plans tiny.json with the single strategy. By hand: the
// graph holds a 17 GiB parameter, so neither the V100s (16 GiB) nor the
// T4 (15 GiB) fit it; the A100 runs a, b, c, d in 1.5 + 1 + 2 + 0.5 =
// 5 ms, the CPU in 40 ms. Peak memory on the A100 comes when c starts:
// the parameter, a's output (c still reads it), b's output (d reads it),
// c's output and its 64-byte edge tensor: 18253611008 + 1000 + 2000 +
// 3000 + 64 = 18253617072 bytes.
//
// The same file renamed to .txt plans the same: formats are told apart
// by content.
func TestSingleStep(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(exampleDir, "tiny.json"))
	if err != nil {
		t.Fatal(err)
	}
	txt := filepath.Join(t.TempDir(), "profile.txt")
	if err := os.WriteFile(txt, src, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(exampleDir, "tiny.json"), txt} {
		res, err := pipeline.Run(context.Background(), pipeline.Options{
			ModelPath: path, ClusterPath: filepath.Join(clusterDir, "hetero.yaml"), Strategy: "single",
		})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		p := res.Plan
		if p.PredictedStepMS != 5 {
			t.Errorf("%s: step %v ms, want 5", path, p.PredictedStepMS)
		}
		if len(p.Ops) != 4 {
			t.Errorf("%s: %d ops planned, want the file's 4", path, len(p.Ops))
		}
		for _, op := range p.Ops {
			if op.Device != "a100" {
				t.Errorf("%s: op %s on %s, want a100", path, op.Name, op.Device)
			}
		}
		for _, d := range p.Devices {
			want := int64(0)
			if d.Name == "a100" {
				want = 18253617072
			}
			if d.PeakMemoryBytes != want {
				t.Errorf("%s: %s peaks at %d bytes, want %d", path, d.Name, d.PeakMemoryBytes, want)
			}
		}
	}
}

// TestSplitStep simulates tiny.json split over two GPUs joined by a
// 10 GB/s, 10 us link, with a, b, d on g0 and c on g1. By hand: a runs
// 0-1 ms; its 1000-byte output reaches g1 after 10 us + 0.1 us; c runs
// 1.0101-2.0101 ms; the edge c->d carries its own 64 bytes (not c's
// 3000), arriving 10 us + 0.0064 us later; d runs 1 ms after that:
// step = 1 + 0.0101 + 1 + 0.0100064 + 1 = 3.0201064 ms.
func TestSplitStep(t *testing.T) {
	m := load(t, "tiny.json")
	// The simulator times the split; memory (the 17 GiB parameter does
	// not fit a V100) is the placers' concern, not checked here.
	c := parseCluster(t, `
hosts: [{name: h, intra: {bandwidth: 10GB/s, latency: 10us}}]
devices:
  - {name: g0, type: V100-16GB, host: h}
  - {name: g1, type: V100-16GB, host: h}
`)
	p, err := placer.NewProblem(m.Graph, cost.NewTable(m.Graph, c, m.Costs))
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Simulate(sim.Placement{Device: []int{0, 0, 1, 0}})
	if err != nil {
		t.Fatal(err)
	}
	if want := 3.0201064e-3; math.Abs(res.Step-want) > 1e-15 {
		t.Errorf("step %.10g s, want %.10g", res.Step, want)
	}
	if len(res.Transfers) != 2 || res.Transfers[0].Bytes != 1000 || res.Transfers[1].Bytes != 64 {
		t.Errorf("transfers %+v, want a (1000 B) then c->d (64 B)", res.Transfers)
	}
}

// timesAny reports whether the costed example at path gives a time for
// one of c's device types.
func timesAny(t *testing.T, path string, c *cluster.Cluster) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range c.Devices {
		if strings.Contains(string(data), `"`+d.Type.Name+`"`) {
			return true
		}
	}
	return false
}

// TestExamplesPlan plans every example on every example cluster.
func TestExamplesPlan(t *testing.T) {
	examples, _ := filepath.Glob(filepath.Join(exampleDir, "*.json"))
	clusters, _ := filepath.Glob(filepath.Join(clusterDir, "*.yaml"))
	if len(examples) < 3 || len(clusters) < 3 {
		t.Fatalf("found %d examples, %d clusters", len(examples), len(clusters))
	}
	for _, ex := range examples {
		for _, cl := range clusters {
			if filepath.Base(ex) == "tiny.json" && filepath.Base(cl) != "hetero.yaml" {
				continue // its 17 GiB parameter needs the A100 or the CPU
			}
			if strings.Contains(filepath.Base(cl), "Synth") {
				continue // SynthGPU: only costedtest.Layered's graphs have times for it
			}
			if c, err := cluster.Load(cl); err != nil || len(c.Devices) > 64 || !timesAny(t, ex, c) {
				continue // the large clusters plan for minutes; and a cluster of types the example has no time for fails by design
			}
			res, err := pipeline.Run(context.Background(), pipeline.Options{ModelPath: ex, ClusterPath: cl})
			if err != nil {
				t.Errorf("%s on %s: %v", filepath.Base(ex), filepath.Base(cl), err)
				continue
			}
			m, _ := costed.Load(ex)
			if len(res.Plan.Ops) != len(m.Graph.Ops) || !res.Plan.Fits || !(res.Plan.PredictedStepMS > 0) {
				t.Errorf("%s on %s: %d ops (want %d), fits %v, step %v ms", filepath.Base(ex), filepath.Base(cl),
					len(res.Plan.Ops), len(m.Graph.Ops), res.Plan.Fits, res.Plan.PredictedStepMS)
			}
		}
	}
}

// TestDevicePins: ops[].device pins an op only when the model's devices
// are respected, as TensorFlow's device fields; a device the cluster
// lacks is then an input error naming the op.
func TestDevicePins(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(exampleDir, "tiny.json"))
	if err != nil {
		t.Fatal(err)
	}
	pinned := func(dev string) string {
		p := filepath.Join(t.TempDir(), "pinned.json")
		s := strings.Replace(string(src), `{"name": "c", `, `{"name": "c", "device": "`+dev+`", `, 1)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hetero := filepath.Join(clusterDir, "hetero.yaml")
	for _, tc := range []struct {
		respect bool
		want    string // c's device
	}{{false, "v100a"}, {true, "t4"}} {
		res, err := pipeline.Run(context.Background(), pipeline.Options{ModelPath: pinned("t4"), ClusterPath: hetero, Strategy: "m-etf", RespectDevices: tc.respect})
		if err != nil {
			t.Fatalf("respect %v: %v", tc.respect, err)
		}
		for _, op := range res.Plan.Ops {
			if op.Name == "c" && op.Device != tc.want {
				t.Errorf("respect %v: c on %s, want %s", tc.respect, op.Device, tc.want)
			}
		}
	}
	path := pinned("gpu9")
	_, err = pipeline.Run(context.Background(), pipeline.Options{ModelPath: path, ClusterPath: hetero, Strategy: "m-etf", RespectDevices: true})
	var in *pipeline.InputError
	want := path + `: op "c": device "gpu9" is not a device of cluster "hetero" (devices: v100a, v100b, t4, a100, cpu0)`
	if !errors.As(err, &in) || err.Error() != want {
		t.Errorf("unknown device: %v (%T), want the input error %s", err, err, want)
	}
}
