package placer

import (
	"path/filepath"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph/graphtest"
)

// TestLinksSlot fills the channels of three devices on one host, whose
// transfers all share the host's fabric, and asks where further ones go.
func TestLinksSlot(t *testing.T) {
	dev := graphtest.Device{FLOPS: 1e9, Memory: 1 << 30}
	l := newLinks(graphtest.Cluster(1e9, 0, dev, dev, dev))
	l.commit(0, 1, 2, 4) // d0 sends, d1 receives, the fabric carries [2, 4]
	for _, tc := range []struct {
		name       string
		a, b       int
		ready, dur float64
		pending    []transfer
		want       float64
	}{
		{"before the busy interval", 2, 0, 0, 2, nil, 0},
		{"too long for the gap before it", 2, 0, 1, 2, nil, 4},
		{"after it", 1, 2, 4, 1, nil, 4},
		{"inside it", 1, 2, 3, 1, nil, 4},
		{"behind a transfer planned for the same op", 2, 0, 4, 1, []transfer{{start: 4, end: 6}}, 6},
		{"a pending transfer that leaves room", 2, 0, 0, 1, []transfer{{start: 1, end: 2}}, 0},
	} {
		if got := l.slot(tc.a, tc.b, tc.ready, tc.dur, tc.pending); got != tc.want {
			t.Errorf("%s: slot(%d->%d, ready %g, %g s) = %g, want %g", tc.name, tc.a, tc.b, tc.ready, tc.dur, got, tc.want)
		}
	}
	// Direct links (NVLink between every pair): only a shared sender or
	// receiver makes a transfer wait.
	c, err := cluster.Load(filepath.Join("..", "testdata", "clusters", "4xV100.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	l = newLinks(c)
	l.commit(0, 1, 0, 1)
	for _, tc := range []struct {
		a, b int
		want float64
	}{{2, 3, 0}, {1, 0, 0}, {0, 2, 1}, {3, 1, 1}} {
		if got := l.slot(tc.a, tc.b, 0, 1, nil); got != tc.want {
			t.Errorf("direct links: slot(%d->%d) = %g beside a transfer 0->1, want %g", tc.a, tc.b, got, tc.want)
		}
	}
}
