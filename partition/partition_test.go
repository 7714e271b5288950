package partition

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/sim"
)

// near compares plan numbers, rounded to the nanosecond in ms, with a
// reference.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6+1e-9*math.Abs(b) }

// stageOps is each stage's forward op names.
func stageOps(pl *Plan) [][]string {
	var out [][]string
	for _, s := range pl.Stages {
		var fw []string
		for _, o := range s.Ops {
			if !strings.Contains(o, "_grad") {
				fw = append(fw, o)
			}
		}
		out = append(out, fw)
	}
	return out
}

func chain(out, param int64) []fwdOp {
	return []fwdOp{
		{"a", 1, out, param, []string{"x"}},
		{"b", 1, out, param, []string{"a"}},
		{"c", 1, out, param, []string{"b"}},
		{"d", 1, out, param, []string{"c"}},
	}
}

// TestHandSolved checks both dynamic programmes against partitions and
// stage times worked out by hand (M = 1, 1 GFLOP/s devices, 1 GB/s links,
// backward = 2x forward; see each case's comment).
func TestHandSolved(t *testing.T) {
	tests := []struct {
		name       string
		ops        []fwdOp
		training   bool
		devices    int
		memory     int64
		bottleneck float64 // seconds
		stages     [][]string
		replicas   []int
		sendBytes  []int64
		memBytes   []int64
	}{{
		// Split 2|2: each stage 2+4 s compute plus one 1 MB send (1 ms).
		// Two replicas of everything: 6 s + all-reduce of 4 GB,
		// 2(1/2)4e9/1e9 = 4 s.
		name: "chain splits in the middle", ops: chain(1e6, 1e9), training: true, devices: 2, memory: 1 << 40,
		bottleneck: 6.001, stages: [][]string{{"a", "b"}, {"c", "d"}}, replicas: []int{1, 1},
		sendBytes: []int64{1e6, 0},
	}, {
		// 10 GB activations make a split cost 10 s a direction; 1-byte
		// weights make the all-reduce free: one stage, two replicas.
		name: "replication beats splitting", ops: chain(1e10, 1), training: true, devices: 2, memory: 1 << 40,
		bottleneck: 6 + 2*0.5*4/1e9, stages: [][]string{{"a", "b", "c", "d"}}, replicas: []int{2},
		sendBytes: []int64{0},
	}, {
		// a(4) -> b(1), c(1) -> d(4) GFLOP; b and c write 5 GB each. Cutting
		// through the middle ({a,b}|{c,d}) sends 5 GB (15+5 s); a|bcd costs
		// 12.001 and 18.001; abc|d sends 10 GB; two replicas: 15 + 4 s.
		name: "diamond is not cut through its middle",
		ops: []fwdOp{
			{"a", 4, 1e6, 1e9, []string{"x"}},
			{"b", 1, 5e9, 1e9, []string{"a"}},
			{"c", 1, 5e9, 1e9, []string{"a"}},
			{"d", 4, 1e6, 1e9, []string{"b", "c"}},
		},
		training: true, devices: 2, memory: 1 << 40,
		bottleneck: 18.001, stages: [][]string{{"a"}, {"b", "c", "d"}}, replicas: []int{1, 1},
		sendBytes: []int64{1e6, 0},
	}, {
		// a's 100 MB output also feeds d, so it is relayed through the b
		// and c stages: boundary bytes 100, 101, 101 MB. Stage c: 3 s +
		// 0.101 s each way = 3.202 s; memory = 1 GB weights and 1 GB of their
		// gradient + its output
		// and everything it receives (1 + 101 MB) for the one live
		// micro-batch.
		name: "skip connection spans three stages",
		ops: []fwdOp{
			{"a", 1, 1e8, 1e9, []string{"x"}},
			{"b", 1, 1e6, 1e9, []string{"a"}},
			{"c", 1, 1e6, 1e9, []string{"b"}},
			{"d", 1, 1e6, 1e9, []string{"c", "a"}},
		},
		training: true, devices: 4, memory: 1 << 40,
		bottleneck: 3.202, stages: [][]string{{"a"}, {"b"}, {"c"}, {"d"}}, replicas: []int{1, 1, 1, 1},
		sendBytes: []int64{1e8, 1.01e8, 1.01e8, 0},
		memBytes:  []int64{2e9 + 1e8, 2e9 + 1e6 + 1e8, 2e9 + 1e6 + 1.01e8, 2e9 + 1e6 + 1.01e8}, // weight and its gradient, stash
	}, {
		// Inference: 4 GB of weights per op and 9 GB devices hold two ops,
		// so the free data-parallel plan (one stage, 2 s) does not fit: two
		// stages of 2 s, the first sending 1 MB.
		name: "memory forces more stages", ops: chain(1e6, 4e9), devices: 2, memory: 9e9,
		bottleneck: 2.001, stages: [][]string{{"a", "b"}, {"c", "d"}}, replicas: []int{1, 1},
		sendBytes: []int64{1e6, 0},
		memBytes:  []int64{8e9 + 2e6, 8e9 + 3e6},
	}, {
		name: "without the memory limit replication wins", ops: chain(1e6, 4e9), devices: 2, memory: 1 << 40,
		bottleneck: 2, stages: [][]string{{"a", "b", "c", "d"}}, replicas: []int{2},
		sendBytes: []int64{0},
	}}
	for _, tc := range tests {
		for _, name := range []string{"pipedream", "exact"} {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				g := buildGraph(tc.ops, tc.training)
				p := newTestProblem(t, g, testCluster(tc.devices, tc.memory, giga), Options{MicroBatches: 1})
				pl := run(t, name, p)
				if !near(pl.BottleneckMs, tc.bottleneck*1e3) {
					t.Errorf("bottleneck %v ms, want %v", pl.BottleneckMs, tc.bottleneck*1e3)
				}
				if got := stageOps(pl); !slices.EqualFunc(got, tc.stages, slices.Equal) {
					t.Errorf("stages %v, want %v", got, tc.stages)
				}
				for i, s := range pl.Stages {
					if i < len(tc.replicas) && s.Replicas != tc.replicas[i] {
						t.Errorf("stage %d: %d replicas, want %d", i, s.Replicas, tc.replicas[i])
					}
					if i < len(tc.sendBytes) && s.SendBytes != tc.sendBytes[i] {
						t.Errorf("stage %d sends %d bytes, want %d", i, s.SendBytes, tc.sendBytes[i])
					}
					if i < len(tc.memBytes) && s.PeakMemoryBytes != tc.memBytes[i] {
						t.Errorf("stage %d peak memory %d, want %d", i, s.PeakMemoryBytes, tc.memBytes[i])
					}
				}
			})
		}
	}
}

