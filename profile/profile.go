// Package profile measures and imports per-operator times and turns them
// into a cost model: measured times where a profile has them for a device
// type, a roofline calibrated against the measurements elsewhere.
//
// A profile comes from running a model's distinct ops on this machine's
// CPU with gorgonia kernels (Measure), or from a runtime's trace: ONNX
// Runtime's profiling JSON or a Chrome trace as PyTorch's profiler writes
// it (Import). Calibrate fits per-family efficiency factors of the
// roofline to the measurements by least squares. FORMAT.md documents the
// file.
package profile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/files"
)

// FormatVersion names the file format; Load rejects others.
const FormatVersion = "opplace-profile/1"

// Profile is a set of measured op times and the device types they were
// measured on.
type Profile struct {
	Format string `json:"format"`
	// Model is the model file the profile was made for.
	Model string `json:"model,omitempty"`
	// Source says where the times come from: "gorgonia" (opplace
	// profile), "onnxruntime" or "chrome-trace".
	Source string `json:"source"`
	// Batch is the model's batch when it was measured (the leading
	// dimension of its first input), 0 when unknown; a plan at another
	// batch warns that only ops of the measured shapes use their times.
	Batch       int64        `json:"batch,omitempty"`
	DeviceTypes []DeviceType `json:"device_types"`
	// Ops holds one measurement per graph op name and device type.
	Ops []Measurement `json:"ops"`
	// Unsupported lists the op types that were not measured (no kernel
	// here), with how many ops of each; they keep the model's estimate.
	Unsupported []Unsupported `json:"unsupported,omitempty"`
	// Unmatched lists trace node names that match no graph op.
	Unmatched []string `json:"unmatched,omitempty"`
	// Runtime says which runtime ran the whole model for the profile
	// (opplace profile --runtime onnxruntime), nil when unknown.
	Runtime *RuntimeInfo `json:"runtime,omitempty"`
}

// RuntimeInfo is the runtime a profile's times come from and its
// whole-model run times.
type RuntimeInfo struct {
	Name    string `json:"name"` // "onnxruntime"
	Version string `json:"version,omitempty"`
	// Library is the shared library that was loaded.
	Library string `json:"library,omitempty"`
	Threads int    `json:"threads,omitempty"`
	// ModelMedianMS, ModelP10MS and ModelP90MS summarise the whole
	// model's timed runs (wall clock around one inference).
	ModelMedianMS float64 `json:"model_median_ms"`
	ModelP10MS    float64 `json:"model_p10_ms"`
	ModelP90MS    float64 `json:"model_p90_ms"`
	Runs          int     `json:"runs"`
}

// DeviceType is the roofline of the device type measurements were taken
// on, with the calibration fitted to them.
type DeviceType struct {
	Name string `json:"name"`
	// Description says what the device is (a CPU model name).
	Description string `json:"description,omitempty"`
	// PeakFLOPS (float32), MemoryBandwidth (bytes/s) and LaunchOverhead
	// (seconds) are the roofline's parameters: datasheet figures, or for
	// this machine's CPU the micro-benchmarks' results.
	PeakFLOPS       float64 `json:"peak_flops"`
	MemoryBandwidth float64 `json:"memory_bandwidth"`
	LaunchOverhead  float64 `json:"launch_overhead_s"`
	// PeakSpread is how far the runs that measured PeakFLOPS spread:
	// (p90 - p10) / median; 0 when the peak is a datasheet figure.
	PeakSpread float64 `json:"peak_spread,omitempty"`
	// Memory is the device memory in bytes, for a cluster file.
	Memory int64 `json:"memory_bytes,omitempty"`
	// Threads is the thread count the device ran the ops with (the cores
	// of a CPU device given to the runtime), 0 when not stated. A profile
	// may hold one device type name at several thread counts; each entry
	// has its own measurements (Measurement.Threads) and calibration, and
	// a cluster device type selects the entry of its Threads.
	Threads     int          `json:"threads,omitempty"`
	Calibration *Calibration `json:"calibration,omitempty"`
}

// Cluster returns the cluster package's form of the device type.
func (d *DeviceType) Cluster() *cluster.DeviceType {
	return &cluster.DeviceType{
		Name:            d.Name,
		PeakFLOPS:       map[graph.DType]float64{graph.Float32: d.PeakFLOPS},
		MemoryBandwidth: d.MemoryBandwidth,
		LaunchOverhead:  d.LaunchOverhead,
		Memory:          d.Memory,
		Threads:         d.Threads,
	}
}

