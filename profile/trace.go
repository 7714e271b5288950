package profile

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/files"
	"github.com/opplace/opplace/train"
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
	Ts   *float64       `json:"ts"`
	Pid  any            `json:"pid"`
	Tid  any            `json:"tid"`
	Args map[string]any `json:"args"`
}

// ImportResult is a profile made from a trace with what did not map.
type ImportResult struct {
	Profile *Profile
	// Events is how many timed node events the trace had; Matched how
	// many mapped to ops of the graph.
	Events, Matched int
	// Unmeasured counts the graph's kernel-launching ops the trace has no
	// time for; they keep the model's estimate. Ops ONNX Runtime folds
	// into constants when the session starts (shape arithmetic, ops of
	// weights only) do not count.
	Unmeasured int
	// Runs is how many times the trace ran the model (the most events of
	// one kernel); the times below are per run, averaged over them.
	Runs int
	// TraceMS is the kernel time of the trace; MatchedMS the part mapped
	// to graph ops, MatchedShare = MatchedMS / TraceMS; LayoutMS the time
	// of layout kernels (ReorderInput/ReorderOutput and inserted
	// transposes), matched or not, which is part of TraceMS.
	TraceMS, MatchedMS, MatchedShare, LayoutMS float64
	// RunMS is the median whole-model run the trace recorded (ONNX
	// Runtime's model_run events), 0 when it has none.
	RunMS float64
	// Shares is each op's time per run, in the graph's op order; with
	// the unmatched kernels' time it sums to TraceMS.
	Shares []OpShare
	// Unmapped lists the kernels that mapped to no op, slowest first.
	Unmapped []KernelTime
	// Warnings say why the profile may miss much of the trace.
	Warnings []string
	// Graph, for a training step's trace, is the training step (forward,
	// backward and update ops, train.Build with Optimizer) the profile's
	// measurements name; nil for other traces, which name the model's ops.
	Graph     *graph.Graph
	Optimizer string
	// Phases splits a training trace's GPU time into forward, backward
	// and optimizer, per run.
	Phases []PhaseTime
	// GPU is whether the times are GPU kernels' (a Kineto trace with
	// the CUDA activity) rather than CPU-side aten ops'.
	GPU bool
}

// TimeKind names what a trace's times are: GPU kernel time, or the
// CPU-side time of aten ops when the trace has no GPU kernels.
func (r *ImportResult) TimeKind() string {
	if r.GPU {
		return "GPU kernel time"
	}
	return "aten op time (CPU; no GPU kernels in the trace)"
}

// OpShare is one graph op's part of a trace's kernel time.
type OpShare struct {
	Name string
	MS   float64
}

// KernelTime is one trace kernel's time per run.
type KernelTime struct {
	Name, OpType string
	MS           float64
}

