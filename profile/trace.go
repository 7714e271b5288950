package profile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/files"
)

// Trace formats Import reads.
const (
	SourceORT    = "onnxruntime"
	SourceChrome = "chrome-trace"
)

// traceEvent is the part of a Chrome trace event both formats share.
// ONNX Runtime's profiler writes Chrome-trace events too: a JSON array
// where each node run gives "<node>_fence_before", "<node>_kernel_time"
// and "<node>_fence_after" events of cat "Node", args.op_name the op type,
// dur in microseconds.
type traceEvent struct {
	Cat  string         `json:"cat"`
	Name string         `json:"name"`
	Ph   string         `json:"ph"`
	Dur  *float64       `json:"dur"`
	Args map[string]any `json:"args"`
}

// ImportResult is a profile made from a trace with what did not map.
type ImportResult struct {
	Profile *Profile
	// Events is how many timed node events the trace had; Matched how
	// many named an op of the graph.
	Events, Matched int
	// Unmeasured counts the graph's kernel-launching ops the trace has no
	// time for; they keep the model's estimate.
	Unmeasured int
}

// Import reads an ONNX Runtime profiling JSON or a Chrome trace (as
// torch.profiler's export_chrome_trace writes it) and maps its events to
// g's ops by node name, for device type dt.
//
// ONNX Runtime: events with cat "Node" and a name ending in
// "_kernel_time" time the node named by the rest. Chrome traces: complete
// events ("ph": "X") whose name is a node name, which is what
// torch.profiler.record_function(node_name) (cat "user_annotation", or
// "gpu_user_annotation" for the GPU side) records; other events (aten
// ops, kernels, runtime calls) are skipped, but annotations naming no op
// are reported in Unmatched. When the trace has GPU-side annotations
// ("gpu_user_annotation", the time the node's kernels ran on the device)
// only those count; the CPU-side ones then time kernel launches.
func Import(path string, g *graph.Graph, dt DeviceType) (*ImportResult, error) {
	data, err := files.Read(path, "trace")
	if err != nil {
		return nil, err
	}
	return ImportBytes(path, data, g, dt)
}

// ImportBytes is Import on a file's contents; name labels errors.
func ImportBytes(name string, data []byte, g *graph.Graph, dt DeviceType) (*ImportResult, error) {
	events, err := decodeEvents(data)
	if err != nil {
		return nil, fmt.Errorf("%s: not an ONNX Runtime profile or Chrome trace: %v", name, err)
	}
	source := SourceChrome
	gpuSide := false
	for _, e := range events {
		if e.Cat == "Node" && strings.HasSuffix(e.Name, "_kernel_time") {
			source = SourceORT
		}
		gpuSide = gpuSide || e.Cat == "gpu_user_annotation"
	}
	durs := map[string][]float64{}
	unmatched := map[string]bool{}
	res := &ImportResult{}
	for _, e := range events {
		if e.Dur == nil || (e.Ph != "" && e.Ph != "X") {
			continue
		}
		var node string
		switch source {
		case SourceORT:
			if e.Cat != "Node" || !strings.HasSuffix(e.Name, "_kernel_time") {
				continue
			}
			node = strings.TrimSuffix(e.Name, "_kernel_time")
		default:
			// With GPU-side annotations (the node's kernels on the
			// device's stream), the CPU-side ones time the launches only.
			if gpuSide && e.Cat == "user_annotation" {
				continue
			}
			node = e.Name
			if _, ok := g.OpByName(node); !ok {
				if e.Cat == "user_annotation" || e.Cat == "gpu_user_annotation" {
					unmatched[node] = true
					res.Events++
				}
				continue
			}
		}
		res.Events++
		if *e.Dur < 0 {
			return nil, fmt.Errorf("%s: event %q has a negative dur", name, e.Name)
		}
		id, ok := g.OpByName(node)
		if !ok {
			unmatched[node] = true
			continue
		}
		if err := checkTraceShape(g, id, e.Args["output_type_shape"]); err != nil {
			return nil, fmt.Errorf("%s: node %q: %v", name, node, err)
		}
		res.Matched++
		durs[node] = append(durs[node], *e.Dur/1e3) // µs -> ms
	}
	if res.Events == 0 {
		what := `no "cat": "Node" events named <node>_kernel_time`
		if source == SourceChrome {
			what = "no complete events named after a graph node (record_function(node_name) in PyTorch)"
		}
		return nil, fmt.Errorf("%s: the trace has %s", name, what)
	}
	p := &Profile{Format: FormatVersion, Source: source, Batch: g.Batch(), DeviceTypes: []DeviceType{dt}}
	for node, d := range durs {
		id, _ := g.OpByName(node)
		p.Ops = append(p.Ops, Measurement{
			Name: node, Key: OpKey(g, id), Type: g.Ops[id].Type, Shapes: Shapes(g, id), DeviceType: dt.Name, Threads: dt.Threads,
			MedianMS: round6(median(d)), P10MS: round6(quantile(d, 0.1)), P90MS: round6(quantile(d, 0.9)), Runs: len(d),
		})
	}
	for n := range unmatched {
		p.Unmatched = append(p.Unmatched, n)
	}
	for i := range g.Ops {
		if _, ok := durs[g.Ops[i].Name]; !ok && Family(g.Ops[i].Type) != FamilyView {
			res.Unmeasured++
		}
	}
	FillFeatures(p, g)
	p.Sort()
	res.Profile = p
	return res, nil
}

