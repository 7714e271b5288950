// Package ort runs ONNX models in ONNX Runtime, through its C API
// (github.com/yalue/onnxruntime_go, which loads the shared library at run
// time), and times them: whole-model run times, the runtime's per-node
// profiling trace, and micro-benchmarks of this CPU's peak FLOP/s,
// memory bandwidth and per-op overhead as ONNX Runtime achieves them.
//
// ONNX Runtime's environment is process-global: the first call loads the
// library and creates it, and every later call must name the same
// library. Calls are serialised, so timings never overlap.
package ort

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	rt "github.com/yalue/onnxruntime_go"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/opplace/opplace/internal/stats"
	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/onnx/onnxpb"
)

// Options says which library runs a model and how it is timed.
type Options struct {
	// Library is the ONNX Runtime shared library; "" uses Find("").
	Library string
	// Threads is the intra-op thread count; 0 means 1. Inter-op
	// parallelism is off (one node at a time, as the profile assumes).
	Threads int
	// Warmup untimed runs (at least 1: the first run allocates the
	// outputs), then Runs timed ones (0 means 10).
	Warmup, Runs int
	// Profile records ONNX Runtime's profiling trace of the timed runs.
	Profile bool
	// KeepOptimized returns the model as ONNX Runtime optimized it, its
	// large weights stripped.
	KeepOptimized bool
	// Seed seeds the random float inputs.
	Seed int64
}

func (o Options) withDefaults() Options {
	if o.Threads <= 0 {
		o.Threads = 1
	}
	if o.Runs <= 0 {
		o.Runs = 10
	}
	o.Warmup = max(o.Warmup, 1)
	return o
}

// Result is what Run measured.
type Result struct {
	// Version is ONNX Runtime's version, Library the file it was loaded
	// from, Threads the intra-op thread count.
	Version string
	Library string
	Threads int
	// TimesMS holds each timed run's wall-clock time around
	// Session.Run, in order; MedianMS, P10MS and P90MS summarise them.
	TimesMS                []float64
	MedianMS, P10MS, P90MS float64
	// Outputs are the model's outputs as the last run produced them.
	Outputs []Tensor
	// Trace is ONNX Runtime's profiling JSON of the timed runs (with
	// Options.Profile).
	Trace []byte
	// Optimized is the model after ONNX Runtime's graph optimizations
	// with its large weights stripped (onnx.StripWeights), with
	// Options.KeepOptimized.
	Optimized []byte
}

// Tensor names a model input or output and its shape.
type Tensor struct {
	Name  string
	Shape []int64
}

// RunError is ONNX Runtime refusing or failing to run a model.
type RunError struct {
	Stage string // "load" or "run"
	Err   error
}

func (e *RunError) Error() string {
	if e.Stage == "load" {
		return "ONNX Runtime cannot load the model: " + e.Err.Error()
	}
	return "ONNX Runtime failed to run the model: " + e.Err.Error()
}

func (e *RunError) Unwrap() error { return e.Err }

var (
	mu      sync.Mutex // held while the environment is used
	initLib string     // the library the environment was created from
	initErr error
)

// start loads the library and creates the environment the first time;
// later calls must name the same library. The caller holds mu.
func start(lib string) (string, error) {
	if initLib == "" && initErr == nil {
		path, err := Find(lib)
		if err != nil {
			return "", err
		}
		rt.SetSharedLibraryPath(path)
		if err := rt.InitializeEnvironment(rt.WithLogLevelError()); err != nil {
			initErr = fmt.Errorf("loading ONNX Runtime from %s: %w", path, err)
			return "", initErr
		}
		initLib = path
		return path, nil
	}
	if initErr != nil {
		return "", initErr
	}
	if lib != "" {
		if abs, err := filepath.Abs(lib); err == nil && abs != initLib {
			return "", fmt.Errorf("ONNX Runtime is already loaded from %s in this process; it cannot load %s too", initLib, lib)
		}
	}
	return initLib, nil
}

// Version loads the library (as Run would) and returns ONNX Runtime's
// version and the library's path.
func Version(lib string) (version, path string, err error) {
	mu.Lock()
	defer mu.Unlock()
	path, err = start(lib)
	if err != nil {
		return "", "", err
	}
	return rt.GetVersion(), path, nil
}

