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
	// From the start again: a file can be read twice (see parseV1).
	if _, err := fh.Seek(0, io.SeekStart); err != nil {
		return decodeV1(io.MultiReader(bytes.NewReader(head), fh), path)
	}
	return decodeV1(fh, path)
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
	f.index, f.ends = nil, nil // a million names: let them go before building
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
//   - an edge that names its tensor reads "<from>:<tensor>", an output of
//     from of its own of the edge's bytes (from's output_bytes when it
//     gives none), which every edge from from naming it reads;
//   - each op's device, if any, is its Device (a pin);
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
	return e.Tensor != "" || e.TransferMS != nil || e.Bytes != nil && *e.Bytes != f.Ops[from].OutputBytes
}

// namedTensor is a tensor an edge names: its op and name.
type namedTensor struct {
	from int32
	name string
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
	// The cost table reads only the ops' times: it is laid out on another
	// goroutine while the graph is built.
	costs := make(chan *Costs, 1)
	go func() { costs <- newCosts(f, nil, file, keyOf, nil) }()
	// Tensors are numbered as they always were (each op's output, then
	// its parameters; then the edges' own tensors in file order) and all
	// added first; then each op is added once with its complete lists,
	// carved from one array, instead of built up by append and copied.
	opOut := make([]graph.TensorID, n) // op i's output; its parameters are next
	own := make([]graph.TensorID, len(f.Edges))
	nIn, nOut := make([]int32, n), make([]int32, n)
	nConsumers := make([]int32, 0, 2*n)
	nTensors := 0
	for i := range f.Ops {
		opOut[i] = graph.TensorID(nTensors)
		nOut[i] = 1
		nTensors++
		nConsumers = append(nConsumers, 0)
		if f.Ops[i].ParamBytes > 0 {
			nIn[i]++
			nTensors++
			nConsumers = append(nConsumers, 1)
		}
	}
	// named maps each named tensor to its ID: every edge naming it reads
	// the one value (nil while no edge names one).
	var named map[namedTensor]graph.TensorID
	for i := range f.Edges {
		x := ends[i]
		nIn[x.to]++
		own[i] = -1
		e := &f.Edges[i]
		if e.Tensor != "" {
			if id, ok := named[namedTensor{x.from, e.Tensor}]; ok {
				own[i] = id
				nConsumers[id]++
				continue
			}
			if named == nil {
				named = map[namedTensor]graph.TensorID{}
			}
			named[namedTensor{x.from, e.Tensor}] = graph.TensorID(nTensors)
		}
		if ownTensor(f, e, x.from) {
			own[i] = graph.TensorID(nTensors)
			nOut[x.from]++
			nTensors++
			nConsumers = append(nConsumers, 1)
		} else {
			nConsumers[opOut[x.from]]++
		}
	}
	// Op names are unique (check saw to it). Unless an op is named like
	// a tensor name the build makes ("<op>/params", "<from>-><to>") or an
	// edge names a tensor ("<from>:<tensor>", which may meet another's),
	// so are the tensor names, and the graph is built without its name
	// maps: they are made on first use, if any.
	unique := named == nil
	for i := range f.Ops {
		if !unique {
			break
		}
		if nm := f.Ops[i].Name; strings.HasSuffix(nm, "/params") || strings.Contains(nm, "->") {
			unique = false
			break
		}
	}
	g := &graph.Graph{Name: name, Ops: make([]graph.Op, 0, n), Tensors: make([]graph.Tensor, 0, nTensors)}
	if !unique {
		g = graph.New(name, n, nTensors)
	}
	shapes := make([]int64, nTensors)
	consumers := make([]graph.OpID, len(f.Edges)+nTensors)
	transfer := make([]float64, 0, nTensors)
	addTensor := func(name string, bytes int64, kind graph.TensorKind, transferMS *float64) {
		id := len(g.Tensors)
		shapes[id] = bytes
		t := graph.Tensor{Name: name, DType: graph.Uint8, Shape: shapes[id : id+1 : id+1], ShapeKnown: true, Kind: kind}
		if unique {
			g.AddTensorUnique(t)
		} else {
			_, err := g.AddTensor(t)
			for k := 2; err != nil; k++ { // an op may be named like another's tensor
				t.Name = fmt.Sprintf("%s#%d", name, k)
				_, err = g.AddTensor(t)
			}
		}
		// Room for the consumers AddOp appends, all from one array.
		g.Tensors[id].Consumers = consumers[:0:nConsumers[id]]
		consumers = consumers[nConsumers[id]:]
		s := math.NaN()
		if transferMS != nil {
			s = *transferMS / 1e3
		}
		transfer = append(transfer, s)
	}
	for i := range f.Ops {
		fo := &f.Ops[i]
		addTensor(fo.Name, fo.OutputBytes, graph.Activation, nil)
		if fo.ParamBytes > 0 {
			addTensor(fo.Name+"/params", fo.ParamBytes, graph.Parameter, nil)
		}
	}
	hasOut := make([]bool, n)
	for i := range f.Edges {
		e := &f.Edges[i]
		hasOut[ends[i].from] = true
		if own[i] < 0 || int(own[i]) < len(g.Tensors) { // a named tensor already added
			continue
		}
		bytes := f.Ops[ends[i].from].OutputBytes
		if e.Bytes != nil {
			bytes = *e.Bytes
		}
		name := e.From + "->" + e.To
		if e.Tensor != "" {
			name = e.From + ":" + e.Tensor
		}
		addTensor(name, bytes, graph.Activation, e.TransferMS)
	}
	// Each op's inputs and outputs, in the order they were always listed:
	// its parameters, then its edges in; its output, then its own edges out.
	// Op i's are one run of ids, its inputs then its outputs, the counts
	// above exact; nIn[i] and nOut[i] become the next free places of the
	// two, so that once all are placed op i's inputs end at nIn[i], where
	// its outputs start, and its outputs end at nOut[i], where op i+1's
	// inputs start.
	ids := make([]graph.TensorID, len(f.Edges)+nTensors)
	l := int32(0)
	for i := range f.Ops {
		in, out := nIn[i], nOut[i]
		nIn[i], nOut[i] = l, l+in
		l += in + out
		ids[nOut[i]] = opOut[i]
		nOut[i]++
		if f.Ops[i].ParamBytes > 0 {
			ids[nIn[i]] = opOut[i] + 1
			nIn[i]++
		}
	}
	// isOut marks the named tensors already listed as outputs: a named
	// tensor is one output of its op however many edges read it.
	var isOut []bool
	if named != nil {
		isOut = make([]bool, nTensors)
	}
	for i := range f.Edges {
		from, to := ends[i].from, ends[i].to
		t := own[i]
		if t < 0 {
			t = opOut[from]
		} else if isOut == nil || !isOut[t] {
			ids[nOut[from]] = t
			nOut[from]++
			if isOut != nil {
				isOut[t] = true
			}
		}
		ids[nIn[to]] = t
		nIn[to]++
	}
	for i := range f.Ops {
		fo := &f.Ops[i]
		phase, _ := parsePhase(fo.Phase)
		start := int32(0)
		if i > 0 {
			start = nOut[i-1]
		}
		op := graph.Op{Name: fo.Name, Type: fo.Type, Colocate: fo.Colocate, Device: fo.Device, Phase: phase,
			Work: graph.Work{TempBytes: fo.TempBytes}, Inputs: ids[start:nIn[i]:nIn[i]], Outputs: ids[nIn[i]:nOut[i]:nOut[i]]}
		if _, err := g.AddOpUnique(op); err != nil {
			return nil, errorf(file, fmt.Sprintf("ops[%d]", i), "%v", err)
		}
		if !hasOut[i] {
			g.Outputs = append(g.Outputs, opOut[i])
		}
	}
	_, err := g.TopoOrder(g.BuildAdjacency())
	c := <-costs
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	c.graph, c.transfer = g, transfer
	return &Model{Graph: g, Costs: c}, nil
}
