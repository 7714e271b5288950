package costed_test

import (
	"sync"
	"testing"

	"github.com/opplace/opplace/costed"
	"github.com/opplace/opplace/graph"
)

// TestNameLookups checks the graph's name maps, which the import leaves
// to be built on first use (from several goroutines at once here), and
// the renaming when an op is named like a tensor the import makes.
func TestNameLookups(t *testing.T) {
	check := func(t *testing.T, g *graph.Graph) {
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range g.Ops {
					if id, ok := g.OpByName(g.Ops[i].Name); !ok || int(id) != i {
						t.Errorf("OpByName(%q) = %d, %v; want %d", g.Ops[i].Name, id, ok, i)
					}
				}
				for i := range g.Tensors {
					if id, ok := g.TensorByName(g.Tensors[i].Name); !ok || int(id) != i {
						t.Errorf("TensorByName(%q) = %d, %v; want %d", g.Tensors[i].Name, id, ok, i)
					}
				}
				if _, ok := g.OpByName("no such op"); ok {
					t.Error("found an op that is not there")
				}
			}()
		}
		wg.Wait()
	}
	for _, name := range []string{"mlp_train.json", "bert24_layers_training.json"} {
		t.Run(name, func(t *testing.T) { check(t, load(t, name).Graph) })
	}
	t.Run("collisions", func(t *testing.T) {
		doc := `{"format": "opplace-costed-graph/v1", "ops": [
			{"name": "a", "times_ms": {"V100": 1}, "param_bytes": 4, "output_bytes": 8},
			{"name": "a/params", "times_ms": {"V100": 1}, "output_bytes": 8},
			{"name": "a->a/params", "times_ms": {"V100": 1}, "output_bytes": 8}],
			"edges": [{"from": "a", "to": "a/params", "bytes": 3}, {"from": "a/params", "to": "a->a/params"}]}`
		m, err := costed.Decode([]byte(doc), "c.json")
		if err != nil {
			t.Fatal(err)
		}
		check(t, m.Graph)
		var names []string
		for _, x := range m.Graph.Tensors {
			names = append(names, x.Name)
		}
		want := []string{"a", "a/params", "a/params#2", "a->a/params", "a->a/params#2"}
		if len(names) != len(want) {
			t.Fatalf("tensors %q, want %q", names, want)
		}
		for i := range want {
			if names[i] != want[i] {
				t.Fatalf("tensors %q, want %q", names, want)
			}
		}
		// Adding after the lookups keeps the maps up to date.
		id, err := m.Graph.AddTensor(graph.Tensor{Name: "new"})
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := m.Graph.TensorByName("new"); !ok || got != id {
			t.Fatalf("TensorByName(new) = %d, %v; want %d", got, ok, id)
		}
		if _, err := m.Graph.AddTensor(graph.Tensor{Name: "a"}); err == nil {
			t.Fatal("a second tensor a was added")
		}
	})
}
