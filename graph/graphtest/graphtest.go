// Package graphtest builds small operator graphs and clusters with exact,
// hand-checkable costs for tests of placers, partitioners and the
// simulator.
package graphtest

import (
	"fmt"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
)

// Builder adds ops by name; each op has one output tensor named like the
// op. Tensors are uint8 vectors so a size in bytes is its element count.
type Builder struct {
	G *graph.Graph
}

// New starts an empty graph.
func New(name string) *Builder { return &Builder{G: graph.New(name, 0, 0)} }

func (b *Builder) tensor(name string, bytes int64, kind graph.TensorKind) graph.TensorID {
	id, err := b.G.AddTensor(graph.Tensor{Name: name, DType: graph.Uint8, Shape: []int64{bytes}, ShapeKnown: true, Kind: kind})
	if err != nil {
		panic(err) // a test's own graph is wrong
	}
	return id
}

// Input adds a graph input of the given size.
func (b *Builder) Input(name string, bytes int64) *Builder {
	b.G.Inputs = append(b.G.Inputs, b.tensor(name, bytes, graph.Input))
	return b
}

// Param adds a parameter of the given size.
func (b *Builder) Param(name string, bytes int64) *Builder {
	b.tensor(name, bytes, graph.Parameter)
	return b
}

// Op adds an op doing flops FLOPs whose single output has outBytes bytes,
// reading the named tensors (op names, inputs or parameters).
func (b *Builder) Op(name string, flops, outBytes int64, inputs ...string) *Builder {
	op := graph.Op{Name: name, Type: "Test", Work: graph.Work{FLOPs: flops}}
	for _, in := range inputs {
		id, ok := b.G.TensorByName(in)
		if !ok {
			panic(fmt.Sprintf("graphtest: op %q reads unknown tensor %q", name, in))
		}
		op.Inputs = append(op.Inputs, id)
	}
	op.Outputs = []graph.TensorID{b.tensor(name, outBytes, graph.Activation)}
	if _, err := b.G.AddOp(op); err != nil {
		panic(err)
	}
	return b
}

// Output marks the named tensors as graph outputs.
func (b *Builder) Output(names ...string) *Builder {
	for _, n := range names {
		id, ok := b.G.TensorByName(n)
		if !ok {
			panic("graphtest: unknown output " + n)
		}
		b.G.Outputs = append(b.G.Outputs, id)
	}
	return b
}

// Device describes one device of a test cluster.
type Device struct {
	// FLOPS is the device's speed; memory traffic and launches are free.
	FLOPS  float64
	Memory int64
}

// Cluster makes a one-host cluster whose devices compute at the given
// speeds and whose links move bandwidth bytes per second after latency
// seconds. With Roofline{1, 1} an op of F FLOPs takes exactly F/FLOPS.
func Cluster(bandwidth, latency float64, devs ...Device) *cluster.Cluster {
	c := &cluster.Cluster{
		Name:  "test",
		Hosts: []cluster.Host{{Name: "h0", Intra: cluster.Link{Kind: "test", Bandwidth: bandwidth, Latency: latency}}},
	}
	types := map[float64]*cluster.DeviceType{}
	for i, d := range devs {
		dt := types[d.FLOPS]
		if dt == nil {
			dt = &cluster.DeviceType{
				Name:            fmt.Sprintf("dev%g", d.FLOPS),
				PeakFLOPS:       map[graph.DType]float64{graph.Float32: d.FLOPS},
				MemoryBandwidth: 1e30,
			}
			types[d.FLOPS] = dt
		}
		c.Devices = append(c.Devices, cluster.Device{Name: fmt.Sprintf("d%d", i), Type: dt, Memory: d.Memory})
	}
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return c
}