// Run loads the serialized model (every input's shape fixed, every
// weight present: see onnx.Runnable) into an ONNX Runtime CPU session with
// all graph optimizations, feeds it made-up inputs (floats normal with
// the seed, integers zero, bools false), runs it o.Warmup times untimed
// and o.Runs times timed, and returns the times. The context is checked
// between runs and cancels a run in progress.
func Run(ctx context.Context, model []byte, o Options) (*Result, error) {
	o = o.withDefaults()
	mu.Lock()
	defer mu.Unlock()
	s, err := open(model, o)
	if err != nil {
		return nil, err
	}
	defer s.close()
	res := &Result{Version: rt.GetVersion(), Library: initLib, Threads: o.Threads}
	if o.KeepOptimized {
		data, err := os.ReadFile(s.optPath)
		if err != nil {
			return nil, fmt.Errorf("ONNX Runtime wrote no optimized model: %w", err)
		}
		if res.Optimized, err = onnx.StripWeights(data); err != nil {
			return nil, fmt.Errorf("the optimized model: %w", err)
		}
	}
	if _, err := s.time(ctx, o.Warmup); err != nil {
		return nil, err
	}
	if res.TimesMS, err = s.time(ctx, o.Runs); err != nil {
		return nil, err
	}
	for j, v := range s.outputs {
		res.Outputs = append(res.Outputs, Tensor{Name: s.outNames[j], Shape: slices.Clone([]int64(v.GetShape()))})
	}
	res.MedianMS, res.P10MS, res.P90MS = stats.Quantile(res.TimesMS, 0.5), stats.Quantile(res.TimesMS, 0.1), stats.Quantile(res.TimesMS, 0.9)

	// ONNX Runtime writes the profile when the session ends.
	s.endSession()
	if o.Profile {
		files, _ := filepath.Glob(s.profilePrefix + "*.json")
		if len(files) != 1 {
			return nil, fmt.Errorf("ONNX Runtime wrote %d profiling files, want 1", len(files))
		}
		data, err := os.ReadFile(files[0])
		if err != nil {
			return nil, err
		}
		if res.Trace, err = timedEvents(data, o.Runs); err != nil {
			return nil, fmt.Errorf("ONNX Runtime's profile: %w", err)
		}
	}
	return res, nil
}

// session is a loaded model with its inputs, ready to time.
type session struct {
	s                      *rt.DynamicAdvancedSession
	so                     *rt.SessionOptions
	ro                     *rt.RunOptions
	dir                    string
	optPath, profilePrefix string
	outNames               []string
	inputs, outputs        []rt.Value
}

// open loads the model; the caller holds mu and must close the session.
// One session runs the warm-up and the timed runs, so the timed runs
// find its caches, arena and thread pool warm. With profiling on it
// records the warm-up runs too; their events are cut from the trace
// afterwards (timedEvents).
func open(model []byte, o Options) (_ *session, err error) {
	ins, outs, err := signature(model)
	if err != nil {
		return nil, err
	}
	if _, err := start(o.Library); err != nil {
		return nil, err
	}
	s := &session{outNames: outs}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.dir, err = os.MkdirTemp("", "opplace-ort-"); err != nil {
		return nil, err
	}
	if s.so, err = rt.NewSessionOptions(); err != nil {
		return nil, err
	}
	s.optPath = filepath.Join(s.dir, "optimized.onnx")
	s.profilePrefix = filepath.Join(s.dir, "profile")
	for _, err := range []error{
		s.so.SetIntraOpNumThreads(o.Threads),
		s.so.SetInterOpNumThreads(1),
		s.so.SetExecutionMode(rt.ExecutionModeSequential),
		s.so.SetGraphOptimizationLevel(rt.GraphOptimizationLevelEnableAll),
	} {
		if err != nil {
			return nil, err
		}
	}
	if o.KeepOptimized {
		// Weights of the optimized model go to a file of their own, so the
		// model file stays small and StripWeights need not read them.
		for _, err := range []error{
			s.so.SetOptimizedModelFilePath(s.optPath),
			s.so.AddSessionConfigEntry("session.optimized_model_external_initializers_file_name", "optimized.weights"),
			s.so.AddSessionConfigEntry("session.optimized_model_external_initializers_min_size_in_bytes", "16384"),
		} {
			if err != nil {
				return nil, err
			}
		}
	}
	if o.Profile {
		if err := s.so.EnableProfiling(s.profilePrefix); err != nil {
			return nil, err
		}
	}
	inNames := make([]string, len(ins))
	for i, in := range ins {
		inNames[i] = in.name
	}
	if s.s, err = rt.NewDynamicAdvancedSessionWithONNXData(model, inNames, outs, s.so); err != nil {
		return nil, &RunError{Stage: "load", Err: err}
	}
	if s.inputs, err = makeInputs(ins, o.Seed); err != nil {
		return nil, err
	}
	if s.ro, err = rt.NewRunOptions(); err != nil {
		return nil, err
	}
	s.outputs = make([]rt.Value, len(outs))
	return s, nil
}