// TestHeterogeneous: one 2 GFLOP/s and one 1 GFLOP/s device, a chain of
// three 3-GFLOP (forward + backward) units: the fast device takes two
// units (6/2 = 3 s), the slow one (3 s), plus a 1 ms send each.
func TestHeterogeneous(t *testing.T) {
	ops := chain(1e6, 1)[:3]
	g := buildGraph(ops, true)
	c := graphtestCluster2()
	for _, name := range []string{"pipedream", "exact"} {
		p := newTestProblem(t, g, c, Options{MicroBatches: 1})
		pl := run(t, name, p)
		if !near(pl.BottleneckMs, 3001) {
			t.Errorf("%s: bottleneck %v ms, want 3001", name, pl.BottleneckMs)
		}
		for i, s := range pl.Stages {
			want := 1
			if s.DeviceType == "dev2e+09" {
				want = 2
			}
			if n := len(stageOps(pl)[i]); n != want {
				t.Errorf("%s: stage on %s has %d units, want %d", name, s.DeviceType, n, want)
			}
		}
	}
}

func TestSchedules(t *testing.T) {
	f := []float64{1, 1, 1, 1}
	b := []float64{1, 1, 1, 1}
	for _, tc := range []struct {
		sched Schedule
		alive []int
	}{{OneFOneB, []int{4, 3, 2, 1}}, {GPipe, []int{8, 8, 8, 8}}} {
		tl := simulateSchedule(passTimes{fwd: f, bwd: b, fwdSend: make([]float64, 4), bwdSend: make([]float64, 4)}, 8, tc.sched, true)
		// (M + S - 1)(f + b) for uniform stages.
		if tl.makespan != 22 {
			t.Errorf("%s: makespan %v, want 22", tc.sched, tl.makespan)
		}
		if !slices.Equal(tl.alive, tc.alive) {
			t.Errorf("%s: alive %v, want %v", tc.sched, tl.alive, tc.alive)
		}
		// Stage i starts after i forwards of micro-batch 0 and ends i
		// backwards before the step does.
		if !slices.Equal(tl.start, []float64{0, 1, 2, 3}) || !slices.Equal(tl.end, []float64{22, 21, 20, 19}) {
			t.Errorf("%s: stages run %v to %v, want [0 1 2 3] to [22 21 20 19]", tc.sched, tl.start, tl.end)
		}
	}
	// Inference: forwards only, (M + S - 1) f.
	if tl := simulateSchedule(passTimes{fwd: f, bwd: b, fwdSend: make([]float64, 4), bwdSend: make([]float64, 4)}, 8, OneFOneB, false); tl.makespan != 11 {
		t.Errorf("inference makespan %v, want 11", tl.makespan)
	}
}

func TestModulePrefix(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"/blocks.11/fc1/MatMul", "/blocks.11/fc2/MatMul"}, "/blocks.11/"},
		{[]string{"/blocks.10/fc1/MatMul", "/blocks.11/fc2/MatMul"}, ""},
		{[]string{"/h.3/attn/MatMul"}, "/h.3/attn/"},
		{[]string{"conv1", "conv2"}, ""},
	} {
		if got := modulePrefix(tc.names); got != tc.want {
			t.Errorf("modulePrefix(%q) = %q, want %q", tc.names, got, tc.want)
		}
	}
}

// TestAliveIsInFlight: the memory rule the search uses in closed form is
// the simulator's, sim.InFlight of the schedule, for every stage of up to
// 8 stages and every micro-batch count up to 32.
func TestAliveIsInFlight(t *testing.T) {
	for _, sched := range []Schedule{OneFOneB, GPipe} {
		for _, training := range []bool{true, false} {
			m := &model{opts: Options{Schedule: sched}, training: training}
			for S := 1; S <= 8; S++ {
				for i := 0; i < S; i++ {
					for M := 1; M <= 32; M++ {
						if got, want := m.alive(S-i, M), sim.InFlight(sim.Schedule(sched), training, S, i, M); got != want {
							t.Errorf("%s, training %v: stage %d of %d, M %d: alive %d, sim.InFlight %d", sched, training, i, S, M, got, want)
						}
					}
				}
			}
		}
	}
}