// Measurement is one op's measured time on one device type.
type Measurement struct {
	// Name is the graph op's name; Key identifies what it computes
	// (OpKey), so a measurement serves every op with the same key.
	Name string `json:"name"`
	Key  string `json:"key"`
	Type string `json:"type"`
	// Shapes renders the input and output shapes, "1x64x56x56,64x64x1x1->1x64x56x56".
	Shapes     string `json:"shapes,omitempty"`
	DeviceType string `json:"device_type"`
	// MedianMS, P10MS and P90MS summarise the timed runs.
	MedianMS float64 `json:"median_ms"`
	P10MS    float64 `json:"p10_ms"`
	P90MS    float64 `json:"p90_ms"`
	Runs     int     `json:"runs"`
	// Threads is the device type's thread count the op ran at (the
	// DeviceType entry of this name and Threads), 0 when not stated.
	Threads int `json:"threads,omitempty"`
	// The op's features when it was measured, which a calibration pooled
	// over several models' profiles fits to without their graphs: FLOPs
	// (graph.Work), bytes moved (every input read and output written once,
	// cost.BytesMoved) and the working set (the bytes of the distinct
	// tensors it touches, for the cache term). Bytes is 0 in profiles
	// written before they were recorded (HasFeatures); FillFeatures adds
	// them from the model's graph.
	FLOPs      int64 `json:"flops,omitempty"`
	Bytes      int64 `json:"bytes,omitempty"`
	WorkingSet int64 `json:"working_set_bytes,omitempty"`
	// PathSpeedup is how much faster than the device type's float32 peak
	// the op's FLOPs ran: its path's peak (tensor cores for a
	// half-precision matmul, TF32 for a float32 one under tf32) over the
	// float32 one, recorded by an import that knows the device's peaks
	// and the trace's precision. 0 or 1: the float32 peak. Calibration
	// fits efficiency as a fraction of this peak, so traces of several
	// precisions pool into one fit.
	PathSpeedup float64 `json:"path_speedup,omitempty"`
}

// HasFeatures reports whether the measurement carries its op's features
// (every kernel-launching op moves some bytes).
func (m *Measurement) HasFeatures() bool { return m.Bytes > 0 }

// SetFeatures records op id's features in m (and its type, if m has none).
func (m *Measurement) SetFeatures(g *graph.Graph, id graph.OpID) {
	if m.Type == "" {
		m.Type = g.Ops[id].Type
	}
	m.FLOPs = g.Ops[id].Work.FLOPs
	m.Bytes = cost.BytesMoved(g, id)
	m.WorkingSet = WorkingSet(g, id)
}

// WorkingSet is the bytes of the distinct tensors op id reads or writes:
// what must stay in cache for a repeated run of it to hit there.
func WorkingSet(g *graph.Graph, id graph.OpID) int64 {
	op := &g.Ops[id]
	seen := map[graph.TensorID]bool{}
	var b int64
	for _, ts := range [][]graph.TensorID{op.Inputs, op.Outputs} {
		for _, t := range ts {
			if !seen[t] {
				seen[t] = true
				b += g.Tensors[t].Bytes()
			}
		}
	}
	return b
}

// MissingFeatures counts p's measurements of kernel-launching ops with a
// time but without their op's features (profiles written before they
// were recorded).
func (p *Profile) MissingFeatures() int {
	n := 0
	for i := range p.Ops {
		if p.Ops[i].lacksFeatures() {
			n++
		}
	}
	return n
}

// lacksFeatures reports whether m times a kernel-launching op but does
// not carry the op's features.
func (m *Measurement) lacksFeatures() bool {
	return m.MedianMS > 0 && !m.HasFeatures() && Family(m.Type) != FamilyView
}

// FillFeatures sets the features of p's measurements that name an op of
// g computing the same thing (same name, and same OpKey where the
// measurement has one) and returns how many it set. Measurements of other
// models' ops are left as they are, so filling from the wrong model is
// harmless. Measure and ImportBytes call it; it also upgrades a profile
// written before features were recorded.
func FillFeatures(p *Profile, g *graph.Graph) int {
	n := 0
	for i := range p.Ops {
		m := &p.Ops[i]
		id, ok := g.OpByName(m.Name)
		if !ok || m.Key != "" && m.Key != OpKey(g, id) {
			continue
		}
		m.SetFeatures(g, id)
		n++
	}
	return n
}

// Unsupported counts ops of one type that were not measured.
type Unsupported struct {
	Type   string `json:"type"`
	Count  int    `json:"count"`
	Reason string `json:"reason,omitempty"`
}

