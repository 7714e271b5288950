package export

import (
	"slices"
	"testing"
)

// TestHostsLine: the megatron header names hosts one by one, but a run
// of three or more alike hosts (consecutive node ranks, the same process
// count, every GPU) as one entry, so 192 hosts read in a line.
func TestHostsLine(t *testing.T) {
	alike := func(n, procs int) []RankHost {
		var hs []RankHost
		for i := range n {
			hs = append(hs, RankHost{Host: "node" + string(rune('0'+i)), NodeRank: i, Processes: procs, FirstRank: i * procs})
		}
		return hs
	}
	mixed := alike(5, 8)
	mixed[3].Processes = 4
	mixed[3].CUDAVisibleDevices = []int{0, 1, 2, 3}
	tests := []struct {
		name  string
		hosts []RankHost
		want  []string
	}{
		{"two", alike(2, 8), []string{"node0 (node rank 0, 8 processes)", "node1 (node rank 1, 8 processes)"}},
		{"a run", alike(4, 8), []string{"node0 .. node3 (node ranks 0-3, 8 processes each)"}},
		{"broken by a partial host", mixed, []string{
			"node0 .. node2 (node ranks 0-2, 8 processes each)",
			"node3 (node rank 3, 4 processes, CUDA_VISIBLE_DEVICES=0,1,2,3)",
			"node4 (node rank 4, 8 processes)",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := hostsLine(tc.hosts); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
