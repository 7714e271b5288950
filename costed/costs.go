package costed

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
)

// Costs is the measured cost model of a costed graph: a cost.Model whose
// OpTime is the time the file gave for the op on a device type, +Inf for
// a type it gave none for. It also implements cost.TransferModel for
// edges with an explicit transfer time.
type Costs struct {
	file  string
	graph *graph.Graph
	// keyOf maps a cluster device type to the key the op times are
	// stored under: the lower-cased type name (v1) or the device kind
	// (dnn-partitioning).
	keyOf func(*cluster.DeviceType) string
	// keys are the lower-cased device type names the file gives times
	// for, spelled as the file first wrote them; times holds op i's
	// seconds on keys[k] at i*len(keys)+k, +Inf where it gave none.
	keys, spelled []string
	times         []float64
	// transfer is each tensor's explicit transfer time in seconds, or
	// NaN for the link model.
	transfer []float64
	// columns caches each device type's column in times (-1 for none):
	// OpTime is asked a million times for a handful of types.
	mu      sync.Mutex
	columns map[*cluster.DeviceType]int
}

// newCosts lays the times of f's ops out as one matrix.
func newCosts(f *File, g *graph.Graph, file string, keyOf func(*cluster.DeviceType) string, transfer []float64) *Costs {
	c := &Costs{file: file, graph: g, keyOf: keyOf, transfer: transfer, columns: map[*cluster.DeviceType]int{}}
	// The parser interns type names, so a name is usually one of a few
	// strings seen before: compare those before folding case.
	var seen []string
	var seenCol []int
	col := func(t string) int {
		for j, s := range seen {
			if s == t {
				return seenCol[j]
			}
		}
		k := slices.IndexFunc(c.keys, func(key string) bool { return strings.EqualFold(key, t) })
		if k < 0 {
			c.keys = append(c.keys, strings.ToLower(t))
			c.spelled = append(c.spelled, t)
			k = len(c.keys) - 1
		}
		if len(seen) < 64 {
			seen, seenCol = append(seen, t), append(seenCol, k)
		}
		return k
	}
	for i := range f.Ops {
		for _, d := range f.Ops[i].TimesMS {
			col(d.Type)
		}
	}
	nk := len(c.keys)
	c.times = make([]float64, len(f.Ops)*nk)
	for i := range c.times {
		c.times[i] = math.Inf(1)
	}
	for i := range f.Ops {
		for _, d := range f.Ops[i].TimesMS {
			c.times[i*nk+col(d.Type)] = d.MS / 1e3
		}
	}
	return c
}

// column is dt's column in times, or -1.
func (c *Costs) column(dt *cluster.DeviceType) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k, ok := c.columns[dt]; ok {
		return k
	}
	k := slices.Index(c.keys, c.keyOf(dt))
	c.columns[dt] = k
	return k
}

var (
	_ cost.Model         = (*Costs)(nil)
	_ cost.TransferModel = (*Costs)(nil)
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
	k := c.column(dt)
	if !ok || k < 0 {
		return math.Inf(1)
	}
	return c.times[i*len(c.keys)+k]
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
	var names []string
	for k, name := range c.spelled {
		if !math.IsInf(c.times[i*len(c.keys)+k], 1) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
