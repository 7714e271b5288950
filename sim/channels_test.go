package sim_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/sim"
)

// TestChannels routes transfers on two hosts of four GPUs each, joined
// by NVLink inside a host: 8 devices and 2 hosts make 30 channels; and
// on one host whose devices share its fabric.
func TestChannels(t *testing.T) {
	c, err := cluster.Load(filepath.Join("..", "testdata", "clusters", "8xA100-2host.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if n := sim.NumChannels(c); n != 4*8+3*2 {
		t.Fatalf("NumChannels = %d, want 38", n)
	}
	for _, tc := range []struct {
		a, b int
		want []int
	}{
		{0, 1, []int{0, 8 + 1}},                         // NVLink: send and receive only
		{2, 5, []int{2, 8 + 5, 24 + 1, 24 + 3 + 2}},     // host 0's card out, host 1's card in
		{7, 0, []int{7, 8 + 0, 24 + 3 + 1, 24 + 0 + 2}}, // and back
	} {
		var buf [6]int
		if got := sim.Channels(c, tc.a, tc.b, buf[:]); !slices.Equal(got, tc.want) {
			t.Errorf("Channels(%d, %d) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	dev := graphtest.Device{FLOPS: giga, Memory: 1 << 30}
	shared := graphtest.Cluster(giga, 0, dev, dev, dev)
	if got, want := sim.Channels(shared, 2, 0, nil), []int{2, 3 + 0, 9}; !slices.Equal(got, want) {
		t.Errorf("Channels through the fabric = %v, want %v", got, want)
	}
}
