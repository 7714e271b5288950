// Package cost estimates what running an operator graph costs on a
// cluster: each op's time on each device type, the time to move a tensor
// between two devices, and each op's memory.
//
// The estimates come from a Model (the analytic Roofline here, measured
// profiles later) and are computed once into a Table, which placers and the
// simulator index by op and device.
package cost

import (
	"fmt"
	"math"
	"slices"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
)

// Model estimates the time of one op on one device type, in seconds.
// +Inf means the op cannot run on that device type (a measured profile
// with no time for it); placers never put it there.
type Model interface {
	OpTime(g *graph.Graph, op graph.OpID, dt *cluster.DeviceType) float64
}

// TransferModel is implemented by cost models that know some transfers'
// times better than the link model (a profile that measured them). def is
// the link model's time; returning it keeps the default.
type TransferModel interface {
	TransferTime(g *graph.Graph, t graph.TensorID, from, to *cluster.Device, def float64) float64
}

// Advisor is implemented by cost models that can tell, for a graph, a
// cluster and the step's batch (0 when unknown), where their estimates
// may not be what the user expects (a profile measured at another batch,
// or only on device types the cluster lacks). The driver records the
// advice among the plan's warnings.
type Advisor interface {
	Advice(g *graph.Graph, c *cluster.Cluster, batch int64) []string
}

// Table holds every op's time on every device type of a cluster and the
// memory each op needs, so placers and the simulator never call the model
// in their inner loops.
type Table struct {
	Graph   *graph.Graph
	Cluster *cluster.Cluster
	// types lists the distinct device types; typeOf maps a device to its
	// index there.
	types  []*cluster.DeviceType
	typeOf []int
	// time is op-major: time[op*len(types)+t].
	time []float64
	// shape is op-major as time is, when the model is a Shaper (else
	// nil): Compute, Ramp and Memory of Shape, as float32 to halve the
	// table of a million-op graph.
	shape [][3]float32
	// fixed is per op Shape.Fixed, when shape is set.
	fixed []float32
	// outBytes and tempBytes are per op; resident lists each op's
	// parameter and constant inputs.
	outBytes  []int64
	tempBytes []int64
	transfer  TransferModel
	// allowed, when set, is each op's devices under the user's rules
	// (bits over the devices of the cluster WithAllowed was given);
	// devBit maps a device of this table's cluster to its bit.
	allowed *graph.DeviceSets
	devBit  []int
	// distinct lists allowed's distinct sets (Classes splits by them).
	distinct [][]uint64
}

// NewTable evaluates model for every op and device type of c.
func NewTable(g *graph.Graph, c *cluster.Cluster, model Model) *Table {
	t := &Table{Graph: g, Cluster: c, typeOf: make([]int, len(c.Devices))}
	t.transfer, _ = model.(TransferModel)
	index := map[*cluster.DeviceType]int{}
	for i := range c.Devices {
		dt := c.Devices[i].Type
		k, ok := index[dt]
		if !ok {
			k = len(t.types)
			index[dt] = k
			t.types = append(t.types, dt)
		}
		t.typeOf[i] = k
	}
	n, nt := len(g.Ops), len(t.types)
	t.time = make([]float64, n*nt)
	t.outBytes = make([]int64, n)
	t.tempBytes = make([]int64, n)
	shaper, _ := model.(Shaper)
	if shaper != nil {
		t.shape = make([][3]float32, n*nt)
		t.fixed = make([]float32, n)
		fixedT := FixedTensors(g)
		fixed := func(id graph.TensorID) bool { return fixedT[id] }
		for i := range g.Ops {
			if total, f := MovedBytes(g, graph.OpID(i), fixed); total > 0 {
				t.fixed[i] = float32(float64(f) / float64(total))
			}
		}
	}
	for i := range g.Ops {
		op := graph.OpID(i)
		for k, dt := range t.types {
			t.time[i*nt+k] = model.OpTime(g, op, dt)
			if shaper != nil {
				s := shaper.Shape(g, op, dt)
				t.shape[i*nt+k] = [3]float32{float32(s.Compute), float32(s.Ramp), float32(s.Memory)}
				if s.Fixed > 0 {
					t.fixed[i] = float32(s.Fixed)
				}
			}
		}
		for _, o := range g.Ops[i].Outputs {
			t.outBytes[i] += g.Tensors[o].Bytes()
		}
		t.tempBytes[i] = g.Ops[i].Work.TempBytes
	}
	return t
}

// OpTime is op's time in seconds on device dev.
func (t *Table) OpTime(op graph.OpID, dev int) float64 {
	return t.time[int(op)*len(t.types)+t.typeOf[dev]]
}

// CanRun reports whether op may run on device dev: its device type has
// a time for it, and the user's rules (WithAllowed) let it run there.
func (t *Table) CanRun(op graph.OpID, dev int) bool {
	if t.allowed != nil && !t.allowed.Has(op, t.devBit[dev]) {
		return false
	}
	return !math.IsInf(t.OpTime(op, dev), 1)
}

// WithAllowed is the table with each op limited to the devices of sets
// (bit d for device d of t's cluster), which CanRun then reports: the
// devices the user's rules leave an op. Op times are unchanged, so an
// estimate can still price an op where it may not go.
func (t *Table) WithAllowed(sets *graph.DeviceSets) *Table {
	r := *t
	r.allowed = sets
	r.devBit = make([]int, len(t.typeOf))
	for d := range r.devBit {
		r.devBit[d] = d
	}
	r.distinct, _ = sets.Distinct()
	return &r
}