// traceKernel is one timed node of the trace with its durations (µs) in run
// order.
type traceKernel struct {
	name, opType, index string
	durs                []float64
	// events is how many trace events durs sums (durs has a zero for a
	// run the kernel did not run in).
	events int
	shape  any
	// target, when set, is where the kernel's time goes (aten ops
	// aligned with the model's ops).
	target *target
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
// only those count; the CPU-side ones then time kernel launches. A Chrome
// trace with no event named after a node but with aten ops (a PyTorch
// profile of the module the model was exported from) has each run's
// top-level aten ops aligned with the model's ops by type and order.
func Import(path string, g *graph.Graph, dt DeviceType) (*ImportResult, error) {
	data, err := files.Read(path, "trace")
	if err != nil {
		return nil, err
	}
	return ImportBytes(path, data, g, dt)
}

// ImportBytes is Import on a file's contents; name labels errors. It is
// ImportWith without options.
func ImportBytes(name string, data []byte, g *graph.Graph, dt DeviceType) (*ImportResult, error) {
	return ImportWith(name, data, g, dt, ImportOptions{})
}

// ImportWith is ImportBytes with the optimized model ONNX Runtime wrote
// for the profiled session (o.Optimized). ONNX Runtime's graph
// optimisations fuse and rename nodes (NCHWc convolutions named
// "<tensor>_nchwc", ".../MatMulAddFusion" Gemms, Gelu, inserted
// ReorderInput/ReorderOutput), so by name few kernels match. With the
// optimized model each kernel is keyed to its optimized node and mapped
// through tensor names to the ops it computes: original tensor names
// survive, layout kernels pass their input's tensor through, and a fused
// node computes the ops on the paths from its inputs to its outputs. Its
// time is spread over them in proportion to the roofline estimate of
// each on dt. A layout kernel's time goes to the op that reads
// (ReorderInput) or writes (ReorderOutput) its tensor and is totalled in
// LayoutMS. Without the optimized model, names are matched with ORT's
// suffixes removed and tensor names taken for their producers.
//
// Each op's measurement is its share per run. Below MinMatchedShare of
// the trace's kernel time mapped, Warnings say which kernels did not.
func ImportWith(name string, data []byte, g *graph.Graph, dt DeviceType, o ImportOptions) (*ImportResult, error) {
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
	var m *ortMap
	if len(o.Optimized) > 0 {
		if source != SourceORT {
			return nil, fmt.Errorf("%s: an optimized model maps ONNX Runtime profiles, and this is a Chrome trace", name)
		}
		nodes, err := parseOptimized(o.OptimizedName, o.Optimized, g)
		if err != nil {
			return nil, err
		}
		m = newORTMap(g, &dt, nodes)
	}
	res := &ImportResult{}
	var kernels []*traceKernel
	byKey := map[string]*traceKernel{}
	var runs []float64
	// A PyTorch trace with no event named after a node: align its aten
	// ops with the model's ops.
	aten, atenPerRun := false, 0
	var gpuUS float64 // a Kineto trace's GPU kernel time in its runs
	if source == SourceChrome {
		named, atenOps := false, false
		for _, e := range events {
			if _, ok := g.OpByName(e.Name); ok && e.Dur != nil {
				named = true
				break
			}
			atenOps = atenOps || strings.HasPrefix(e.Name, "aten::")
		}
		if aten = !named && atenOps; aten {
			// The traced step's precision rewrites the model as it ran:
			// autocast's casts are aten ops the alignment must meet.
			pg, _, err := train.ApplyPrecision(g, o.Precision)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			g = pg
			kt := readKineto(events)
			var ar [][]atenOp
			if kt.training() {
				opt, err := traceOptimizer(kt, o.Optimizer)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", name, err)
				}
				tg, _, err := train.Build(g, train.Options{Optimizer: opt})
				if err != nil {
					return nil, fmt.Errorf("%s: the model's training step: %w", name, err)
				}
				g, res.Graph, res.Optimizer = tg, tg, opt.Name
				ar = kt.trainRuns()
				kernels = trainKernels(g, &dt, ar)
			} else {
				ar = kt.split(kt.topOps(false))
				kernels = atenKernels(g, &dt, ar)
			}
			gpuUS = kt.gpuTotal()
			for _, e := range events {
				if e.Dur != nil && (e.Name == "model_run" || strings.HasPrefix(e.Name, "ProfilerStep#")) {
					runs = append(runs, *e.Dur/1e3)
				}
			}
			for _, r := range ar {
				res.Events += len(r)
			}
			if len(ar) > 0 {
				atenPerRun = len(ar[0])
			}
			events = nil
		}
	}
	for _, e := range events {
		if e.Dur == nil || (e.Ph != "" && e.Ph != "X") {
			continue
		}
		if source == SourceORT && e.Cat == "Session" && e.Name == "model_run" {
			runs = append(runs, *e.Dur/1e3)
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
			if _, ok := g.OpByName(node); !ok && e.Cat != "user_annotation" && e.Cat != "gpu_user_annotation" {
				continue
			}
		}
		res.Events++
		if *e.Dur < 0 {
			return nil, fmt.Errorf("%s: event %q has a negative dur", name, e.Name)
		}
		opType, _ := e.Args["op_name"].(string)
		index, _ := e.Args["node_index"].(string)
		key := node + "\x00" + index
		k := byKey[key]
		if k == nil {
			k = &traceKernel{name: node, opType: opType, index: index, shape: e.Args["output_type_shape"]}
			byKey[key] = k
			kernels = append(kernels, k)
		}
		k.durs = append(k.durs, *e.Dur)
		k.events++
	}
	if res.Events == 0 {
		what := `no "cat": "Node" events named <node>_kernel_time`
		if source == SourceChrome {
			what = "no complete events named after a graph node (record_function(node_name) in PyTorch) and no aten ops"
		}
		return nil, fmt.Errorf("%s: the trace has %s", name, what)
	}
	// The node indices each name's kernels carry, ascending: ORT gives
	// several fused nodes one name; the k-th index is the k-th node of
	// that name in the optimized model.
	indices := map[string][]int{}
	for _, k := range kernels {
		if i, err := strconv.Atoi(k.index); err == nil {
			indices[k.name] = append(indices[k.name], i)
		}
	}
	for _, l := range indices {
		slices.Sort(l)
	}
	for _, k := range kernels {
		res.Runs = max(res.Runs, len(k.durs))
	}
	perRun := make([][]float64, len(g.Ops))
	total := make([]float64, len(g.Ops))
	covered := make([]bool, len(g.Ops))
	var traceUS, matchedUS, layoutUS float64
	unmatched := map[string]bool{}
	unmappedUS := map[string]*KernelTime{}
	phaseUS := map[string]*[2]float64{PhaseForward: {}, PhaseBackward: {}, PhaseOptimizer: {}}
	for _, k := range kernels {
		t := k.target
		if t == nil {
			t = mapKernel(g, m, k, indices[k.name])
		}
		var sum float64
		for _, d := range k.durs {
			sum += d
		}
		// A profiler step range (ProfilerStep#N) spans the others.
		if source == SourceChrome && strings.HasPrefix(k.name, "ProfilerStep#") {
			unmatched[k.name] = true
			continue
		}
		traceUS += sum
		if res.Graph != nil {
			phaseUS[tracePhase(k.name)][0] += sum
			if len(t.ops) > 0 {
				phaseUS[tracePhase(k.name)][1] += sum
			}
		}
		if t.layout {
			layoutUS += sum
		}
		if len(t.ops) == 0 {
			unmatched[k.name] = true
			kt := unmappedUS[k.name]
			if kt == nil {
				kt = &KernelTime{Name: k.name, OpType: k.opType}
				unmappedUS[k.name] = kt
			}
			kt.MS += sum
			continue
		}
		if t.shapeOp >= 0 {
			if err := checkTraceShape(g, t.shapeOp, k.shape); err != nil {
				return nil, fmt.Errorf("%s: node %q: %v", name, k.name, err)
			}
		}
		res.Matched += k.events
		matchedUS += sum
		for j, id := range t.ops {
			covered[id] = true
			if len(perRun[id]) < res.Runs {
				perRun[id] = append(perRun[id], make([]float64, res.Runs-len(perRun[id]))...)
			}
			for r, d := range k.durs {
				perRun[id][r] += t.weight[j] * d
			}
			total[id] += t.weight[j] * sum
		}
	}
	if m != nil {
		for i := range m.nodes {
			if t, ok := m.cache[i]; ok {
				for _, id := range t.ops {
					covered[id] = true
				}
			}
		}
	}
	runsF := float64(max(res.Runs, 1))
	// Kernels launched outside every aten op and range read count too:
	// the share is of the GPU's time.
	if outside := gpuUS - traceUS; outside > 1e-6*gpuUS {
		unmappedUS[outsideKernels] = &KernelTime{Name: outsideKernels, MS: outside}
		traceUS = gpuUS
	}
	res.GPU = gpuUS > 0
	if res.Graph != nil {
		for _, ph := range []string{PhaseForward, PhaseBackward, PhaseOptimizer} {
			v := phaseUS[ph]
			res.Phases = append(res.Phases, PhaseTime{Phase: ph, MS: round6(v[0] / 1e3 / runsF), MatchedMS: round6(v[1] / 1e3 / runsF)})
		}
	}
	res.TraceMS = round6(traceUS / 1e3 / runsF)
	res.MatchedMS = round6(matchedUS / 1e3 / runsF)
	res.LayoutMS = round6(layoutUS / 1e3 / runsF)
	if traceUS > 0 {
		res.MatchedShare = matchedUS / traceUS
	}
	if len(runs) > 0 {
		res.RunMS = round6(median(runs))
	}
	p := &Profile{Format: FormatVersion, Source: source, Batch: g.Batch(), DeviceTypes: []DeviceType{dt}}
	for i, d := range perRun {
		if d == nil || total[i] <= 0 {
			continue
		}
		id := graph.OpID(i)
		ms := make([]float64, 0, len(d))
		for _, v := range d {
			if v > 0 {
				ms = append(ms, v/1e3) // µs -> ms
			}
		}
		p.Ops = append(p.Ops, Measurement{
			Name: g.Ops[i].Name, Key: OpKey(g, id), Type: g.Ops[i].Type, Shapes: Shapes(g, id), DeviceType: dt.Name, Threads: dt.Threads,
			MedianMS: round6(median(ms)), P10MS: round6(quantile(ms, 0.1)), P90MS: round6(quantile(ms, 0.9)), Runs: len(ms),
		})
		res.Shares = append(res.Shares, OpShare{Name: g.Ops[i].Name, MS: total[i] / 1e3 / runsF})
	}
	for n := range unmatched {
		p.Unmatched = append(p.Unmatched, n)
	}
	for _, kt := range unmappedUS {
		kt.MS /= 1e3 * runsF
		res.Unmapped = append(res.Unmapped, *kt)
	}
	slices.SortFunc(res.Unmapped, func(a, b KernelTime) int {
		if c := cmp.Compare(b.MS, a.MS); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	var folded []bool
	if m != nil || aten {
		folded = foldedOps(g)
	}
	for i := range g.Ops {
		if covered[i] || Family(g.Ops[i].Type) == FamilyView || (folded != nil && folded[i]) {
			continue
		}
		res.Unmeasured++
	}
	res.Warnings = importWarnings(res, source, m != nil, aten)
	switch {
	case res.Graph != nil:
		res.Warnings = append(res.Warnings, fmt.Sprintf("the trace is a training step that names no node of the model: its forward aten ops, and its backward functions in reverse, were aligned with the model's ops by type and order, the optimizer's time spread over the %s update ops (%.1f%% of the %s mapped, %d ops have no time); check the alignment against the per-op times the profile lists",
			res.Optimizer, 100*res.MatchedShare, res.TimeKind(), res.Unmeasured))
	case aten:
		res.Warnings = append(res.Warnings, fmt.Sprintf("the trace names no node of the model: its %d top-level aten ops per run were aligned with the model's ops by type and order (%.1f%% of their time mapped, %d ops have no time); wrap each node in record_function(node_name) for an exact map",
			atenPerRun, 100*res.MatchedShare, res.Unmeasured))
	}
	FillFeatures(p, g)
	if o.Device != nil {
		setPathSpeedups(p, g, o.Device, o.Precision == train.TF32)
	}
	p.Sort()
	res.Profile = p
	return res, nil
}

// setPathSpeedups records in each measurement of an op of g how much
// faster than float32 dt runs its FLOPs (Measurement.PathSpeedup).
func setPathSpeedups(p *Profile, g *graph.Graph, dt *cluster.DeviceType, tf32 bool) {
	for i := range p.Ops {
		m := &p.Ops[i]
		id, ok := g.OpByName(m.Name)
		if !ok || m.Key != "" && m.Key != OpKey(g, id) || g.Ops[id].Work.FLOPs == 0 {
			continue
		}
		if r := PathSpeedup(g, id, dt, tf32); r > 1 {
			m.PathSpeedup = r
		}
	}
}

// outsideKernels names the GPU time of a Kineto trace's kernels that no
// aten op, backward function or optimizer range launched.
const outsideKernels = "(kernels launched outside any aten op)"

// mapKernel finds the ops a trace kernel times.
func mapKernel(g *graph.Graph, m *ortMap, k *traceKernel, indices []int) *target {
	if m != nil {
		if i, ok := m.nodeFor(k.name, k.index, indices); ok {
			return m.target(i)
		}
	}
	if id, ok := g.OpByName(k.name); ok {
		return &target{ops: []graph.OpID{id}, weight: []float64{1}, shapeOp: id}
	}
	if m == nil && k.opType != "" {
		// ONNX Runtime names without the optimized model.
		if id, ok := nameFallback(g, k.name); ok {
			return &target{ops: []graph.OpID{id}, weight: []float64{1}, shapeOp: id}
		}
	}
	return &target{shapeOp: -1, layout: k.opType == "ReorderInput" || k.opType == "ReorderOutput"}
}

// importWarnings says why a trace matched little of its time.
func importWarnings(res *ImportResult, source string, optimized, aten bool) []string {
	var w []string
	if source == SourceORT && !optimized {
		w = append(w, fmt.Sprintf("ONNX Runtime kernels mapped by name only: a fused kernel's time goes to one op, %d kernels (%.1f%% of the time) matched none, %d ops have no time; importing it with the optimized model the session writes (SessionOptions.optimized_model_filepath) maps fused and renamed kernels to every op they compute",
			len(res.Unmapped), 100*(1-res.MatchedShare), res.Unmeasured))
	}
	if res.TraceMS <= 0 || res.MatchedShare >= MinMatchedShare {
		return w
	}
	types := map[string]float64{}
	for _, k := range res.Unmapped {
		t := k.OpType
		if t == "" {
			t = "?"
		}
		types[t] += k.MS
	}
	var tl []string
	for t := range types {
		tl = append(tl, t)
	}
	slices.SortFunc(tl, func(a, b string) int { return cmp.Compare(types[b], types[a]) })
	var tparts []string
	for _, t := range tl[:min(len(tl), 6)] {
		tparts = append(tparts, fmt.Sprintf("%s %.3f ms", t, types[t]))
	}
	var kparts []string
	for _, k := range res.Unmapped[:min(len(res.Unmapped), 5)] {
		kparts = append(kparts, fmt.Sprintf("%s (%s) %.3f ms", k.Name, k.OpType, k.MS))
	}
	why := "kernels map to no op of the model"
	switch {
	case source == SourceORT && !optimized:
		why = "ONNX Runtime fused and renamed nodes, and without the optimized model the session writes (SessionOptions.optimized_model_filepath) only names are matched"
	case source == SourceORT:
		why = "these kernels' tensors are not the model's (is the optimized model from the same session and optimisation level?)"
	case aten && res.Graph != nil:
		why = "aten ops and backward functions that did not align with the training step's ops by type and order (the loss and its backward never do; was the ONNX model exported from the module the trace ran?)"
	case aten:
		why = "aten ops that did not align with the model's ops by type and order (was the ONNX model exported from the module the trace ran?)"
	case source == SourceChrome:
		why = "annotations name no node of the model (wrap each node in record_function(node_name))"
	}
	w = append(w, fmt.Sprintf("only %.1f%% of the trace's kernel time (%.3f of %.3f ms per run) mapped to the model's ops: %s; unmapped by op type: %s; slowest unmapped kernels: %s",
		100*res.MatchedShare, res.MatchedMS, res.TraceMS, why, strings.Join(tparts, ", "), strings.Join(kparts, ", ")))
	return w
}

// decodeEvents accepts a bare event array (ONNX Runtime, and Chrome's
// array form) or an object with "traceEvents" (Chrome's object form).
func decodeEvents(data []byte) ([]traceEvent, error) {
	if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
		// gzip, as torch.profiler writes a trace whose path ends in .gz.
		var err error
		if data, err = gunzip(data); err != nil {
			return nil, err
		}
	}
	data = bytes.TrimLeft(data, " \t\r\n\ufeff")
	if len(data) == 0 {
		return nil, errors.New("the file is empty")
	}
	if data[0] == '[' {
		var ev []traceEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return nil, errors.New(files.JSONError(data, err))
		}
		return ev, nil
	}
	var obj struct {
		TraceEvents []traceEvent `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, errors.New(files.JSONError(data, err))
	}
	if obj.TraceEvents == nil {
		return nil, errors.New(`no "traceEvents" array`)
	}
	return obj.TraceEvents, nil
}

// maxTraceBytes bounds a gzipped trace's decompressed size: a day-long
// trace of a large model is a few GiB; more is a damaged or hostile file.
const maxTraceBytes = 4 << 30

func gunzip(data []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("a gzip header but %v", err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxTraceBytes+1))
	if err != nil {
		return nil, fmt.Errorf("gzip: %v (truncated or damaged)", err)
	}
	if len(out) > maxTraceBytes {
		return nil, fmt.Errorf("gzip: decompresses to more than %d GiB", maxTraceBytes>>30)
	}
	return out, nil
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