// time runs the model n times and returns each run's wall-clock time in
// milliseconds. The first run of a session lets ONNX Runtime allocate
// the outputs, which the binding copies into Go memory; later runs write
// into those, so they copy nothing.
func (s *session) time(ctx context.Context, n int) ([]float64, error) {
	stop := context.AfterFunc(ctx, func() { s.ro.Terminate() })
	defer stop()
	var times []float64
	for range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t0 := time.Now()
		err := s.s.RunWithOptions(s.inputs, s.outputs, s.ro)
		d := time.Since(t0)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &RunError{Stage: "run", Err: err}
		}
		times = append(times, float64(d.Nanoseconds())/1e6)
	}
	return times, nil
}

// endSession destroys the ONNX Runtime session, which writes its profile.
func (s *session) endSession() {
	if s.s != nil {
		s.s.Destroy()
		s.s = nil
	}
}

func (s *session) close() {
	s.endSession()
	for _, vs := range [][]rt.Value{s.inputs, s.outputs} {
		for _, v := range vs {
			if v != nil {
				v.Destroy()
			}
		}
	}
	s.inputs, s.outputs = nil, nil
	if s.ro != nil {
		s.ro.Destroy()
		s.ro = nil
	}
	if s.so != nil {
		s.so.Destroy()
		s.so = nil
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
		s.dir = ""
	}
}

// input is a graph input to feed.
type input struct {
	name  string
	dtype onnxpb.TensorProto_DataType
	shape []int64
}

// signature reads the inputs to feed (graph inputs that are not
// initializers) and the outputs of a serialized model. Every input must
// have a fixed shape.
func signature(model []byte) ([]input, []string, error) {
	g, err := graphShell(model)
	if err != nil {
		return nil, nil, err
	}
	inits := map[string]bool{}
	for _, t := range g.GetInitializer() {
		inits[t.GetName()] = true
	}
	var ins []input
	for _, vi := range g.GetInput() {
		if inits[vi.GetName()] {
			continue
		}
		tt := vi.GetType().GetTensorType()
		if tt == nil || tt.GetShape() == nil {
			return nil, nil, fmt.Errorf("input %q is not a tensor of declared shape", vi.GetName())
		}
		in := input{name: vi.GetName(), dtype: onnxpb.TensorProto_DataType(tt.GetElemType())}
		for axis, d := range tt.GetShape().GetDim() {
			v, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue)
			if !ok || v.DimValue < 0 {
				return nil, nil, fmt.Errorf("input %q axis %d has no fixed size (bind the model's dimensions first)", in.name, axis)
			}
			in.shape = append(in.shape, v.DimValue)
		}
		ins = append(ins, in)
	}
	var outs []string
	for _, vi := range g.GetOutput() {
		outs = append(outs, vi.GetName())
	}
	if len(ins) == 0 || len(outs) == 0 {
		return nil, nil, errors.New("the model has no inputs to feed or no outputs")
	}
	return ins, outs, nil
}

