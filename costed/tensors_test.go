package costed_test

import (
	"math"
	"testing"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/costed"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
)

// TestDeviceKey: ops[].device becomes the op's Device pin; ops without
// one have none.
func TestDeviceKey(t *testing.T) {
	m, err := costed.Decode([]byte(doc(`{"name": "a", "times_ms": {"T4": 1}, "device": "gpu1"}, {"name": "b", "times_ms": {"T4": 1}, "device": null}, `+
		`{"name": "c", "times_ms": {"T4": 1}, "device": "gpu1"}`, "")), "g.json")
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"gpu1", "", "gpu1"} {
		if got := m.Graph.Ops[i].Device; got != want {
			t.Errorf("op %s: device %q, want %q", m.Graph.Ops[i].Name, got, want)
		}
	}
}

// twoLinks is two V100s joined by a 10 GB/s, 10 us link: a transfer of
// n bytes takes 10 us + n/10 ns.
const twoLinks = `
hosts: [{name: h, intra: {bandwidth: 10GB/s, latency: 10us}}]
devices:
  - {name: g0, type: V100-16GB, host: h}
  - {name: g1, type: V100-16GB, host: h}
`

// TestSeveralTensorsPerPair: edges that name their tensors may repeat a
// pair of ops, each its own tensor and its own transfer; edges from one
// op naming one tensor read one value, sent once to a device.
//
// a (1 ms, on g0) writes h (1000 B) and c (2000 B) for b, and h again
// for e; b (1 ms) and e (0.5 ms) run on g1. By hand: a runs 0-1 ms; g0
// sends one tensor at a time: h arrives after 10 + 0.1 us, at 1.0101 ms,
// then c after 10 + 0.2 us, at 1.0203 ms. e needs only h and runs
// 1.0101-1.5101 ms; b needs both and g1 is free at 1.5101 ms:
// step = 1.5101 + 1 = 2.5101 ms. Two transfers, 3000 bytes: h crosses
// once though two ops read it.
func TestSeveralTensorsPerPair(t *testing.T) {
	in := doc(`{"name": "a", "times_ms": {"V100-16GB": 1}, "output_bytes": 0}, {"name": "b", "times_ms": {"V100-16GB": 1}}, {"name": "e", "times_ms": {"V100-16GB": 0.5}}`,
		`{"from": "a", "to": "b", "tensor": "h", "bytes": 1000}, {"from": "a", "to": "b", "tensor": "c", "bytes": 2000}, {"from": "a", "to": "e", "tensor": "h", "bytes": 1000}`)
	m, err := costed.Decode([]byte(in), "g.json")
	if err != nil {
		t.Fatal(err)
	}
	g := m.Graph
	for _, tc := range []struct {
		tensor    string
		bytes     int64
		consumers int
	}{{"a:h", 1000, 2}, {"a:c", 2000, 1}} {
		id, ok := g.TensorByName(tc.tensor)
		if !ok {
			t.Fatalf("no tensor %q", tc.tensor)
		}
		if tn := &g.Tensors[id]; tn.Bytes() != tc.bytes || len(tn.Consumers) != tc.consumers || tn.Producer != 0 {
			t.Errorf("%s: %d bytes, %d consumers, producer %d; want %d, %d, a", tc.tensor, tn.Bytes(), len(tn.Consumers), tn.Producer, tc.bytes, tc.consumers)
		}
	}
	if n := len(g.Ops[0].Outputs); n != 3 {
		t.Errorf("a has %d outputs, want 3 (its own, h, c)", n)
	}
	c := parseCluster(t, twoLinks)
	p, err := placer.NewProblem(g, cost.NewTable(g, c, m.Costs))
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Simulate(sim.Placement{Device: []int{0, 1, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if want := 2.5101e-3; math.Abs(res.Step-want) > 1e-15 {
		t.Errorf("step %.10g s, want %.10g", res.Step, want)
	}
	var sent []string
	var bytes int64
	for _, tr := range res.Transfers {
		sent = append(sent, g.Tensors[tr.Tensor].Name)
		bytes += tr.Bytes
	}
	if len(sent) != 2 || sent[0] != "a:h" || sent[1] != "a:c" || bytes != 3000 {
		t.Errorf("transfers %v (%d bytes), want a:h then a:c, 3000 bytes", sent, bytes)
	}
}

// TestTensorNamesMeet: a named tensor whose graph name another tensor
// already has ("a:x", the output of an op named so) gets a suffix, and
// both stay apart.
func TestTensorNamesMeet(t *testing.T) {
	in := doc(`{"name": "a", "times_ms": {"T4": 1}}, {"name": "a:x", "times_ms": {"T4": 1}, "output_bytes": 5}, {"name": "b", "times_ms": {"T4": 1}}`,
		`{"from": "a", "to": "b", "tensor": "x", "bytes": 7}, {"from": "a:x", "to": "b"}`)
	m, err := costed.Decode([]byte(in), "g.json")
	if err != nil {
		t.Fatal(err)
	}
	b := &m.Graph.Ops[2]
	var got []int64
	for _, in := range b.Inputs {
		got = append(got, m.Graph.Tensors[in].Bytes())
	}
	if len(got) != 2 || got[0] != 7 || got[1] != 5 {
		t.Errorf("b reads tensors of %v bytes, want [7 5]", got)
	}
	if _, ok := m.Graph.TensorByName("a:x#2"); !ok {
		t.Errorf("no tensor a:x#2; tensors: %v", m.Graph.Tensors)
	}
}
