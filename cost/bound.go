package cost

import "github.com/opplace/opplace/graph"

// Bound is a lower bound on the step time of any placement, in seconds.
type Bound struct {
	// CriticalPath is the longest path through the graph with every op on
	// the device type that runs it fastest and communication free.
	CriticalPath float64
	// Throughput is the total work spread perfectly over every device:
	// the sum of each op's fastest time divided by the cluster's combined
	// speed in fastest-device units.
	Throughput float64
}

// Seconds is the bound itself: the larger of its two parts.
func (b Bound) Seconds() float64 { return max(b.CriticalPath, b.Throughput) }

// LowerBound computes the bound over a topological order of the graph.
//
// For the throughput part each device d is credited with speed
// r_d = max over ops of fastest(op)/time(op, d): no op runs on d faster
// than that relative to its fastest device, so d completes at most
// T × r_d fastest-seconds of work in time T, and the whole cluster at most
// T × Σ r_d. On a homogeneous cluster this is the familiar work / devices.
func LowerBound(t *Table, adj *graph.Adjacency, order []graph.OpID) Bound {
	n := len(t.Graph.Ops)
	finish := make([]float64, n)
	var b Bound
	var work float64
	for _, op := range order {
		var start float64
		for _, p := range adj.Preds(op) {
			start = max(start, finish[p])
		}
		f := t.FastestTime(op)
		finish[op] = start + f
		b.CriticalPath = max(b.CriticalPath, finish[op])
		work += f
	}
	// Relative speed per device type, then summed over the devices.
	nt := len(t.types)
	rate := make([]float64, nt)
	for op := 0; op < n; op++ {
		fast := t.FastestTime(graph.OpID(op))
		for k := 0; k < nt; k++ {
			if td := t.time[op*nt+k]; td > 0 {
				rate[k] = max(rate[k], fast/td)
			}
		}
	}
	var speed float64
	for d := 0; d < t.NumDevices(); d++ {
		r := rate[t.typeOf[d]]
		if r == 0 {
			r = 1 // no op takes time anywhere: the device is as fast as any
		}
		speed += r
	}
	b.Throughput = work / speed
	return b
}
