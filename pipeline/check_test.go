package pipeline

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/opplace/opplace/constraint"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/profile"
	"github.com/opplace/opplace/strategy"
)

// covers reports whether the declared name w covers the state name s:
// the same name, or s a field below w.
func covers(w, s string) bool { return s == w || strings.HasPrefix(s, w+".") }

// stateNames are the names a stage may declare: every run field, every
// field of the options and of the model, and the graph's parts.
func stateNames() []string {
	var names []string
	rt := reflect.TypeFor[run]()
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		names = append(names, f.Name)
		var sub reflect.Type
		switch f.Name {
		case "opts":
			sub = reflect.TypeFor[Options]()
		case "model":
			sub = reflect.TypeFor[Model]()
			names = append(names, "model.Graph.Device", "model.Graph.Colocate")
		}
		for j := 0; sub != nil && j < sub.NumField(); j++ {
			names = append(names, f.Name+"."+sub.Field(j).Name)
		}
	}
	return names
}

// TestStageDeclarationsConsistent checks the stage table's declarations
// name run's state and that every stage reads only what the user gives
// (the options, wantGiven) or an earlier stage writes.
func TestStageDeclarationsConsistent(t *testing.T) {
	known := stateNames()
	for i, st := range stages {
		for _, name := range append(strings.Fields(st.reads), strings.Fields(st.writes)...) {
			if !slices.Contains(known, name) {
				t.Errorf("stage %s declares %q, which names no state (want one of %v)", st.name, name, known)
			}
		}
		for _, read := range strings.Fields(st.reads) {
			if covers("opts", read) || read == "wantGiven" {
				continue
			}
			written := false
			for _, earlier := range stages[:i] {
				for _, w := range strings.Fields(earlier.writes) {
					written = written || covers(w, read) || covers(read, w)
				}
			}
			if !written {
				t.Errorf("stage %s reads %s, which neither the user gives nor an earlier stage writes", st.name, read)
			}
		}
	}
}

// hashMode says how hashValue treats the operator graphs it meets.
type hashMode int

const (
	// byContent hashes a graph's ops, tensors, inputs and outputs.
	byContent hashMode = iota
	// byStructure is byContent with the ops' Device and Colocate left
	// out; noDevice leaves out Device only, noColocate Colocate only.
	byStructure
	noDevice
	noColocate
	// byIdentity hashes a pointer to a graph by its address: the part
	// holding the graph is unchanged when the graph's content changes.
	byIdentity
	hashModes
)

// stateHashes fingerprints every part of r's state stateNames names
// (but the parents opts, model and model.Graph's whole), following
// pointers, so a stage that changes a field in place shows. The model's
// graph is hashed by structure, its ops' Device and Colocate apart.
func stateHashes(r *run, mode hashMode) map[string]uint64 {
	out := map[string]uint64{}
	rv := reflect.ValueOf(r).Elem()
	for i := 0; i < rv.NumField(); i++ {
		name, f := rv.Type().Field(i).Name, rv.Field(i)
		switch name {
		case "opts":
			for j := 0; j < f.NumField(); j++ {
				out["opts."+f.Type().Field(j).Name] = hashValue(f.Field(j), mode)
			}
		case "model":
			mt := reflect.TypeFor[Model]()
			for j := 0; j < mt.NumField(); j++ {
				field := mt.Field(j).Name
				if r.model == nil {
					out["model."+field] = 0
					continue
				}
				v := reflect.ValueOf(r.model).Elem().Field(j)
				if field != "Graph" {
					out["model."+field] = hashValue(v, mode)
					continue
				}
				g := r.model.Graph
				var dev, coloc []string
				for k := range g.Ops {
					dev, coloc = append(dev, g.Ops[k].Device), append(coloc, g.Ops[k].Colocate)
				}
				out["model.Graph"] = hashValue(v, byStructure)
				out["model.Graph.Device"] = hashValue(reflect.ValueOf(dev), mode)
				out["model.Graph.Colocate"] = hashValue(reflect.ValueOf(coloc), mode)
			}
		default:
			out[name] = hashValue(f, mode)
		}
	}
	return out
}

