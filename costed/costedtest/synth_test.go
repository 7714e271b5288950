package costedtest_test

import (
	"bytes"
	"testing"

	"github.com/opplace/opplace/costed"
	"github.com/opplace/opplace/costed/costedtest"
)

// TestGenerate checks what a benchmark relies on: the exact op count, a
// valid acyclic graph, a training step, and one seed giving one file.
func TestGenerate(t *testing.T) {
	for _, tc := range []struct {
		ops   int
		heads int
		seed  uint64
	}{
		{costedtest.MinOps(0), 0, 1},
		{costedtest.MinOps(2), 2, 1},
		{100, 4, 3},
		{1000, 0, 1},
		{5003, 8, 42},
	} {
		cfg := costedtest.Config{Ops: tc.ops, Heads: tc.heads, Seed: tc.seed}
		f, err := costedtest.Generate(cfg)
		if err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
		if len(f.Ops) != tc.ops {
			t.Errorf("%+v: %d ops, want %d", cfg, len(f.Ops), tc.ops)
		}
		var a, b bytes.Buffer
		if err := f.Encode(&a); err != nil {
			t.Fatal(err)
		}
		m, err := costed.Decode(a.Bytes(), "synth.json")
		if err != nil {
			t.Fatalf("%+v: the generated graph does not import: %v", cfg, err)
		}
		phases := map[string]int{}
		for i := range m.Graph.Ops {
			phases[m.Graph.Ops[i].Phase.String()]++
		}
		if phases["backward"] == 0 || phases["update"] == 0 {
			t.Errorf("%+v: phases %v, want forward, backward and update ops", cfg, phases)
		}
		f2, _ := costedtest.Generate(cfg)
		f2.Encode(&b)
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Errorf("%+v: two runs gave different files", cfg)
		}
	}
	if _, err := costedtest.Generate(costedtest.Config{Ops: costedtest.MinOps(0) - 1}); err == nil {
		t.Error("a graph smaller than one layer was generated")
	}
}
