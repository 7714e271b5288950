package costed

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
)

// Model is an imported costed graph.
type Model struct {
	Graph *graph.Graph
	// Format is "costed" or "dnn-partitioning".
	Format string
	Costs  *Costs
	// Warnings are assumptions the import made.
	Warnings []string
}

// Load reads a costed graph file of either format, by content. A v1 file
// is decoded as it is read, never held whole in memory.
func Load(path string) (*Model, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot read the graph: %w", path, err)
	}
	defer fh.Close()
	head := make([]byte, 4096)
	n, err := io.ReadFull(fh, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, fmt.Errorf("%s: cannot read the graph: %w", path, err)
	}
	head = head[:n]
	if !sniffV1(head) && sniffDNN(head) {
		rest, err := io.ReadAll(fh)
		if err != nil {
			return nil, fmt.Errorf("%s: cannot read the graph: %w", path, err)
		}
		return decodeDNN(append(head, rest...), path)
	}
	return decodeV1(io.MultiReader(bytes.NewReader(head), fh), path)
}

// Decode reads a costed graph of either format from data; file names it
// in errors and gives the graph its default name.
func Decode(data []byte, file string) (*Model, error) {
	head := data[:min(len(data), 4096)]
	if !sniffV1(head) && sniffDNN(head) {
		return decodeDNN(data, file)
	}
	return decodeV1(bytes.NewReader(data), file)
}

// decodeV1 reads, checks and builds a v1 document in one pass over r.
func decodeV1(r io.Reader, file string) (*Model, error) {
	f, err := parseV1(r, file)
	if err != nil {
		return nil, err
	}
	e, err := f.check(file)
	if err != nil {
		return nil, err
	}
	return buildV1(f, e, file)
}

// Build turns a checked File into a graph and its measured costs; file
// names it in errors. The graph:
//
//   - each op is one graph.Op (Type, Phase and Colocate as given,
//     Work.TempBytes = temp_bytes) with one output tensor named like the
//     op, of output_bytes;
//   - param_bytes become one parameter tensor "<op>/params" the op reads;
//   - an edge whose bytes are absent or equal the producer's output_bytes,
//     and which has no transfer_ms, makes the consumer read the producer's
//     output tensor: one value sent once to each consuming device;
//   - any other edge gets a tensor of its own, "<from>-><to>", of the
//     edge's bytes, written by from and read by to (a separate output of
//     from, held in addition to output_bytes);
//   - the output tensors of ops no edge leaves are the graph's outputs.
//
// Tensors are uint8 vectors, so their sizes are exact byte counts. A cycle
// is a *graph.CycleError, wrapped with the file name.
func Build(f *File, file string) (*Model, error) {
	e, err := f.check(file)
	if err != nil {
		return nil, err
	}
	return buildV1(f, e, file)
}

func buildV1(f *File, e []ends, file string) (*Model, error) {
	m, err := build(f, e, file, func(dt *cluster.DeviceType) string { return strings.ToLower(dt.Name) })
	if err != nil {
		return nil, err
	}
	m.Format = "costed"
	return m, nil
}

// ownTensor reports whether an edge carries a tensor of its own rather
// than its source's output.
func ownTensor(f *File, e *Edge, from int32) bool {
	return e.TransferMS != nil || e.Bytes != nil && *e.Bytes != f.Ops[from].OutputBytes
}

// build makes the graph and costs of a checked File whose edges go
// between ends; time keys are looked up, lower-cased, under keyOf of a
// device type.
func build(f *File, ends []ends, file string, keyOf func(*cluster.DeviceType) string) (*Model, error) {
	name := f.Name
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	}
	n := len(f.Ops)
	// Count each op's inputs and outputs and the tensors first, so that
	// their lists are carved from one array each instead of grown by
	// append a million times.
	nIn, nOut := make([]int32, n), make([]int32, n)
	nTensors := n
	for i := range f.Ops {
		nOut[i] = 1
		if f.Ops[i].ParamBytes > 0 {
			nIn[i]++
			nTensors++
		}
	}
	for i := range f.Edges {
		x := ends[i]
		nIn[x.to]++
		if ownTensor(f, &f.Edges[i], x.from) {
			nOut[x.from]++
			nTensors++
		}
	}
	g := graph.New(name, n, nTensors)
	ids := make([]graph.TensorID, 0, n+nTensors+len(f.Edges))
	shapes := make([]int64, 0, nTensors)
	transfer := make([]float64, 0, nTensors)
	addTensor := func(name string, bytes int64, kind graph.TensorKind, transferMS *float64) graph.TensorID {
		shapes = append(shapes, bytes)
		t := graph.Tensor{Name: name, DType: graph.Uint8, Shape: shapes[len(shapes)-1 : len(shapes) : len(shapes)], ShapeKnown: true, Kind: kind}
		id, err := g.AddTensor(t)
		for k := 2; err != nil; k++ { // an op may be named like another's tensor
			t.Name = fmt.Sprintf("%s#%d", name, k)
			id, err = g.AddTensor(t)
		}
		s := math.NaN()
		if transferMS != nil {
			s = *transferMS / 1e3
		}
		transfer = append(transfer, s)
		return id
	}
	list := func(k int32) []graph.TensorID {
		l := len(ids)
		ids = ids[:l+int(k)]
		return ids[l : l : l+int(k)]
	}
	ops := make([]graph.Op, n)
	for i := range f.Ops {
		fo := &f.Ops[i]
		phase, _ := parsePhase(fo.Phase)
		ops[i] = graph.Op{Name: fo.Name, Type: fo.Type, Colocate: fo.Colocate, Phase: phase,
			Work: graph.Work{TempBytes: fo.TempBytes}, Inputs: list(nIn[i]), Outputs: list(nOut[i])}
		ops[i].Outputs = append(ops[i].Outputs, addTensor(fo.Name, fo.OutputBytes, graph.Activation, nil))
		if fo.ParamBytes > 0 {
			ops[i].Inputs = append(ops[i].Inputs, addTensor(fo.Name+"/params", fo.ParamBytes, graph.Parameter, nil))
		}
	}
	hasOut := make([]bool, n)
	for i := range f.Edges {
		e := &f.Edges[i]
		from, to := ends[i].from, ends[i].to
		hasOut[from] = true
		if !ownTensor(f, e, from) {
			ops[to].Inputs = append(ops[to].Inputs, ops[from].Outputs[0])
			continue
		}
		bytes := f.Ops[from].OutputBytes
		if e.Bytes != nil {
			bytes = *e.Bytes
		}
		t := addTensor(e.From+"->"+e.To, bytes, graph.Activation, e.TransferMS)
		ops[from].Outputs = append(ops[from].Outputs, t)
		ops[to].Inputs = append(ops[to].Inputs, t)
	}
	for i := range ops {
		if _, err := g.AddOp(ops[i]); err != nil {
			return nil, errorf(file, fmt.Sprintf("ops[%d]", i), "%v", err)
		}
		if !hasOut[i] {
			g.Outputs = append(g.Outputs, ops[i].Outputs[0])
		}
	}
	if _, err := g.TopoOrder(g.BuildAdjacency()); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return &Model{Graph: g, Costs: newCosts(f, g, file, keyOf, transfer)}, nil
}
