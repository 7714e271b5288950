package replan

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
)

// twoHosts is two hosts of two GPUs each, NVLink inside a host (100
// GB/s) and a 12.5 GB/s network between.
func twoHosts(t *testing.T) *cluster.Cluster {
	t.Helper()
	c, err := cluster.Parse([]byte(`name: 2x2
hosts: [{name: h0}, {name: h1}]
devices:
  - {name: "a{i}", count: 2, type: A100-80GB, host: h0}
  - {name: "b{i}", count: 2, type: A100-80GB, host: h1}
links:
  - {between: [a0, a1], kind: nvlink, bandwidth: 100GB/s, latency: 0us}
  - {between: [b0, b1], kind: nvlink, bandwidth: 100GB/s, latency: 0us}
  - {between: [h0, h1], kind: network, bandwidth: 100Gb/s, latency: 0us}
`), "2x2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSpans(t *testing.T) {
	s := span{0, 100}
	if got := s.part(1, 3); got != (span{33, 66}) {
		t.Errorf("part 1 of 3 = %v", got)
	}
	var sum int64
	for k := range 7 {
		sum += s.part(k, 7).len()
	}
	if sum != 100 {
		t.Errorf("7 parts sum to %d bytes, want 100", sum)
	}
	for _, tc := range []struct {
		a, b span
		want []span
	}{
		{span{0, 100}, span{0, 100}, nil},
		{span{0, 100}, span{20, 50}, []span{{0, 20}, {50, 100}}},
		{span{0, 100}, span{0, 0}, []span{{0, 100}}},
		{span{10, 20}, span{30, 40}, []span{{10, 20}}},
		{span{10, 20}, span{0, 15}, []span{{15, 20}}},
		{span{10, 20}, span{15, 40}, []span{{10, 15}}},
	} {
		if got := tc.a.minus(tc.b); !slices.Equal(got, tc.want) {
			t.Errorf("%v minus %v = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestHold checks where a layout keeps a weight and its optimizer state:
// on every replica of its reader's stage; ZeRO-1 splits the state, not
// the weight; a tensor-parallel group divides a divided weight's bytes
// among its members.
func TestHold(t *testing.T) {
	ps := []piece{
		{tensor: 0, param: 0, kind: 0, bytes: 1000, readers: []graph.OpID{0}},
		{tensor: 1, param: 0, kind: 1, bytes: 2000, readers: []graph.OpID{1}, zero: sim.ZeRO1},
	}
	no := func(graph.TensorID) bool { return false }
	yes := func(graph.TensorID) bool { return true }
	for _, tc := range []struct {
		name string
		l    layout
		want map[int][]span
	}{
		{"one device", layout{dev: []int{0, 0}, stages: []sim.Stage{{Replicas: [][]int{{0}}}}, divided: no},
			map[int][]span{0: {{0, 1000}, {0, 2000}}}},
		{"DDP over 4", layout{dev: []int{0, 0}, stages: []sim.Stage{{Replicas: [][]int{{0}, {1}, {2}, {3}}}}, divided: no},
			map[int][]span{0: {{0, 1000}, {0, 2000}}, 3: {{0, 1000}, {0, 2000}}}},
		{"ZeRO-1 over 4", layout{dev: []int{0, 0}, stages: []sim.Stage{{Replicas: [][]int{{0}, {1}, {2}, {3}}, Sharding: sim.ZeRO1}}, divided: no},
			map[int][]span{0: {{0, 1000}, {0, 500}}, 2: {{0, 1000}, {1000, 1500}}}},
		{"tensor-parallel pairs, two replicas, ZeRO-1", layout{dev: []int{0, 0}, stages: []sim.Stage{{Replicas: [][]int{{0, 1}, {2, 3}}, Tensor: 2, Sharding: sim.ZeRO1}}, divided: yes},
			map[int][]span{0: {{0, 500}, {0, 500}}, 1: {{500, 1000}, {1000, 1500}}, 2: {{0, 500}, {500, 1000}}, 3: {{500, 1000}, {1500, 2000}}}},
		{"pipeline: weight and update on two stages", layout{dev: []int{0, 1}, stages: []sim.Stage{{Replicas: [][]int{{0}}}, {Replicas: [][]int{{1}}}}, divided: no},
			map[int][]span{0: {{0, 1000}, {}}, 1: {{}, {0, 2000}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.l.hold(ps)
			for d, want := range tc.want {
				if !slices.Equal(h[d], want) {
					t.Errorf("device %d holds %v, want %v", d, h[d], want)
				}
			}
		})
	}
}

// TestMigrate checks the sources: bytes a device lacks come from the
// nearest holder (NVLink before the network), and from the checkpoint
// when no surviving device holds them; moves that share a sender take
// turns.
func TestMigrate(t *testing.T) {
	c := twoHosts(t)
	ps := []piece{{bytes: 1e9, readers: []graph.OpID{0}}}
	// Old: a0 and b1 hold the weight; a device past the cluster's (4,
	// lost) holds a second piece nobody else does.
	ps = append(ps, piece{tensor: 1, param: 1, bytes: 5e8, readers: []graph.OpID{1}})
	have := holdings{0: {{0, 1e9}, {}}, 3: {{0, 1e9}, {}}, 4: {{}, {0, 5e8}}}
	m := newMigrator(c, ps, have, 1e9)
	// New: a1 and b0 need the weight, a1 the lost piece too.
	need := holdings{1: {{0, 1e9}, {0, 5e8}}, 2: {{0, 1e9}, {}}}
	mg := m.migrate(need)
	want := []Move{
		{From: "a0", To: "a1", Bytes: 1e9, WeightBytes: 1e9},
		{From: "b1", To: "b0", Bytes: 1e9, WeightBytes: 1e9},
		{From: Checkpoint, To: "a1", Bytes: 5e8, WeightBytes: 5e8},
	}
	if len(mg.moves) != len(want) {
		t.Fatalf("moves %+v, want %+v", mg.moves, want)
	}
	for i, w := range want {
		g := mg.moves[i]
		if g.From != w.From || g.To != w.To || g.Bytes != w.Bytes || g.WeightBytes != w.WeightBytes {
			t.Errorf("move %d: %+v, want %+v", i, g, w)
		}
	}
	if mg.linkBytes != 2e9 || mg.checkpointBytes != 5e8 {
		t.Errorf("link %d, checkpoint %d bytes", mg.linkBytes, mg.checkpointBytes)
	}
	// a1 receives 1 GB over NVLink (10 ms) and 0.5 GB from the
	// checkpoint (500 ms), one after the other on its receive channel.
	if math.Abs(mg.ms-510) > 1e-6 || math.Abs(mg.boundMS-510) > 1e-6 {
		t.Errorf("migration %g ms (bound %g), want 510", mg.ms, mg.boundMS)
	}
	// Nothing to move when the devices have what they need.
	if mg := m.migrate(holdings{0: {{0, 1e9}, {}}}); len(mg.moves) != 0 || mg.ms != 0 {
		t.Errorf("moves %+v for a layout the old plan already holds", mg.moves)
	}
	// A lost piece two devices need: a0 reads it once (0.5 s), then
	// passes it to a1 over NVLink (5 ms) and to b0 over the network (40
	// ms), in turn on its send channel.
	m = newMigrator(c, ps, have, 1e9)
	mg = m.migrate(holdings{0: {{}, {0, 5e8}}, 1: {{}, {0, 5e8}}, 2: {{}, {0, 5e8}}})
	if mg.checkpointBytes != 5e8 || mg.linkBytes != 1e9 {
		t.Fatalf("relay: %d bytes read, %d passed on: %+v", mg.checkpointBytes, mg.linkBytes, mg.moves)
	}
	for _, mv := range mg.moves {
		if mv.From == "a0" && (!mv.Relayed || mv.StartMS < 500) {
			t.Errorf("relay %+v starts before the read ends", mv)
		}
	}
	if math.Abs(mg.ms-545) > 1e-6 {
		t.Errorf("read and relays take %g ms, want 545", mg.ms)
	}
	// One sender to two devices across the network: the sends take
	// turns on a0's send channel and its host's network card.
	m = newMigrator(c, ps[:1], holdings{0: {{0, 1e9}}}, 1e9)
	mg = m.migrate(holdings{2: {{0, 1e9}}, 3: {{0, 1e9}}})
	if math.Abs(mg.ms-160) > 1e-6 {
		t.Errorf("two 1 GB sends over a 12.5 GB/s network take %g ms, want 160", mg.ms)
	}
}

// TestRenaming: a candidate that puts the old device's work on another
// device of the same host is renamed back; across hosts it is not.
func TestRenaming(t *testing.T) {
	c := twoHosts(t)
	ps := []piece{{bytes: 1e9, readers: []graph.OpID{0}}, {tensor: 1, param: 1, bytes: 1e9, readers: []graph.OpID{1}}}
	m := newMigrator(c, ps, holdings{0: {{0, 1e9}, {}}, 1: {{}, {0, 1e9}}}, 1e9)
	// a0's piece wanted on a1 and a1's on a0: swapped back.
	if got := m.renaming(holdings{1: {{0, 1e9}, {}}, 0: {{}, {0, 1e9}}}); !slices.Equal(got, []int{1, 0, 2, 3}) {
		t.Errorf("renaming %v, want [1 0 2 3]", got)
	}
	// Already in place, or only another host's devices could help: none.
	if got := m.renaming(holdings{0: {{0, 1e9}, {}}, 1: {{}, {0, 1e9}}}); got != nil {
		t.Errorf("renaming %v of a layout in place", got)
	}
	if got := m.renaming(holdings{2: {{0, 1e9}, {}}}); got != nil {
		t.Errorf("renaming %v across hosts", got)
	}
}

// TestAssign checks the Hungarian method against every permutation.
func TestAssign(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 1 + trial%6
		cost := make([][]int64, n)
		for i := range cost {
			cost[i] = make([]int64, n)
			for j := range cost[i] {
				cost[i][j] = rng.Int64N(20)
			}
		}
		got := assign(cost)
		total := func(p []int) int64 {
			var s int64
			for i, j := range p {
				s += cost[i][j]
			}
			return s
		}
		best := int64(math.MaxInt64)
		perm := make([]int, n)
		for i := range perm {
			perm[i] = i
		}
		var walk func(k int)
		walk = func(k int) {
			if k == n {
				best = min(best, total(perm))
				return
			}
			for i := k; i < n; i++ {
				perm[k], perm[i] = perm[i], perm[k]
				walk(k + 1)
				perm[k], perm[i] = perm[i], perm[k]
			}
		}
		walk(0)
		seen := map[int]bool{}
		for _, j := range got {
			seen[j] = true
		}
		if len(seen) != n || total(got) != best {
			t.Fatalf("%v: assignment %v costs %d, the best %d", cost, got, total(got), best)
		}
	}
}
