package costedtest_test

import (
	"bytes"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/costed"
	"github.com/opplace/opplace/costed/costedtest"
)

func encode(t *testing.T, f *costed.File) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := f.Encode(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestLayeredDeterministic: one seed gives one file, another seed
// another graph.
func TestLayeredDeterministic(t *testing.T) {
	cfg := costedtest.LayeredConfig{Ops: 300, Seed: 7}
	a, _ := costedtest.Layered(cfg)
	b, _ := costedtest.Layered(cfg)
	if !bytes.Equal(encode(t, a), encode(t, b)) {
		t.Error("two runs of one seed gave different files")
	}
	cfg.Seed = 8
	c, _ := costedtest.Layered(cfg)
	if slices.Equal(a.Edges, c.Edges) {
		t.Error("seeds 7 and 8 gave the same edges")
	}
	if _, err := costedtest.Layered(costedtest.LayeredConfig{}); err == nil {
		t.Error("a graph of no ops was generated")
	}
}

// TestLayeredStructure checks the layers: sources only in layer 0; 1 to
// 3 distinct inputs from the layer before; at most one skip input, from
// within LayeredSkipReach layers but not the one before; every op of an
// inner layer read by the next whenever that layer had room; and skips
// present but occasional.
func TestLayeredStructure(t *testing.T) {
	for _, tc := range []struct{ ops, width int }{{300, 0}, {1000, 8}, {29, 4}, {7, 6}, {1, 0}} {
		t.Run(fmt.Sprintf("%d/%d", tc.ops, tc.width), func(t *testing.T) {
			f, err := costedtest.Layered(costedtest.LayeredConfig{Ops: tc.ops, Width: tc.width, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			w := tc.width
			if w == 0 {
				w = costedtest.LayeredWidth
			}
			if len(f.Ops) != tc.ops {
				t.Fatalf("%d ops, want %d", len(f.Ops), tc.ops)
			}
			id := map[string]int{}
			for i, op := range f.Ops {
				if op.Name != costedtest.LayeredName(i, w) {
					t.Fatalf("op %d is named %q", i, op.Name)
				}
				id[op.Name] = i
			}
			prev := make([][]int, tc.ops)
			skips := make([]int, tc.ops)
			read := make([]bool, tc.ops)
			for _, e := range f.Edges {
				from, to := id[e.From], id[e.To]
				read[from] = true
				switch lf, lt := from/w, to/w; {
				case lf == lt-1:
					prev[to] = append(prev[to], from)
				case lf < lt-1 && lf >= lt-costedtest.LayeredSkipReach:
					skips[to]++
				default:
					t.Fatalf("edge %s -> %s skips from layer %d to %d", e.From, e.To, lf, lt)
				}
			}
			nskip := 0
			for i := range f.Ops {
				layer := i / w
				k := len(prev[i])
				if layer == 0 && k+skips[i] > 0 || layer > 0 && (k < 1 || k > costedtest.LayeredMaxFanIn) {
					t.Errorf("%s reads %d ops of the layer before", f.Ops[i].Name, k)
				}
				if len(slices.Compact(slices.Clone(prev[i]))) != k {
					t.Errorf("%s reads one op twice", f.Ops[i].Name)
				}
				if skips[i] > 1 {
					t.Errorf("%s has %d skip inputs", f.Ops[i].Name, skips[i])
				}
				nskip += skips[i]
				// An unread op of an inner layer is allowed only if every
				// op of the next layer is full.
				if next := (layer + 1) * w; !read[i] && next < tc.ops {
					for j := next; j < min(next+w, tc.ops); j++ {
						if len(prev[j]) < costedtest.LayeredMaxFanIn {
							t.Errorf("%s is read by no op, though %s has room", f.Ops[i].Name, f.Ops[j].Name)
						}
					}
				}
			}
			if tc.ops >= 300 && (nskip == 0 || nskip > tc.ops/5) {
				t.Errorf("%d skip connections among %d ops, want some, about %.0f%% of the ops past layer 1", nskip, tc.ops, 100*costedtest.LayeredSkip)
			}
		})
	}
}

// TestLayeredRanges checks the sizes against their ranges, the times'
// median and spread against the lognormal's, and that the graph imports
// and runs on the bundled clusters' device type.
func TestLayeredRanges(t *testing.T) {
	const n = 4000
	f, err := costedtest.Layered(costedtest.LayeredConfig{Ops: n, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	logs := make([]float64, 0, n)
	for _, op := range f.Ops {
		if op.ParamBytes < costedtest.LayeredMinParam || op.ParamBytes > costedtest.LayeredMaxParam {
			t.Fatalf("%s holds %d bytes of parameters", op.Name, op.ParamBytes)
		}
		if op.OutputBytes < costedtest.LayeredMinOutput || op.OutputBytes > costedtest.LayeredMaxOutput {
			t.Fatalf("%s writes %d bytes", op.Name, op.OutputBytes)
		}
		ms, ok := op.TimesMS.Get(costedtest.LayeredDeviceType)
		if !ok || len(op.TimesMS) != 1 || ms <= 0 {
			t.Fatalf("%s has times %v", op.Name, op.TimesMS)
		}
		logs = append(logs, math.Log(ms))
	}
	slices.Sort(logs)
	median := math.Exp(logs[n/2])
	// The sample median of 4000 lognormal draws is within 3% of the
	// true one with overwhelming probability; the spread, measured
	// between the quartiles (±0.674 sigma), within 10%.
	if math.Abs(median/costedtest.LayeredMedianMS-1) > 0.03 {
		t.Errorf("median time %.4f ms, want about %.3f", median, costedtest.LayeredMedianMS)
	}
	if sigma := (logs[3*n/4] - logs[n/4]) / (2 * 0.6745); math.Abs(sigma/costedtest.LayeredSigma-1) > 0.1 {
		t.Errorf("sigma of log time %.3f, want about %.2f", sigma, costedtest.LayeredSigma)
	}

	m, err := costed.Decode(encode(t, f), "layered.json")
	if err != nil {
		t.Fatalf("the generated graph does not import: %v", err)
	}
	for _, name := range []string{"4xSynth.yaml", "4xSynth-tight.yaml", "8xSynth.yaml", "8xSynth-tight.yaml"} {
		c, err := cluster.Load(filepath.Join("..", "..", "testdata", "clusters", name))
		if err != nil {
			t.Fatal(err)
		}
		tab := cost.NewTable(m.Graph, c, m.Costs)
		for d := range c.Devices {
			if got, want := tab.OpTime(0, d), f.Ops[0].TimesMS[0].MS/1e3; got != want {
				t.Fatalf("%s: op %s takes %g s on %s, want %g", name, f.Ops[0].Name, got, c.Devices[d].Name, want)
			}
		}
	}
}
