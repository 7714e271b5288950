package partition

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/opplace/opplace/cluster"
)

// bruteUniform is the best objective over every split of the chain into
// S stages of n/S devices each (stage i at position i·n/S), by brute
// force: +Inf when none fits.
func bruteUniform(p *Problem, l *lattice, M, S int) float64 {
	n := len(p.m.classes[0].devices)
	r := n / S
	best := math.Inf(1)
	st := make([]solStage, S)
	var rec func(i int, d int32)
	rec = func(i int, d int32) {
		if i == S-1 {
			st[i] = solStage{from: d, to: l.full(), r: r, pos: i * r}
			best = min(best, evaluate(p, l, M, st))
			return
		}
		for e := d + 1; e <= l.full()-int32(S-i-1); e++ {
			st[i] = solStage{from: d, to: e, r: r, pos: i * r}
			rec(i+1, e)
		}
	}
	rec(0, 0)
	return best
}

// hosts4x2 is eight A100s, two per host: NVSwitch inside a host, a
// slower network between them, so where a stage sits matters; every
// device with mem bytes.
func hosts4x2(t testing.TB, mem int64) *cluster.Cluster {
	t.Helper()
	y := "network: {kind: network, bandwidth: 100Gb/s, latency: 10us}\nhosts:\n"
	for h := range 4 {
		y += fmt.Sprintf("  - {name: h%d, intra: {preset: nvswitch-a100}}\n", h)
	}
	y += "devices:\n"
	for h := range 4 {
		y += fmt.Sprintf("  - {name: \"h%dgpu{i}\", count: 2, type: A100-80GB, host: h%d}\n", h, h)
	}
	c, err := cluster.Parse([]byte(y), "hosts4x2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Devices {
		c.Devices[i].Memory = mem
	}
	return c
}

// TestUniformAgainstBruteForce: on random training chains split by
// degree over eight devices, the search's split scores (on the shared
// model) what it claims, and for its stage count no split of the chain
// into that many uniform stages scores better; every stage count with a
// feasible split under the objective of the one chosen is found.
func TestUniformAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const trials = 40
	feasible, deep := 0, 0
	defer func() {
		t.Logf("%d of %d trials feasible, %d with several stages", feasible, trials, deep)
		if feasible < 25 || deep < 8 {
			t.Errorf("only %d of %d trials feasible, %d with several stages", feasible, trials, deep)
		}
	}()
	for trial := 0; trial < trials; trial++ {
		n := 3 + rng.IntN(9)
		ops := make([]fwdOp, n)
		for j := range ops {
			ops[j] = fwdOp{name: fmt.Sprintf("op%d", j), gflops: 0.5 + 2.5*rng.Float64(),
				out: int64(1e6 * math.Pow(10, 3*rng.Float64())), param: int64(1e8 * math.Pow(10, 1.5*rng.Float64()))}
			ops[j].inputs = []string{"x"}
			if j > 0 {
				ops[j].inputs = []string{ops[j-1].name}
			}
		}
		mem := int64([]float64{2e9, 6e9, 40e9}[rng.IntN(3)])
		opts := Options{MicroBatches: []int{1, 2, 4, 8}[rng.IntN(4)], Schedule: []Schedule{OneFOneB, GPipe}[rng.IntN(2)],
			Objective: []Objective{Throughput, Latency}[rng.IntN(4)/3], ByDegree: true}
		t.Run(fmt.Sprintf("trial%d/n%d/mem%d/%s/%s/M%d", trial, n, mem, opts.Schedule, opts.Objective, opts.MicroBatches), func(t *testing.T) {
			p := newTestProblem(t, buildGraph(ops, true), hosts4x2(t, mem), opts)
			if !p.uniform() {
				t.Fatal("ByDegree on one class: not searched by degree")
			}
			l := chainLattice(p.u, p.m)
			M := opts.MicroBatches
			got, err := solveUniform(p, l, M, nil)
			if err != nil {
				t.Fatal(err)
			}
			var bestAny float64 = math.Inf(1)
			for _, S := range []int{1, 2, 4, 8} {
				if S <= int(l.full()) {
					bestAny = min(bestAny, bruteUniform(p, l, M, S))
				}
			}
			if got == nil {
				if !math.IsInf(bestAny, 1) {
					t.Fatalf("found nothing; brute force has a split of objective %v", bestAny)
				}
				return
			}
			feasible++
			S := len(got.stages)
			if S > 1 {
				deep++
			}
			if v := evaluate(p, l, M, got.stages); !near(v, got.value) {
				t.Fatalf("claims %v, the model scores its split %v", got.value, v)
			}
			if want := bruteUniform(p, l, M, S); !near(got.value, want) {
				t.Fatalf("%d stages: objective %v, brute force %v", S, got.value, want)
			}
			for i, x := range got.stages {
				if x.r != 8/S || x.pos != i*x.r {
					t.Fatalf("stage %d on %d devices at %d, want %d at %d", i, x.r, x.pos, 8/S, i*8/S)
				}
			}
		})
	}
}

// TestUniformPlansOneClassAtScale: a problem of one class of
// DegreeDevices devices or more is searched by degree, one of fewer
// devices is not, and the plans on it (80 devices: all-reduces priced on
// demand) have uniform stages that tile the devices in order.
func TestUniformPlansOneClassAtScale(t *testing.T) {
	ops := make([]fwdOp, 24)
	for j := range ops {
		ops[j] = fwdOp{name: fmt.Sprintf("op%d", j), gflops: 1 + float64(j%3), out: 4e6, param: 2e8, inputs: []string{"x"}}
		if j > 0 {
			ops[j].inputs = []string{ops[j-1].name}
		}
	}
	g := buildGraph(ops, true)
	small := newTestProblem(t, g, testCluster(DegreeDevices-1, 1<<40, 10*giga), Options{MicroBatches: 4})
	if small.uniform() {
		t.Errorf("%d devices searched by degree", DegreeDevices-1)
	}
	p := newTestProblem(t, g, testCluster(80, 1<<40, 10*giga), Options{MicroBatches: 4})
	if !p.uniform() {
		t.Fatal("80 devices of one class not searched by degree")
	}
	for _, name := range []string{"pipedream", "exact"} {
		pl := run(t, name, p)
		r := pl.Stages[0].Replicas
		next := 0
		for i, st := range pl.Stages {
			if st.Replicas != r || len(st.DeviceIndex) != r {
				t.Fatalf("%s: stage %d on %d devices, stage 0 on %d", name, i, st.Replicas, r)
			}
			for _, d := range st.DeviceIndex {
				if d != next {
					t.Fatalf("%s: stage %d on device %d, want %d", name, i, d, next)
				}
				next++
			}
		}
		if next != 80 {
			t.Errorf("%s: stages use %d of 80 devices", name, next)
		}
		if len(pl.Stages) < 2 {
			t.Errorf("%s: %d stage(s); the chain of 24 ops over 80 devices pipelines", name, len(pl.Stages))
		}
	}
}
