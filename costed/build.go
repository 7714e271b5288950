package costed

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
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

// Load reads a costed graph file of either format, by content.
func Load(path string) (*Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot read the graph: %w", path, err)
	}
	return Decode(data, path)
}

// Decode reads a costed graph of either format from data; file names it
// in errors and gives the graph its default name.
func Decode(data []byte, file string) (*Model, error) {
	head := data[:min(len(data), 4096)]
	if !sniffV1(head) && sniffDNN(head) {
		return decodeDNN(data, file)
	}
	f, err := Parse(data, file)
	if err != nil {
		return nil, err
	}
	return Build(f, file)
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
	if err := f.Validate(file); err != nil {
		return nil, err
	}
	m, err := build(f, file, func(dt *cluster.DeviceType) string { return strings.ToLower(dt.Name) })
	if err != nil {
		return nil, err
	}
	m.Format = "costed"
	return m, nil
}

// build makes the graph and costs of a validated File whose time keys are
// looked up, lower-cased, under keyOf of a device type.
func build(f *File, file string, keyOf func(*cluster.DeviceType) string) (*Model, error) {
	name := f.Name
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	}
	n := len(f.Ops)
	g := graph.New(name, n, 2*n+len(f.Edges))
	index := make(map[string]int, n)
	for i := range f.Ops {
		index[f.Ops[i].Name] = i
	}
	var transfer []float64
	addTensor := func(name string, bytes int64, kind graph.TensorKind, transferMS *float64) graph.TensorID {
		base := name
		for k := 2; ; k++ { // an op may be named like another's tensor
			if _, taken := g.TensorByName(name); !taken {
				break
			}
			name = fmt.Sprintf("%s#%d", base, k)
		}
		id, err := g.AddTensor(graph.Tensor{Name: name, DType: graph.Uint8, Shape: []int64{bytes}, ShapeKnown: true, Kind: kind})
		if err != nil {
			panic(err) // names were made unique above
		}
		s := math.NaN()
		if transferMS != nil {
			s = *transferMS / 1e3
		}
		transfer = append(transfer, s)
		return id
	}
	ops := make([]graph.Op, n)
	costs := &Costs{file: file, graph: g, keyOf: keyOf, times: make([]map[string]float64, n), spelled: make([][]string, n)}
	for i := range f.Ops {
		fo := &f.Ops[i]
		phase, _ := parsePhase(fo.Phase)
		ops[i] = graph.Op{Name: fo.Name, Type: fo.Type, Colocate: fo.Colocate, Phase: phase,
			Work: graph.Work{TempBytes: fo.TempBytes}}
		ops[i].Outputs = []graph.TensorID{addTensor(fo.Name, fo.OutputBytes, graph.Activation, nil)}
		if fo.ParamBytes > 0 {
			ops[i].Inputs = []graph.TensorID{addTensor(fo.Name+"/params", fo.ParamBytes, graph.Parameter, nil)}
		}
		times := make(map[string]float64, len(fo.TimesMS))
		for k, ms := range fo.TimesMS {
			times[strings.ToLower(k)] = ms / 1e3
		}
		costs.times[i] = times
		costs.spelled[i] = sortedKeys(fo.TimesMS)
	}
	hasOut := make([]bool, n)
	for i := range f.Edges {
		e := &f.Edges[i]
		from, to := index[e.From], index[e.To]
		hasOut[from] = true
		if e.TransferMS == nil && (e.Bytes == nil || *e.Bytes == f.Ops[from].OutputBytes) {
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
	costs.transfer = transfer
	if _, err := g.TopoOrder(g.BuildAdjacency()); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return &Model{Graph: g, Costs: costs}, nil
}

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
