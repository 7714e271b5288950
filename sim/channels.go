package sim

import (
	"slices"

	"github.com/opplace/opplace/cluster"
)

// Channels are what the simulator's transfers and all-reduces occupy, one
// at a time each, in the order they were requested. For a cluster of nd
// devices, device d has a send channel (d), a receive channel (nd+d) and
// a collective stream (2nd+d); host h has its intra-host fabric (3nd+3h)
// and its network card's egress (3nd+3h+1) and ingress (3nd+3h+2); after
// them, for nh hosts, device d has a tensor-parallel stream (3nd+3nh+d),
// on which its group's syncs run beside the gradient buckets of the
// collective stream, as Megatron-LM's tensor- and data-parallel
// communicators are separate NCCL communicators on separate streams.
// Placers that predict what the simulator will do occupy the same
// channels (package placer), so both route a transfer with Channels.

// NumChannels is how many channels cluster c has.
func NumChannels(c *cluster.Cluster) int { return 4*len(c.Devices) + 3*len(c.Hosts) }

// Channels appends to buf[:0] the channels a transfer from device a to
// another device b occupies for its whole duration: a's send channel,
// b's receive channel, and the shared path between them, the host's
// fabric for a transfer inside a host without a direct link or the two
// hosts' network cards for one across hosts. Transfers that share a
// channel take turns at the link's full bandwidth: the shared link moves
// the same bytes per second as under fair sharing, but each transfer
// finishes in turn. Six entries of buf avoid any allocation.
func Channels(c *cluster.Cluster, a, b int, buf []int) []int {
	nd := len(c.Devices)
	out := append(buf[:0], a, nd+b)
	switch _, route := c.Route(a, b); route {
	case cluster.RouteIntraHost:
		out = append(out, fabricChannel(nd, c.Devices[a].Host))
	case cluster.RouteNetwork:
		out = append(out, nicOut(nd, c.Devices[a].Host), nicIn(nd, c.Devices[b].Host))
	}
	return out
}

// streamChannel is device d's collective stream among nd devices.
func streamChannel(nd, d int) int { return 2*nd + d }

// tensorChannel is device d's tensor-parallel stream among nd devices on
// nh hosts.
func tensorChannel(nd, nh, d int) int { return 3*nd + 3*nh + d }

// fabricChannel is host h's intra-host fabric; nicOut and nicIn are its
// network card's egress and ingress.
func fabricChannel(nd, h int) int { return 3*nd + 3*h }
func nicOut(nd, h int) int        { return 3*nd + 3*h + 1 }
func nicIn(nd, h int) int         { return 3*nd + 3*h + 2 }

// links are the channels transfers and collectives occupy (see
// Channels).
type links struct {
	// free holds when each channel is next free.
	free []float64
	// channelsBuf backs the channel list of one transfer or collective.
	channelsBuf [6]int
	// readers[t] lists, in order, the devices other than its producer's
	// that read tensor t, worked out at its first instance (readersOf).
	readers     [][]int32
	readersDone []bool
}

// occupy takes channels res for dur seconds from when all are free, no
// earlier than now, and returns when that is.
func (l *links) occupy(res []int, now, dur float64) (start, end float64) {
	start = now
	for _, r := range res {
		start = max(start, l.free[r])
	}
	end = start + dur
	for _, r := range res {
		l.free[r] = end
	}
	return start, end
}

// ringChannels appends to res the shared channels a ring from device d
// through the devices of group crosses: d's host's fabric for a peer
// without a direct link, its network card for a peer on another host.
func (s *state) ringChannels(res []int, d int, group []int) []int {
	nd := s.nd
	h := s.c.Devices[d].Host
	for _, o := range group {
		if o == d {
			continue
		}
		switch _, route := s.c.Route(d, o); route {
		case cluster.RouteIntraHost:
			if !slices.Contains(res, fabricChannel(nd, h)) {
				res = append(res, fabricChannel(nd, h))
			}
		case cluster.RouteNetwork:
			if !slices.Contains(res, nicOut(nd, h)) {
				res = append(res, nicOut(nd, h), nicIn(nd, h))
			}
		}
	}
	return res
}