// decodeEvents accepts a bare event array (ONNX Runtime, and Chrome's
// array form) or an object with "traceEvents" (Chrome's object form).
func decodeEvents(data []byte) ([]traceEvent, error) {
	data = bytes.TrimLeft(data, " \t\r\n\ufeff")
	if len(data) == 0 {
		return nil, errors.New("the file is empty")
	}
	if data[0] == '[' {
		var ev []traceEvent
		err := json.Unmarshal(data, &ev)
		return ev, err
	}
	var obj struct {
		TraceEvents []traceEvent `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, err
	}
	if obj.TraceEvents == nil {
		return nil, errors.New(`no "traceEvents" array`)
	}
	return obj.TraceEvents, nil
}

func round6(v float64) float64 { return float64(int64(v*1e6+0.5)) / 1e6 }

// checkTraceShape compares the batch of the first output shape ONNX
// Runtime recorded for a node (args.output_type_shape: [{"float": [1,
// 64, 112, 112]}, ...]) with the graph op's. The profile labels each time with the graph's
// shapes, so a trace run at another batch than the model was bound to
// would silently price the wrong sizes. A trace without shapes passes.
func checkTraceShape(g *graph.Graph, id graph.OpID, recorded any) error {
	list, ok := recorded.([]any)
	if !ok || len(list) == 0 || len(g.Ops[id].Outputs) == 0 {
		return nil
	}
	first, ok := list[0].(map[string]any)
	if !ok || len(first) != 1 {
		return nil
	}
	var dims []int64
	for _, v := range first {
		raw, ok := v.([]any)
		if !ok {
			return nil
		}
		for _, d := range raw {
			f, ok := d.(float64)
			if !ok {
				return nil
			}
			dims = append(dims, int64(f))
		}
	}
	// Only the leading (batch) dimension: runtimes may store other
	// dimensions in their own layouts (ONNX Runtime's blocked NCHWc pads
	// channels).
	t := &g.Tensors[g.Ops[id].Outputs[0]]
	if !t.ShapeKnown || len(dims) != len(t.Shape) || len(dims) == 0 || dims[0] == t.Shape[0] {
		return nil
	}
	return fmt.Errorf("the trace ran it with output shape %v, the model as bound gives %v: the trace ran batch %d; bind the model's batch to it", dims, t.Shape, dims[0])
}