// hashValue hashes v deeply: pointers are followed (each once), maps
// hashed in the order of their keys' hashes, functions by their code,
// and the fields a sync.Once or a mutex precedes in a struct left out
// (by convention they are what it guards: caches filled on first use).
// A graph is hashed as mode says, never by its lazily built name index.
func hashValue(v reflect.Value, mode hashMode) uint64 {
	h := &hasher{seen: map[seenKey]int{}, mode: mode}
	h.value(v)
	return h.sum
}

type seenKey struct {
	p uintptr
	t reflect.Type
}

type hasher struct {
	sum  uint64
	seen map[seenKey]int
	mode hashMode
}

func (h *hasher) word(w uint64) {
	// FNV-1a over the word's bytes.
	if h.sum == 0 {
		h.sum = 14695981039346656037
	}
	for i := 0; i < 8; i++ {
		h.sum ^= w & 0xff
		h.sum *= 1099511628211
		w >>= 8
	}
}

func (h *hasher) str(s string) {
	f := fnv.New64a()
	f.Write([]byte(s))
	h.word(uint64(len(s)))
	h.word(f.Sum64())
}

var (
	graphType   = reflect.TypeFor[graph.Graph]()
	onceType    = reflect.TypeFor[sync.Once]()
	mutexType   = reflect.TypeFor[sync.Mutex]()
	rwMutexType = reflect.TypeFor[sync.RWMutex]()
)

