package sim

import (
	"slices"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
)

// AllReduceTime is how long an all-reduce of bytes over the given devices
// takes on the cluster's links, as NCCL-style collectives run it:
//
//   - devices of one host: a ring, 2(r-1)/r · bytes over the slowest link
//     of the ring at its bus bandwidth (cluster.Link.BusBandwidth), plus
//     2(r-1) link latencies;
//   - devices on h > 1 hosts, at most g per host: hierarchical, a ring
//     reduce-scatter and all-gather inside each host, 2(g-1)/g · bytes on
//     the slowest intra-host link, and between them an all-reduce of the
//     g shards across hosts, whose streams share each host's network
//     card: 2(h-1)/h · bytes over the slowest host-to-host link.
//
// It is 0 for fewer than two devices.
func AllReduceTime(c *cluster.Cluster, devs []int, bytes int64) float64 {
	return CollectiveTime(c, AllReduce, devs, bytes)
}

// CollectiveKind names a collective of the step.
type CollectiveKind string

const (
	// AllReduce sums a buffer across the devices; every device gets the
	// sum.
	AllReduce CollectiveKind = "all-reduce"
	// ReduceScatter sums a buffer across r devices; each gets 1/r of the
	// sum.
	ReduceScatter CollectiveKind = "reduce-scatter"
	// AllGather gives every device the concatenation of r shards of a
	// buffer, one from each.
	AllGather CollectiveKind = "all-gather"
)

// CollectiveTime is how long a collective of kind on a buffer of bytes
// over devs takes, in the ring model of AllReduceTime: a reduce-scatter
// and an all-gather are each one of the all-reduce's two phases, (r-1)/r
// of the bytes over the slowest link and r-1 latencies (hierarchically
// across hosts, as AllReduceTime), so an all-reduce takes exactly their
// sum.
func CollectiveTime(c *cluster.Cluster, kind CollectiveKind, devs []int, bytes int64) float64 {
	return collectiveTime(c, kind, devs, bytes, 1)
}

// GroupCollectives prices collectives over one group of devices
// (CollectiveTime), each kind and size once: a split model repeats a few
// sync sizes over every layer and micro-batch. Not safe for concurrent
// use.
type GroupCollectives struct {
	c     *cluster.Cluster
	group []int
	memo  map[groupCollective]float64
}

type groupCollective struct {
	kind  CollectiveKind
	bytes int64
}

// NewGroupCollectives prices collectives over group on cluster c.
func NewGroupCollectives(c *cluster.Cluster, group []int) *GroupCollectives {
	return &GroupCollectives{c: c, group: group, memo: map[groupCollective]float64{}}
}

// Time is CollectiveTime of a collective of kind on bytes over the group.
func (x *GroupCollectives) Time(kind CollectiveKind, bytes int64) float64 {
	k := groupCollective{kind, bytes}
	if t, ok := x.memo[k]; ok {
		return t
	}
	t := CollectiveTime(x.c, kind, x.group, bytes)
	x.memo[k] = t
	return t
}

// collectiveTime is CollectiveTime with the hosts' network cards shared
// by streams such collectives at once (the members of a tensor-parallel
// group, each reducing its shard with its peers in the other replicas).
func collectiveTime(c *cluster.Cluster, kind CollectiveKind, devs []int, bytes int64, streams int) float64 {
	f := 1.0
	if kind == AllReduce {
		f = 2
	}
	return f * ringPhaseTime(c, devs, bytes, streams)
}

// ringPhaseTime is the time of one phase (a reduce-scatter or an
// all-gather) of bytes over devs, with each host's network card shared
// by streams such phases: half an all-reduce.
func ringPhaseTime(c *cluster.Cluster, devs []int, bytes int64, streams int) float64 {
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
		return float64(r-1)/float64(r)*b/bw + float64(r-1)*lat
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
		t += float64(g-1)/float64(g)*b/bwIntra + float64(g-1)*latIntra
	}
	leaders := make([]int, len(hosts))
	for i, h := range hosts {
		leaders[i] = byHost[h][0]
	}
	bw, lat := ring(c, leaders)
	h := float64(len(hosts))
	return t + (h-1)/h*b*float64(max(streams, 1))/bw + (h-1)*lat
}

// ring is the slowest bus bandwidth (cluster.Link.BusBandwidth: the
// line rate less NCCL's protocol overhead) and the largest latency of the
// links of a ring through devs in the order given.
func ring(c *cluster.Cluster, devs []int) (bw, lat float64) {
	for i, d := range devs {
		l := c.Path(d, devs[(i+1)%len(devs)])
		if b := l.BusBandwidth(); bw == 0 || b < bw {
			bw = b
		}
		lat = max(lat, l.Latency)
	}
	return bw, lat
}

// Collective is one collective of the simulated step: a bucket of
// gradients all-reduced (DDP, ZeRO-1) or reduce-scattered (ZeRO-2), a
// bucket of updated parameters all-gathered (ZeRO-1 and 2), or under
// ZeRO-3 a module's weights all-gathered for a pass or its gradients
// reduce-scattered after one (fsdp.go).
type Collective struct {
	Kind CollectiveKind
	// Stage is the stage whose replicas take part; Devices the devices
	// that do (one per replica).
	Stage   int
	Devices []int
	// Bytes is the bucket's size: the gradients, or the parameters, it
	// holds (the whole buffer, not one device's shard).
	Bytes      int64
	Start, End float64
	// Tensor is the activation a tensor-parallel sync collects over its
	// group (Stage's first replica); -1 for the replicas' gradient and
	// parameter buckets.
	Tensor graph.TensorID
}
