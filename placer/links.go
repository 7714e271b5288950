package placer

import (
	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
)

// links is the simulator's channels (sim.Channels) as the list placers
// fill them: one timeline per channel of the transfers committed so far.
// The simulator sends a tensor when its producer ends and a transfer
// occupies every channel of its route for its whole duration, so a
// placer asks for the first interval, at or after the producer's end, in
// which all of them are idle. Transfers are committed in the order ops
// are placed, not in the order the simulator requests them, so a later
// commit may take an earlier idle interval; the simulator would have
// requested it earlier too.
type links struct {
	nd    int
	route [][]int     // route[a*nd+b]: the channels of a transfer a -> b
	busy  []*timeline // per channel
}

func newLinks(c *cluster.Cluster) *links {
	nd := len(c.Devices)
	l := &links{nd: nd, route: make([][]int, nd*nd), busy: make([]*timeline, sim.NumChannels(c))}
	for a := 0; a < nd; a++ {
		for b := 0; b < nd; b++ {
			if a != b {
				l.route[a*nd+b] = sim.Channels(c, a, b, nil)
			}
		}
	}
	for ch := range l.busy {
		l.busy[ch] = newTimeline()
	}
	return l
}

// transfer is one tensor crossing to a device, planned or committed.
type transfer struct {
	t          graph.TensorID
	from       int
	start, end float64
}

// slot is the earliest start at or after ready of a transfer of length
// dur from device a to device b: every channel of its route idle for
// dur, and no overlap with pending, the transfers planned into b for the
// same op and not yet committed (they all share b's receive channel).
func (l *links) slot(a, b int, ready, dur float64, pending []transfer) float64 {
	t := ready
	for moved := true; moved; {
		moved = false
		for _, ch := range l.route[a*l.nd+b] {
			if s := l.busy[ch].earliest(t, dur); s > t {
				t, moved = s, true
			}
		}
		for _, p := range pending {
			if t < p.end && p.start < t+dur {
				t, moved = p.end, true
			}
		}
	}
	return t
}

// commit occupies the route from a to b over [start, end].
func (l *links) commit(a, b int, start, end float64) {
	for _, ch := range l.route[a*l.nd+b] {
		l.busy[ch].insert(start, end)
	}
}