// WithFree returns a copy of t in which the ops marked in free take no
// time on the devices that can run them (an inference runtime computes
// them when it loads the model: graph.LoadTimeOps).
func (t *Table) WithFree(free []bool) *Table {
	r := *t
	r.time = slices.Clone(t.time)
	nt := len(t.types)
	for i, f := range free {
		if !f {
			continue
		}
		for k := range nt {
			if v := r.time[i*nt+k]; v > 0 && !math.IsInf(v, 1) {
				r.time[i*nt+k] = 0
			}
		}
	}
	return &r
}

// Restricted reports whether the user's rules limit some op to part of
// the cluster.
func (t *Table) Restricted() bool { return t.allowed != nil }

// Classes are the cluster's classes of interchangeable devices
// (cluster.Classes: one type, one memory size), each split further so
// that the user's rules allow every op the same devices of a class.
func (t *Table) Classes() [][]int {
	classes := t.Cluster.Classes()
	if t.allowed == nil {
		return classes
	}
	// A device's signature is the distinct allowed sets that hold it.
	sig := func(d int) string {
		b := make([]byte, len(t.distinct))
		for i, row := range t.distinct {
			bit := t.devBit[d]
			if row[bit/64]&(1<<(bit%64)) != 0 {
				b[i] = 1
			}
		}
		return string(b)
	}
	var out [][]int
	for _, cl := range classes {
		var keys []string
		var split [][]int
		for _, d := range cl {
			k := slices.Index(keys, sig(d))
			if k < 0 {
				keys, split = append(keys, sig(d)), append(split, nil)
				k = len(keys) - 1
			}
			split[k] = append(split[k], d)
		}
		out = append(out, split...)
	}
	return out
}

// FastestTime is op's time on the device type that runs it fastest.
func (t *Table) FastestTime(op graph.OpID) float64 {
	row := t.time[int(op)*len(t.types) : (int(op)+1)*len(t.types)]
	best := row[0]
	for _, v := range row[1:] {
		best = min(best, v)
	}
	return best
}

// OutputBytes is the memory op's outputs take.
func (t *Table) OutputBytes(op graph.OpID) int64 { return t.outBytes[op] }

// TempBytes is the scratch memory op needs while it runs.
func (t *Table) TempBytes(op graph.OpID) int64 { return t.tempBytes[op] }

// TensorTransfer is the time to move tensor tid from device a to device
// b: the model's own figure when it has one, else the link model's.
func (t *Table) TensorTransfer(tid graph.TensorID, a, b int) float64 {
	def := t.Cluster.TransferTime(a, b, t.Graph.Tensors[tid].Bytes())
	if t.transfer == nil || a == b {
		return def
	}
	return t.transfer.TransferTime(t.Graph, tid, &t.Cluster.Devices[a], &t.Cluster.Devices[b], def)
}

// Transfer is the time to move bytes from device a to device b by the
// link model; placers use it to probe sizes without a tensor.
func (t *Table) Transfer(a, b int, bytes int64) float64 {
	return t.Cluster.TransferTime(a, b, bytes)
}

// NumDevices is the number of devices in the cluster.
func (t *Table) NumDevices() int { return len(t.typeOf) }

// SameType reports whether devices a and b are of one device type, so a
// placer may treat them as interchangeable for compute.
func (t *Table) SameType(a, b int) bool { return t.typeOf[a] == t.typeOf[b] }

// ResidentBytes is the memory of the parameter and constant tensors op
// reads; they stay on a device for the whole step once any op there reads
// them.
func ResidentBytes(g *graph.Graph, op graph.OpID) int64 {
	var s int64
	for _, in := range g.Ops[op].Inputs {
		if t := &g.Tensors[in]; t.Kind.IsResident() {
			s += t.Bytes()
		}
	}
	return s
}

// WorkingSet is the memory op needs on its device at the moment it runs:
// its resident inputs, its activation inputs, its outputs and its scratch.
func (t *Table) WorkingSet(op graph.OpID) int64 {
	var s int64
	for _, in := range t.Graph.Ops[op].Inputs {
		s += t.Graph.Tensors[in].Bytes()
	}
	return s + t.outBytes[op] + t.tempBytes[op]
}

// String describes the table's size, for logs.
func (t *Table) String() string {
	return fmt.Sprintf("cost table: %d ops x %d device types", len(t.Graph.Ops), len(t.types))
}

// Restrict is the table of the same graph on c, a cluster whose devices
// all have device types of t's cluster (cluster.Sub of it): it shares t's
// op times instead of evaluating the model again.
func (t *Table) Restrict(c *cluster.Cluster) *Table {
	r := *t
	r.Cluster = c
	r.typeOf = make([]int, len(c.Devices))
	for i := range c.Devices {
		r.typeOf[i] = slices.Index(t.types, c.Devices[i].Type)
	}
	if t.allowed != nil {
		// Devices keep their bits: c's devices are t's cluster's, by name.
		r.devBit = make([]int, len(c.Devices))
		for i := range c.Devices {
			d, _ := t.Cluster.DeviceIndex(c.Devices[i].Name)
			r.devBit[i] = t.devBit[d]
		}
	}
	return &r
}
