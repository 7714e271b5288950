package placer

import (
	"context"
	"testing"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
)

// TestListStateFree schedules ops by hand on one device and checks the
// memory bookkeeping after every step: used, reserved and available
// memory are never negative, nor is any op's free memory, and the
// message for an op that does not fit states what the device holds.
// Forward ops keep a headroom for backward scratch that backward ops,
// and classes a backward op places first, take or raise past what is
// left; "free" was once available memory less that headroom, negative
// (BERT L-12 on its dnn-partitioning cluster: "-596.73 MiB free").
func TestListStateFree(t *testing.T) {
	type op struct {
		name     string
		phase    graph.Phase
		colocate string
		out      int64
		inputs   []string
	}
	for _, tc := range []struct {
		name     string
		ops      []op
		schedule []string // on device 0, in this order
		fit      []string // ops that fit afterwards
		probe    string   // an op that does not fit
		want     string   // its noRoom detail
	}{
		{
			// A loss and its gradient seed, all backward ops of one
			// class (BERT's Bert_Total_Loss): its source is placed
			// first and sets a 60-byte headroom with 40 bytes left.
			name: "class first placed by a backward op",
			ops: []op{
				{"l0", graph.Backward, "loss", 60, nil},
				{"f0", graph.Forward, "", 10, []string{"x"}},
				{"f1", graph.Forward, "", 10, []string{"f0"}},
				{"l1", graph.Backward, "loss", 1, []string{"l0", "f1"}},
			},
			schedule: []string{"l0"},
			probe:    "f0",
			want:     `after placing 1 of 4 ops, op "f0" needs 11 B more on d0, which has 40 B free, none of it for a forward op (forward ops leave 60 B for the backward scratch of its colocation groups)`,
		},
		{
			// g0's 80-byte output is the headroom f0 left; once it runs,
			// 19 bytes are left and the headroom still stands.
			name: "backward op inside the headroom",
			ops: []op{
				{"f0", graph.Forward, "a", 10, []string{"x"}},
				{"g0", graph.Backward, "a", 80, []string{"f0"}},
				{"f1", graph.Forward, "", 10, []string{"x"}},
				{"f2", graph.Forward, "", 0, []string{"x"}},
				{"g1", graph.Backward, "a", 1, []string{"g0", "f1", "f2"}},
			},
			schedule: []string{"f0", "g0"},
			fit:      []string{"f2"}, // needs nothing
			probe:    "f1",
			want:     `after placing 2 of 5 ops, op "f1" needs 10 B more on d0, which has 19 B free, none of it for a forward op (forward ops leave 80 B for the backward scratch of its colocation groups)`,
		},
		{
			name: "some of the headroom left",
			ops: []op{
				{"f0", graph.Forward, "a", 10, []string{"x"}},
				{"g0", graph.Backward, "a", 30, []string{"f0"}},
				{"f1", graph.Forward, "", 50, []string{"x"}},
				{"g1", graph.Backward, "a", 1, []string{"g0", "f1"}},
			},
			schedule: []string{"f0", "g0"},
			probe:    "f1",
			want:     `after placing 2 of 4 ops, op "f1" needs 50 B more on d0, which has 69 B free, 39 B of it for a forward op (forward ops leave 30 B for the backward scratch of its colocation groups)`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := graphtest.New("free").Input("x", 1)
			for _, o := range tc.ops {
				b.Op(o.name, 1e9, o.out, o.inputs...)
				last := &b.G.Ops[len(b.G.Ops)-1]
				last.Phase, last.Colocate = o.phase, o.colocate
			}
			c := graphtest.Cluster(1e9, 0, graphtest.Device{FLOPS: 1e9, Memory: 100})
			p, err := NewProblem(b.G, cost.NewTable(b.G, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
			if err != nil {
				t.Fatal(err)
			}
			s, err := newListState(p, nil)
			if err != nil {
				t.Fatal(err)
			}
			id := func(name string) graph.OpID {
				op, ok := b.G.OpByName(name)
				if !ok {
					t.Fatalf("no op %q", name)
				}
				return op
			}
			check := func(when string) {
				t.Helper()
				if s.mem[0].total < 0 || s.reserved[0] < 0 || s.avail(0, 0) < 0 {
					t.Errorf("%s: held %d, reserved %d, available %d", when, s.mem[0].total, s.reserved[0], s.avail(0, 0))
				}
				for _, op := range s.readyOps() {
					if f := s.free(op, 0, s.startOn(op, 0)); f < 0 {
						t.Errorf("%s: %s has %d bytes free", when, b.G.Ops[op].Name, f)
					}
				}
			}
			check("at the start")
			for _, name := range tc.schedule {
				op := id(name)
				if !s.fits(op, 0, s.startOn(op, 0)) {
					t.Fatalf("%s does not fit", name)
				}
				s.schedule(op, 0, s.startOn(op, 0))
				check("after " + name)
			}
			for _, name := range tc.fit {
				op := id(name)
				if at := s.startOn(op, 0); !s.fits(op, 0, at) {
					t.Errorf("%s needs %d bytes and has %d free, but does not fit", name, s.need(op, 0), s.free(op, 0, at))
				}
			}
			if op := id(tc.probe); s.fits(op, 0, s.startOn(op, 0)) {
				t.Fatalf("%s fits", tc.probe)
			}
			var inf *InfeasibleError
			if err := s.noRoom(id(tc.probe)); !asInfeasible(err, &inf) || inf.Detail != tc.want {
				t.Errorf("noRoom:\n%v\nwant detail\n%s", err, tc.want)
			}
		})
	}
}

// TestMETFStuckMessage is the first case above end to end: m-ETF places
// the loss's source first and then cannot place f0.
func TestMETFStuckMessage(t *testing.T) {
	b := graphtest.New("loss").Input("x", 1).
		Op("l0", 1e9, 60).
		Op("f0", 1e9, 10, "x").
		Op("f1", 1e9, 10, "f0").
		Op("l1", 1e9, 1, "l0", "f1")
	for _, i := range []int{0, 3} {
		b.G.Ops[i].Phase, b.G.Ops[i].Colocate = graph.Backward, "loss"
	}
	c := graphtest.Cluster(1e9, 0, graphtest.Device{FLOPS: 1e9, Memory: 100})
	p, err := NewProblem(b.G, cost.NewTable(b.G, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = listPlacer(etf).Place(context.Background(), p)
	want := `after placing 1 of 4 ops, op "f0" needs 11 B more on d0, which has 40 B free, none of it for a forward op (forward ops leave 60 B for the backward scratch of its colocation groups)`
	var inf *InfeasibleError
	if !asInfeasible(err, &inf) || inf.Detail != want {
		t.Errorf("m-etf: %v\nwant detail\n%s", err, want)
	}
}

func asInfeasible(err error, inf **InfeasibleError) bool {
	e, ok := err.(*InfeasibleError)
	*inf = e
	return ok
}
