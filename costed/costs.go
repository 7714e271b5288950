package costed

import (
	"fmt"
	"math"
	"strings"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
)

// TransferModel is an optional extension of cost.Model for models that
// know some transfer times better than the cluster's link model.
// TransferTime returns the seconds tensor t takes from device from to
// device to; def is the link model's answer, returned when the model has
// nothing better.
type TransferModel interface {
	TransferTime(g *graph.Graph, t graph.TensorID, from, to *cluster.Device, def float64) float64
}

// Costs is the measured cost model of a costed graph: a cost.Model whose
// OpTime is the time the file gave for the op on a device type, +Inf for
// a type it gave none for. It also implements TransferModel for edges
// with an explicit transfer time.
type Costs struct {
	file  string
	graph *graph.Graph
	// keyOf maps a cluster device type to the key the op times are
	// stored under: the lower-cased type name (v1) or the device kind
	// (dnn-partitioning).
	keyOf func(*cluster.DeviceType) string
	// times holds each op's seconds by key; spelled lists the keys as
	// the file wrote them, for messages.
	times   []map[string]float64
	spelled [][]string
	// transfer is each tensor's explicit transfer time in seconds, or
	// NaN for the link model.
	transfer []float64
}

var (
	_ cost.Model    = (*Costs)(nil)
	_ TransferModel = (*Costs)(nil)
)

// opIndex maps an op of g to the graph the times were measured for. A
// pass that rebuilt the graph (train.Build copies a graph it has nothing
// to add to) keeps op names, so ops are matched by name.
func (c *Costs) opIndex(g *graph.Graph, op graph.OpID) (int, bool) {
	if g == c.graph {
		return int(op), true
	}
	id, ok := c.graph.OpByName(g.Ops[op].Name)
	return int(id), ok
}

// OpTime is op's measured time on device type dt in seconds, or +Inf when
// the file gave no time for that type (or does not know the op).
func (c *Costs) OpTime(g *graph.Graph, op graph.OpID, dt *cluster.DeviceType) float64 {
	i, ok := c.opIndex(g, op)
	if !ok {
		return math.Inf(1)
	}
	if t, ok := c.times[i][c.keyOf(dt)]; ok {
		return t
	}
	return math.Inf(1)
}

// TransferTime is the edge's explicit transfer time when the file gave
// one, else def. Tensors moved within one device take no time.
func (c *Costs) TransferTime(g *graph.Graph, t graph.TensorID, from, to *cluster.Device, def float64) float64 {
	if from == to {
		return def
	}
	i := int(t)
	if g != c.graph {
		id, ok := c.graph.TensorByName(g.Tensors[t].Name)
		if !ok {
			return def
		}
		i = int(id)
	}
	if s := c.transfer[i]; !math.IsNaN(s) {
		return s
	}
	return def
}

// CheckCluster returns an error naming the first op (in file order) that
// no device type of c can run: the file gave it times only for types the
// cluster lacks. Types the file names but the cluster lacks are otherwise
// ignored.
func (c *Costs) CheckCluster(g *graph.Graph, cl *cluster.Cluster) error {
	var types []*cluster.DeviceType
	for i := range cl.Devices {
		dt := cl.Devices[i].Type
		if !containsType(types, dt) {
			types = append(types, dt)
		}
	}
	for op := range g.Ops {
		runs := false
		for _, dt := range types {
			if !math.IsInf(c.OpTime(g, graph.OpID(op), dt), 1) {
				runs = true
				break
			}
		}
		if runs {
			continue
		}
		names := make([]string, len(types))
		for i, dt := range types {
			names[i] = dt.Name
			if k := c.keyOf(dt); k != strings.ToLower(dt.Name) {
				names[i] += " (" + k + ")"
			}
		}
		return fmt.Errorf("%s: op %q has no time for any device type of cluster %q (%s); it has times for %s: add a time for one of the cluster's types",
			c.file, g.Ops[op].Name, cl.Name, strings.Join(names, ", "), c.listKeys(g, graph.OpID(op)))
	}
	return nil
}

func containsType(types []*cluster.DeviceType, dt *cluster.DeviceType) bool {
	for _, t := range types {
		if t == dt {
			return true
		}
	}
	return false
}

// listKeys names the device types op has times for, sorted.
func (c *Costs) listKeys(g *graph.Graph, op graph.OpID) string {
	i, ok := c.opIndex(g, op)
	if !ok {
		return "none (the op is not in the file)"
	}
	return strings.Join(c.spelled[i], ", ")
}