func (h *hasher) value(v reflect.Value) {
	switch v.Kind() {
	case reflect.Invalid:
		h.word(1)
	case reflect.Bool:
		if v.Bool() {
			h.word(3)
		} else {
			h.word(2)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		h.word(uint64(v.Int()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		h.word(v.Uint())
	case reflect.Float32, reflect.Float64:
		h.word(math.Float64bits(v.Float()))
	case reflect.Complex64, reflect.Complex128:
		h.word(math.Float64bits(real(v.Complex())))
		h.word(math.Float64bits(imag(v.Complex())))
	case reflect.String:
		h.str(v.String())
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			h.word(4)
			return
		}
		h.word(uint64(v.Len()))
		for i := 0; i < v.Len(); i++ {
			h.value(v.Index(i))
		}
	case reflect.Pointer:
		if v.IsNil() {
			h.word(5)
			return
		}
		k := seenKey{v.Pointer(), v.Type()}
		if n, ok := h.seen[k]; ok {
			h.word(6)
			h.word(uint64(n))
			return
		}
		h.seen[k] = len(h.seen)
		if v.Type().Elem() == graphType && h.mode == byIdentity {
			h.word(uint64(v.Pointer()))
			return
		}
		if v.Type().Elem() == graphType {
			h.graph(v.Elem())
			return
		}
		h.value(v.Elem())
	case reflect.Interface:
		if v.IsNil() {
			h.word(7)
			return
		}
		h.str(v.Elem().Type().String())
		h.value(v.Elem())
	case reflect.Map:
		if v.IsNil() {
			h.word(8)
			return
		}
		type entry struct {
			key  uint64
			k, v reflect.Value
		}
		var entries []entry
		for it := v.MapRange(); it.Next(); {
			entries = append(entries, entry{hashValue(it.Key(), h.mode), it.Key(), it.Value()})
		}
		slices.SortFunc(entries, func(a, b entry) int { return cmp.Compare(a.key, b.key) })
		h.word(uint64(len(entries)))
		for _, e := range entries {
			h.word(e.key)
			h.value(e.v)
		}
	case reflect.Struct:
		if v.Type() == graphType {
			h.graph(v)
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if t := v.Field(i).Type(); t == onceType || t == mutexType || t == rwMutexType {
				break // the fields a lock or a once guards are caches
			}
			h.value(v.Field(i))
		}
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		h.word(uint64(v.Pointer()))
	}
}

// graph hashes a graph's content, not its name index, which lookups
// build on first use.
func (h *hasher) graph(v reflect.Value) {
	for _, field := range []string{"Name", "Tensors", "Inputs", "Outputs"} {
		h.value(v.FieldByName(field))
	}
	ops := v.FieldByName("Ops")
	h.word(uint64(ops.Len()))
	for i := 0; i < ops.Len(); i++ {
		op := ops.Index(i)
		for j := 0; j < op.NumField(); j++ {
			switch name := op.Type().Field(j).Name; {
			case name == "Device" && (h.mode == byStructure || h.mode == noDevice):
			case name == "Colocate" && (h.mode == byStructure || h.mode == noColocate):
			default:
				h.value(op.Field(j))
			}
		}
	}
}

// TestStageDeclarations runs the stages one by one on plans that make
// every stage write what it may (a given placement, rules, a precision,
// a costed graph with devices, fusion on and off) and checks each
// changes only the state it declares it writes, and each declared write
// is made in one of them.
func TestStageDeclarations(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tiny, err := os.ReadFile("../testdata/costed/tiny.json")
	if err != nil {
		t.Fatal(err)
	}
	pinned := filepath.Join(dir, "pinned.json")
	if err := os.WriteFile(pinned, []byte(strings.Replace(string(tiny), `"name": "a",`, `"name": "a", "device": "a100",`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	colocate, err := constraint.ParseFlag(constraint.Colocate, "module:/layer1/")
	if err != nil {
		t.Fatal(err)
	}
	reserve, err := constraint.ParseFlag(constraint.Reserve, "*=1GiB")
	if err != nil {
		t.Fatal(err)
	}
	resnet := func(o Options) Options {
		o.ModelPath, o.ClusterPath = "../testdata/models/resnet50.onnx", "../testdata/clusters/4xV100.yaml"
		return o
	}
	// A training step's plan, given to plan inference: its gradient and
	// update ops are not in the graph.
	trained, err := Run(ctx, resnet(Options{Strategy: "m-etf", Fusion: FusionNone}))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := plan.Write(&buf, trained.Plan, plan.JSON); err != nil {
		t.Fatal(err)
	}
	trainedPlan := filepath.Join(dir, "trained.json")
	if err := os.WriteFile(trainedPlan, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// A profile of device types 4xV100 lacks: the cost stage warns that
	// it changes nothing.
	prof, err := profile.Load("../testdata/profiles/resnet50_b1_gorgonia_cpu.json")
	if err != nil {
		t.Fatal(err)
	}
	scenarios := []struct {
		name string
		opts Options
	}{
		{"resnet50 training, fused, auto", resnet(Options{})},
		{"resnet50 training, auto keeping what a chooser picks", resnet(Options{Choose: func(_ context.Context, c *Choice) (Pick, error) {
			return Pick{Candidate: c.Best, Why: map[string]string{"tensor": "the chooser's"}}, nil
		}})},
		{"resnet50 inference, amp-bf16 on A100s, unfused, with a report, data parallel", Options{ModelPath: "../testdata/models/resnet50.onnx",
			ClusterPath: "../testdata/clusters/8xA100-2host.yaml", Mode: ModeInfer, Precision: "amp-bf16", Fusion: FusionNone, FusionReport: &FusionReport{}, Strategy: "dp"}},
		{"resnet50 training under rules, with a report, m-etf", resnet(Options{Strategy: "m-etf", FusionReport: &FusionReport{},
			Constraints: &constraint.Set{Rules: []constraint.Rule{colocate, reserve}}})},
		{"resnet50 inference, a training plan given, a profile", resnet(Options{Mode: ModeInfer, Placement: trainedPlan, CostModel: profile.NewModel(prof, nil)})},
		{"costed graph with a pin, given placement", Options{ModelPath: pinned, ClusterPath: "../testdata/clusters/hetero.yaml",
			Placement: "../testdata/costed/tiny-placement.yaml"}},
		{"costed graph with a pin respected, fused, auto", Options{ModelPath: pinned, ClusterPath: "../testdata/clusters/hetero.yaml",
			RespectDevices: true, Fusion: FusionHybrid}},
		{"gpt2_small inference under torch.compile, its attention fused, data parallel", Options{ModelPath: "../testdata/models/gpt2_small.onnx",
			ClusterPath: "../testdata/clusters/4xV100.yaml", Mode: ModeInfer, Runtime: "compile", Strategy: "dp",
			Import: ImportOptions{Dims: map[string]int64{"batch": 4}}}},
	}
	made := map[string]bool{} // stage/write pairs seen changing state
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			opts := sc.opts.withDefaults()
			r := &run{opts: opts, wantGiven: opts.Strategy == strategy.GivenStrategy}
			for _, st := range stages {
				var before [hashModes]map[string]uint64
				for m := range before {
					before[m] = stateHashes(r, hashMode(m))
				}
				if err := r.runStage(ctx, st); err != nil {
					t.Fatalf("stage %s: %v", st.name, err)
				}
				var after [hashModes]map[string]uint64
				for m := range after {
					after[m] = stateHashes(r, hashMode(m))
				}
				for name, h := range after[byContent] {
					if h == before[byContent][name] {
						continue
					}
					// A change inside an operator graph another part
					// holds (the fine graph under fusion, a cost model's)
					// is a write of the model's graph.
					changed := []string{name}
					if after[byIdentity][name] == before[byIdentity][name] {
						changed = nil
						if after[byStructure][name] != before[byStructure][name] {
							changed = append(changed, "model.Graph")
						}
						if after[noColocate][name] != before[noColocate][name] {
							changed = append(changed, "model.Graph.Device")
						}
						if after[noDevice][name] != before[noDevice][name] {
							changed = append(changed, "model.Graph.Colocate")
						}
					}
					for _, c := range changed {
						declared := false
						for _, w := range strings.Fields(st.writes) {
							if covers(w, c) {
								declared = true
								made[st.name+" "+w] = true
							}
						}
						if !declared {
							what := name
							if c != name {
								what += " (the " + c + " it holds)"
							}
							t.Errorf("stage %s changed %s, which it does not declare it writes (%s)", st.name, what, st.writes)
						}
					}
				}
			}
		})
	}
	if t.Failed() {
		return
	}
	// unreached are the declared writes no scenario makes, and why.
	unreached := map[string]string{
		"assemble bound":     "only a plan that does not fit drops the bounds that count memory, and place keeps none",
		"assemble boundKind": "as bound",
	}
	for _, st := range stages {
		for _, w := range strings.Fields(st.writes) {
			key := st.name + " " + w
			if why, ok := unreached[key]; ok {
				if made[key] {
					t.Errorf("stage %s wrote %s, which this test says no scenario reaches (%s): drop it from unreached", st.name, w, why)
				}
				continue
			}
			if !made[key] {
				t.Errorf("stage %s declares it writes %s, but no scenario saw it change", st.name, w)
			}
		}
	}
}

// TestCheckAfterStage breaks the graph in a stage of its own and expects
// the driver to stop there with an internal error naming the stage.
func TestCheckAfterStage(t *testing.T) {
	if !CheckStages {
		t.Fatal("the check between stages is off in a test binary")
	}
	ctx := context.Background()
	r := &run{opts: Options{ModelPath: "../testdata/models/resnet50.onnx"}.withDefaults()}
	if err := r.runStage(ctx, stages[0]); err != nil {
		t.Fatal(err)
	}
	breaking := stage{name: "breaker", fn: func(_ context.Context, r *run) error {
		g := r.model.Graph
		g.Tensors[g.Ops[3].Outputs[0]].Consumers = nil
		return nil
	}, writes: "model.Graph"}
	err := r.runStage(ctx, breaking)
	var se *StageCheckError
	var ce *graph.CheckError
	if !errors.As(err, &se) || se.Stage != "breaker" || !errors.As(err, &ce) || ce.Invariant != graph.InvSymmetry {
		t.Fatalf("error %v, want a StageCheckError of stage breaker, broken symmetry", err)
	}
	var in *InputError
	if errors.As(err, &in) {
		t.Errorf("a broken graph is reported as bad input: %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "internal error: stage breaker left a broken graph") {
		t.Errorf("message %q", msg)
	}
	// A stage that declares no graph write is not checked after.
	breaking.writes = "plan"
	if err := r.runStage(ctx, breaking); err != nil {
		t.Errorf("a stage writing no graph was checked: %v", err)
	}
}

func TestCheckDefault(t *testing.T) {
	for _, tc := range []struct {
		env    string
		inTest bool
		want   bool
	}{{"", false, false}, {"", true, true}, {"1", false, true}, {"0", true, false}, {"yes", false, false}} {
		if got := checkDefault(tc.env, tc.inTest); got != tc.want {
			t.Errorf("checkDefault(%q, %v) = %v, want %v", tc.env, tc.inTest, got, tc.want)
		}
	}
}
