package strategy

import (
	"fmt"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/sim"
)

// TestReplicaLevels: under auto sharding ZeRO-3 is offered to replicas on
// one host and not across hosts (docs/plan-space.md#zero-3); a level the
// user names is offered anywhere, and other levels are never dropped.
func TestReplicaLevels(t *testing.T) {
	c := &cluster.Cluster{Hosts: []cluster.Host{{Name: "h0"}, {Name: "h1"}}}
	for i := 0; i < 4; i++ {
		c.Devices = append(c.Devices, cluster.Device{Name: fmt.Sprint("d", i), Host: i / 2})
	}
	all := []sim.Sharding{sim.NoSharding, sim.ZeRO1, sim.ZeRO2, sim.ZeRO3}
	for _, tc := range []struct {
		levels []sim.Sharding
		given  bool
		groups [][]int
		want   string
	}{
		{all, false, [][]int{{0}, {1}}, "[none zero1 zero2 zero3]"},
		{all, false, [][]int{{0}, {1}, {2}, {3}}, "[none zero1 zero2]"},
		{all, false, [][]int{{0, 2}, {1, 3}}, "[none zero1 zero2]"},
		{[]sim.Sharding{sim.ZeRO3}, true, [][]int{{0}, {2}}, "[zero3]"},
		{[]sim.Sharding{sim.NoSharding, sim.ZeRO2}, false, [][]int{{0}, {3}}, "[none zero2]"},
	} {
		got := fmt.Sprint(replicaLevels(tc.levels, tc.given, c, tc.groups))
		if got != tc.want {
			t.Errorf("levels %v given %v on %v: %s, want %s", tc.levels, tc.given, tc.groups, got, tc.want)
		}
		notes := zeroNotes(sim.ZeRO3, c, tc.groups)
		if cross := !oneHost(c, tc.groups); (len(notes) == 2) != cross || cross && notes[1] != crossHostZeRO3 {
			t.Errorf("ZeRO-3 on %v: notes %q", tc.groups, notes)
		}
	}
	if all[3] != sim.ZeRO3 || fmt.Sprint(all) != "[none zero1 zero2 zero3]" {
		t.Fatalf("levels changed under the test: %v", all)
	}
}
