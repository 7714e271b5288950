package placer_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/costed"
	"github.com/opplace/opplace/costed/costedtest"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
	"github.com/opplace/opplace/strategy"
)

// baechiSeeds is how many random layered DAGs each setup of
// BenchmarkBaechiReference places: seeds 1 to baechiSeeds.
const baechiSeeds = 3

// synthCluster loads testdata/clusters/<name>.yaml with every direct
// link's bandwidth set to bw bytes per second (the files say 100 GB/s).
func synthCluster(b *testing.B, name string, bw float64) *cluster.Cluster {
	b.Helper()
	c, err := cluster.Load(filepath.Join("..", "testdata", "clusters", name+".yaml"))
	if err != nil {
		b.Fatal(err)
	}
	c.Direct = maps.Clone(c.Direct)
	for k, l := range c.Direct {
		l.Bandwidth = bw
		c.Direct[k] = l
	}
	return c
}

// layeredProblem is seed's random layered DAG of n ops on c.
func layeredProblem(b *testing.B, n int, seed uint64, c *cluster.Cluster) *placer.Problem {
	b.Helper()
	f, err := costedtest.Layered(costedtest.LayeredConfig{Ops: n, Seed: seed})
	if err != nil {
		b.Fatal(err)
	}
	m, err := costed.Build(f, f.Name)
	if err != nil {
		b.Fatal(err)
	}
	p, err := placer.NewProblem(m.Graph, cost.NewTable(m.Graph, c, m.Costs))
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkBaechiReference places random layered DAGs (costedtest.Layered,
// seeds 1 to 3) with every placer, Baechi's references m-etf-baechi and
// m-sct-baechi included, and reports the simulated step (sim-ms, the mean
// over the seeds a placer placed), how many seeds it placed without an
// error (placed), how many of those plans fit the devices' memory in the
// simulator (fits), and their fullest device's simulated peak as a share
// of its memory (peak-%, the mean over the plans). Setups: 300 ops on 4 GPUs and 1,000 ops on 8
// (testdata/clusters/{4,8}xSynth*.yaml), generous or tight memory, links
// of 10 GB/s (slow) or 100 GB/s (fast), 20 µs latency; .../bound reports
// the mean lower bound (cost.LowerBound). The table in
// docs/strategies.md ("Against Baechi's algorithms") comes from
//
//	go test ./placer -run '^$' -bench BenchmarkBaechiReference -benchtime 1x
func BenchmarkBaechiReference(b *testing.B) {
	for _, setup := range []struct {
		name    string
		ops     int
		cluster string
	}{{"300x4", 300, "4xSynth"}, {"1000x8", 1000, "8xSynth"}} {
		for _, mem := range []struct{ name, suffix string }{{"generous", ""}, {"tight", "-tight"}} {
			for _, link := range []struct {
				name string
				bw   float64
			}{{"slow", 10e9}, {"fast", 100e9}} {
				c := synthCluster(b, setup.cluster+mem.suffix, link.bw)
				var problems []*placer.Problem
				for seed := uint64(1); seed <= baechiSeeds; seed++ {
					problems = append(problems, layeredProblem(b, setup.ops, seed, c))
				}
				b.Run(fmt.Sprintf("%s/%s/%s/bound", setup.name, mem.name, link.name), func(b *testing.B) {
					var sum float64
					for _, p := range problems {
						sum += cost.LowerBound(p.Costs, p.Adj, p.Order).Seconds()
					}
					b.ReportMetric(1e3*sum/float64(len(problems)), "bound-ms")
				})
				for _, name := range placer.Names() {
					b.Run(fmt.Sprintf("%s/%s/%s/%s", setup.name, mem.name, link.name, name), func(b *testing.B) {
						for i := 0; i < b.N; i++ {
							benchPlacer(b, name, problems)
						}
					})
				}
				b.Run(fmt.Sprintf("%s/%s/%s/local", setup.name, mem.name, link.name), func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						benchLocal(b, problems)
					}
				})
			}
		}
	}
}

// benchPlacer places each problem with the named placer and reports the
// plans it made (reportPlans).
func benchPlacer(b *testing.B, name string, problems []*placer.Problem) {
	var plans []judgedPlan
	for _, p := range problems {
		pl, err := placer.New(name)
		if err != nil {
			b.Fatal(err)
		}
		got, err := pl.Place(context.Background(), p)
		var inf *placer.InfeasibleError
		if errors.As(err, &inf) {
			continue
		}
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		res, err := p.Simulate(got)
		if err != nil {
			b.Fatal(err)
		}
		plans = append(plans, judgedPlan{p, res})
	}
	reportPlans(b, plans)
}

// benchLocal is strategy local as auto runs it: after m-etf, heft and
// m-sct, with auto's work budget, from the fastest of their placements
// that fits.
func benchLocal(b *testing.B, problems []*placer.Problem) {
	var plans []judgedPlan
	names := append(slices.Clone(strategy.LocalSeeds), "local")
	for _, p := range problems {
		outs, _, _ := strategy.Search(context.Background(), strategy.NewProblem(p, 0), strategy.Config{}, names)
		if o := outs[len(outs)-1]; o.Sim != nil {
			plans = append(plans, judgedPlan{p, o.Sim})
		}
	}
	reportPlans(b, plans)
}

// judgedPlan is a problem's placement as the simulator ran it.
type judgedPlan struct {
	p   *placer.Problem
	res *sim.Result
}

// reportPlans reports the mean simulated step of the plans made
// (sim-ms), how many were made (placed) and how many fit (fits), and the
// mean share of its memory their fullest device peaks at (peak-%).
func reportPlans(b *testing.B, plans []judgedPlan) {
	var sum, peak float64
	fits := 0
	for _, j := range plans {
		sum += j.res.Step
		var worst float64
		for d, m := range j.res.PeakMemory {
			worst = max(worst, float64(m)/float64(j.p.Costs.Cluster.Devices[d].Memory))
		}
		peak += worst
		if j.p.Fits(j.res) {
			fits++
		}
	}
	if n := len(plans); n > 0 {
		b.ReportMetric(1e3*sum/float64(n), "sim-ms")
		b.ReportMetric(100*peak/float64(n), "peak-%")
	}
	b.ReportMetric(float64(len(plans)), "placed")
	b.ReportMetric(float64(fits), "fits")
}