// OpKey identifies what an op computes: its type, domain, attributes and
// every input's and output's element type and shape. Two ops with one key
// run the same kernel on the same sizes. It is the first 16 hex digits of
// a SHA-256 over the canonical rendering (graph.AttrsKey for attributes).
func OpKey(g *graph.Graph, id graph.OpID) string {
	op := &g.Ops[id]
	h := sha256.New()
	fmt.Fprintf(h, "%s/%s|%s|%s", op.Domain, op.Type, graph.AttrsKey(op.Attrs), Shapes(g, id))
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Shapes renders an op's input and output shapes with element types,
// "float32[1x3x224x224],float32[64x3x7x7]->float32[1x64x112x112]".
func Shapes(g *graph.Graph, id graph.OpID) string {
	op := &g.Ops[id]
	var b strings.Builder
	list := func(ts []graph.TensorID) {
		for i, t := range ts {
			if i > 0 {
				b.WriteByte(',')
			}
			tn := &g.Tensors[t]
			fmt.Fprintf(&b, "%s[%s]", tn.DType, tn.ShapeString())
		}
	}
	list(op.Inputs)
	b.WriteString("->")
	list(op.Outputs)
	return b.String()
}

// DeviceType returns the (first) device type of that name, or nil.
func (p *Profile) DeviceType(name string) *DeviceType {
	for i := range p.DeviceTypes {
		if p.DeviceTypes[i].Name == name {
			return &p.DeviceTypes[i]
		}
	}
	return nil
}

// DeviceTypeAt returns the device type of that name measured at threads
// threads; threads 0 means the first entry of the name. Nil when none.
func (p *Profile) DeviceTypeAt(name string, threads int) *DeviceType {
	if threads == 0 {
		return p.DeviceType(name)
	}
	for i := range p.DeviceTypes {
		if p.DeviceTypes[i].Name == name && p.DeviceTypes[i].Threads == threads {
			return &p.DeviceTypes[i]
		}
	}
	return nil
}

// entry returns the device type of that name and exactly that thread
// count (0: not stated), or nil.
func (p *Profile) entry(name string, threads int) *DeviceType {
	for i := range p.DeviceTypes {
		if p.DeviceTypes[i].Name == name && p.DeviceTypes[i].Threads == threads {
			return &p.DeviceTypes[i]
		}
	}
	return nil
}

// Relabel is a copy of p holding only its measurements on device type
// entry from, relabelled as taken on entry to: how one profile's
// measurements are priced on another entry's roofline (a pooled one).
func (p *Profile) Relabel(from, to *DeviceType) *Profile {
	q := *p
	q.Ops = nil
	for _, m := range p.Ops {
		if from.of(&m) {
			m.DeviceType, m.Threads = to.Name, to.Threads
			q.Ops = append(q.Ops, m)
		}
	}
	return &q
}

// of reports whether measurement m was taken on device type entry d.
func (d *DeviceType) of(m *Measurement) bool {
	return m.DeviceType == d.Name && m.Threads == d.Threads
}

// Sort orders ops by device type then name, and the other lists by name,
// so a profile's file is byte-identical for the same measurements.
func (p *Profile) Sort() {
	slices.SortStableFunc(p.Ops, func(a, b Measurement) int {
		if c := strings.Compare(a.DeviceType, b.DeviceType); c != 0 {
			return c
		}
		if a.Threads != b.Threads {
			return a.Threads - b.Threads
		}
		return strings.Compare(a.Name, b.Name)
	})
	slices.SortStableFunc(p.DeviceTypes, func(a, b DeviceType) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return a.Threads - b.Threads
	})
	slices.SortStableFunc(p.Unsupported, func(a, b Unsupported) int { return strings.Compare(a.Type, b.Type) })
	slices.Sort(p.Unmatched)
}

// Write encodes the profile as indented JSON.
func (p *Profile) Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(p)
}

// Load reads a profile file. Errors name the file and what is wrong.
func Load(path string) (*Profile, error) {
	data, err := files.Read(path, "profile")
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse decodes a profile; name labels errors.
func Parse(name string, data []byte) (*Profile, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%s: the file is empty; expected an opplace profile (make one with `opplace profile MODEL`)", name)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Profile
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%s: not an opplace profile (%s); make one with `opplace profile MODEL`", name, files.JSONError(data, err))
	}
	if p.Format != FormatVersion {
		return nil, fmt.Errorf("%s: format %q, want %q; make one with `opplace profile MODEL`", name, p.Format, FormatVersion)
	}
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &p, nil
}

func (p *Profile) validate() error {
	if p.Batch < 0 {
		return fmt.Errorf("batch %d: must be positive, or absent when unknown", p.Batch)
	}
	for i, d := range p.DeviceTypes {
		if d.Name == "" {
			return fmt.Errorf("device_types[%d]: no name", i)
		}
		if !(d.PeakFLOPS > 0) || !(d.MemoryBandwidth > 0) || d.LaunchOverhead < 0 {
			return fmt.Errorf("device type %q: peak_flops and memory_bandwidth must be positive, launch_overhead_s non-negative", d.Name)
		}
		if d.Threads < 0 {
			return fmt.Errorf("device type %q: threads %d must be positive, or absent when not stated", d.Name, d.Threads)
		}
		for _, e := range p.DeviceTypes[:i] {
			if e.Name == d.Name && e.Threads == d.Threads {
				return fmt.Errorf("device type %q at threads %d is listed twice", d.Name, d.Threads)
			}
		}
	}
	for i, m := range p.Ops {
		if m.Name == "" && m.Key == "" {
			return fmt.Errorf("ops[%d]: needs a name or a key", i)
		}
		if m.DeviceType == "" {
			return fmt.Errorf("op %q: no device_type", m.Name)
		}
		if !(m.MedianMS >= 0) {
			return fmt.Errorf("op %q: median_ms must be a non-negative number", m.Name)
		}
		if m.FLOPs < 0 || m.Bytes < 0 || m.WorkingSet < 0 || m.Threads < 0 {
			return fmt.Errorf("op %q: flops, bytes, working_set_bytes and threads must be non-negative", m.Name)
		}
	}
	return nil
}