// graphShell decodes the main graph's inputs, outputs and initializer
// names from a serialized model, skipping the rest: a model's weights can
// be gigabytes, which a full decode would copy.
func graphShell(model []byte) (*onnxpb.GraphProto, error) {
	bad := func(what string) (*onnxpb.GraphProto, error) {
		return nil, fmt.Errorf("not an ONNX model (protobuf decoding failed: %s)", what)
	}
	var graph []byte
	for b := model; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return bad("bad tag")
		}
		b = b[n:]
		if num == 7 && typ == protowire.BytesType { // ModelProto.graph
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return bad("bad graph")
			}
			graph = v
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return bad("bad field")
		}
		b = b[m:]
	}
	if graph == nil {
		return nil, errors.New("not an ONNX model (no graph)")
	}
	g := &onnxpb.GraphProto{}
	for b := graph; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return bad("bad tag in the graph")
		}
		b = b[n:]
		if typ != protowire.BytesType || (num != 5 && num != 11 && num != 12) {
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return bad("bad field in the graph")
			}
			b = b[m:]
			continue
		}
		v, m := protowire.ConsumeBytes(b)
		if m < 0 {
			return bad("bad field in the graph")
		}
		b = b[m:]
		switch num {
		case 5: // initializer: its name (TensorProto field 8) only
			t := &onnxpb.TensorProto{}
			for tb := v; len(tb) > 0; {
				tn, tt, k := protowire.ConsumeTag(tb)
				if k < 0 {
					return bad("bad initializer")
				}
				tb = tb[k:]
				if tn == 8 && tt == protowire.BytesType {
					name, k := protowire.ConsumeBytes(tb)
					if k < 0 {
						return bad("bad initializer")
					}
					t.Name = proto.String(string(name))
					tb = tb[k:]
					continue
				}
				if k = protowire.ConsumeFieldValue(tn, tt, tb); k < 0 {
					return bad("bad initializer")
				}
				tb = tb[k:]
			}
			g.Initializer = append(g.Initializer, t)
		case 11, 12:
			vi := &onnxpb.ValueInfoProto{}
			if err := proto.Unmarshal(v, vi); err != nil {
				return bad(err.Error())
			}
			if num == 11 {
				g.Input = append(g.Input, vi)
			} else {
				g.Output = append(g.Output, vi)
			}
		}
	}
	return g, nil
}

// makeInputs builds a tensor per input: floats normal (seeded),
// integers zero, bools false.
func makeInputs(ins []input, seed int64) ([]rt.Value, error) {
	r := rand.New(rand.NewPCG(uint64(seed), 0x696e70757473)) // "inputs"
	var values []rt.Value
	fail := func(err error) ([]rt.Value, error) {
		for _, v := range values {
			v.Destroy()
		}
		return nil, err
	}
	for _, in := range ins {
		shape := rt.NewShape(in.shape...)
		n := shape.FlattenedSize()
		var v rt.Value
		var err error
		switch in.dtype {
		case onnxpb.TensorProto_FLOAT:
			data := make([]float32, n)
			for i := range data {
				data[i] = float32(r.NormFloat64())
			}
			v, err = rt.NewTensor(shape, data)
		case onnxpb.TensorProto_DOUBLE:
			data := make([]float64, n)
			for i := range data {
				data[i] = r.NormFloat64()
			}
			v, err = rt.NewTensor(shape, data)
		case onnxpb.TensorProto_INT64:
			v, err = rt.NewEmptyTensor[int64](shape)
		case onnxpb.TensorProto_INT32:
			v, err = rt.NewEmptyTensor[int32](shape)
		case onnxpb.TensorProto_INT8:
			v, err = rt.NewEmptyTensor[int8](shape)
		case onnxpb.TensorProto_UINT8:
			v, err = rt.NewEmptyTensor[uint8](shape)
		case onnxpb.TensorProto_BOOL:
			v, err = rt.NewEmptyTensor[bool](shape)
		default:
			err = fmt.Errorf("input %q has element type %s, which cannot be fed made-up values", in.name, in.dtype)
		}
		if err != nil {
			return fail(err)
		}
		values = append(values, v)
	}
	return values, nil
}

// timedEvents cuts the warm-up runs' events from an ONNX Runtime
// profile, keeping the session's own events and those of the last runs
// runs. Each Session.Run records a "model_run" event (cat "Session")
// spanning the run; a node event belongs to the run whose span holds its
// start.
func timedEvents(data []byte, runs int) ([]byte, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	type event struct {
		Cat  string  `json:"cat"`
		Name string  `json:"name"`
		Ts   float64 `json:"ts"`
	}
	evs := make([]event, len(raw))
	var starts []float64
	for i, r := range raw {
		if err := json.Unmarshal(r, &evs[i]); err != nil {
			return nil, err
		}
		if evs[i].Cat == "Session" && evs[i].Name == "model_run" {
			starts = append(starts, evs[i].Ts)
		}
	}
	if len(starts) < runs {
		return nil, fmt.Errorf("%d model_run events for %d timed runs", len(starts), runs)
	}
	slices.Sort(starts)
	cut := starts[len(starts)-runs]
	var b bytes.Buffer
	b.WriteString("[\n")
	n := 0
	for i, r := range raw {
		e := evs[i]
		if (e.Cat == "Node" || e.Name == "model_run" || e.Name == "SequentialExecutor::Execute") && e.Ts < cut {
			continue
		}
		if n > 0 {
			b.WriteString(",\n")
		}
		b.Write(r)
		n++
	}
	b.WriteString("\n]\n")
	return b.Bytes(), nil
}
