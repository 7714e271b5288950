package sim

import (
	"slices"

	"github.com/opplace/opplace/cluster"
)

// AllReduceTime is how long an all-reduce of bytes over the given devices
// takes on the cluster's links, as NCCL-style collectives run it:
//
//   - devices of one host: a ring, 2(r-1)/r · bytes over the slowest link
//     of the ring, plus 2(r-1) link latencies;
//   - devices on h > 1 hosts, at most g per host: hierarchical, a ring
//     reduce-scatter and all-gather inside each host, 2(g-1)/g · bytes on
//     the slowest intra-host link, and between them an all-reduce of the
//     g shards across hosts, whose streams share each host's network
//     card: 2(h-1)/h · bytes over the slowest host-to-host link.
//
// It is 0 for fewer than two devices.
func AllReduceTime(c *cluster.Cluster, devs []int, bytes int64) float64 {
	r := len(devs)
	if r < 2 || bytes <= 0 {
		return 0
	}
	byHost := map[int][]int{}
	var hosts []int
	for _, d := range devs {
		h := c.Devices[d].Host
		if _, ok := byHost[h]; !ok {
			hosts = append(hosts, h)
		}
		byHost[h] = append(byHost[h], d)
	}
	slices.Sort(hosts)
	b := float64(bytes)
	if len(hosts) == 1 {
		bw, lat := ring(c, devs)
		return 2*float64(r-1)/float64(r)*b/bw + 2*float64(r-1)*lat
	}
	var t float64
	g := 0
	bwIntra, latIntra := 0.0, 0.0
	for _, h := range hosts {
		local := byHost[h]
		if len(local) > g {
			g = len(local)
		}
		if len(local) > 1 {
			bw, lat := ring(c, local)
			if bwIntra == 0 || bw < bwIntra {
				bwIntra = bw
			}
			latIntra = max(latIntra, lat)
		}
	}
	if g > 1 {
		t += 2*float64(g-1)/float64(g)*b/bwIntra + 2*float64(g-1)*latIntra
	}
	leaders := make([]int, len(hosts))
	for i, h := range hosts {
		leaders[i] = byHost[h][0]
	}
	bw, lat := ring(c, leaders)
	h := float64(len(hosts))
	return t + 2*(h-1)/h*b/bw + 2*(h-1)*lat
}

// ring is the slowest bandwidth and the largest latency of the links of
// a ring through devs in the order given.
func ring(c *cluster.Cluster, devs []int) (bw, lat float64) {
	for i, d := range devs {
		l := c.Path(d, devs[(i+1)%len(devs)])
		if bw == 0 || l.Bandwidth < bw {
			bw = l.Bandwidth
		}
		lat = max(lat, l.Latency)
	}
	return bw, lat
}

// Collective is one gradient all-reduce in the simulated step.
type Collective struct {
	// Stage is the stage whose replicas reduce; Devices the devices that
	// take part (one per replica).
	Stage   int
	Devices []int
	// Bytes is the bucket's size: the gradients it holds.
	Bytes      int64
	Start, End float64
}
