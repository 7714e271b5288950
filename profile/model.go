package profile

import (
	"fmt"
	"slices"
	"strings"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
)

// Model is the cost model a profile gives: for a device type the profile
// measured, an op's measured median time when the profile has one for an
// op of that name computing the same thing (same OpKey), else for any op
// with that key, else the roofline calibrated for that device type; for
// other device types, Base.
type Model struct {
	// Base prices device types the profile knows nothing of; nil means
	// cost.Roofline{}.
	Base  cost.Model
	named map[entryKey]Measurement
	keyed map[entryKey]float64
	// types lists each device type name's entries (one per thread count)
	// in file order.
	types map[string][]*DeviceType
	// names lists the profile's device types in file order; batch is the
	// profile's Batch.
	names []string
	batch int64
}

// entryKey is a device type entry (name, threads) and an op name or key.
type entryKey struct {
	dt      string
	threads int
	op      string
}

// NewModel indexes a profile's measurements.
func NewModel(p *Profile, base cost.Model) *Model {
	if base == nil {
		base = cost.Roofline{}
	}
	m := &Model{Base: base, named: map[entryKey]Measurement{}, keyed: map[entryKey]float64{}, types: map[string][]*DeviceType{}}
	for _, ms := range p.Ops {
		if ms.Name != "" {
			m.named[entryKey{ms.DeviceType, ms.Threads, ms.Name}] = ms
		}
		if ms.Key != "" {
			k := entryKey{ms.DeviceType, ms.Threads, ms.Key}
			if _, dup := m.keyed[k]; !dup {
				m.keyed[k] = ms.MedianMS / 1e3
			}
		}
	}
	for i := range p.DeviceTypes {
		d := &p.DeviceTypes[i]
		if len(m.types[d.Name]) == 0 {
			m.names = append(m.names, d.Name)
		}
		m.types[d.Name] = append(m.types[d.Name], d)
	}
	m.batch = p.Batch
	return m
}

// Source says where OpTime's answer for an op comes from.
type Source int

// The sources of an op time.
const (
	FromBase Source = iota
	FromCalibration
	FromKey
	FromName
)

func (s Source) String() string {
	return [...]string{"model", "calibrated", "measured (same key)", "measured"}[s]
}

// OpTime implements cost.Model.
func (m *Model) OpTime(g *graph.Graph, id graph.OpID, dt *cluster.DeviceType) float64 {
	t, _ := m.Lookup(g, id, dt)
	return t
}

// Shape implements cost.Shaper when the base model does: a measured or
// calibrated time scales with a run's share of the op's work as the base
// model's roofline does (cost.Shape), measured at the op's whole shape.
func (m *Model) Shape(g *graph.Graph, id graph.OpID, dt *cluster.DeviceType) cost.Shape {
	if sh, ok := m.Base.(cost.Shaper); ok {
		return sh.Shape(g, id, dt)
	}
	return cost.Shape{}
}

// Entry is the profile's entry for cluster device type dt: the one of its
// name measured at dt.Threads; when dt.Threads is 0 (not stated), or no
// entry has it, the entry of the nearest thread count, ties to the first
// (entries that do not state theirs count as nearest to any). Exact
// reports whether the thread counts agree (or either is not stated).
// Nil when the profile has no entry of that name.
func (m *Model) Entry(dt *cluster.DeviceType) (e *DeviceType, exact bool) {
	entries := m.types[dt.Name]
	if len(entries) == 0 {
		return nil, false
	}
	if dt.Threads == 0 {
		return entries[0], true
	}
	best, dist := entries[0], -1
	for _, d := range entries {
		k := d.Threads - dt.Threads
		if d.Threads == 0 {
			k = 0
		}
		if k < 0 {
			k = -k
		}
		if dist < 0 || k < dist {
			best, dist = d, k
		}
	}
	return best, dist == 0
}

// Lookup is OpTime with where the time came from.
func (m *Model) Lookup(g *graph.Graph, id graph.OpID, dt *cluster.DeviceType) (float64, Source) {
	op := &g.Ops[id]
	pt, _ := m.Entry(dt)
	if pt == nil {
		return m.Base.OpTime(g, id, dt), FromBase
	}
	key := ""
	if ms, ok := m.named[entryKey{pt.Name, pt.Threads, op.Name}]; ok {
		key = OpKey(g, id)
		if ms.Key == "" || ms.Key == key {
			return ms.MedianMS / 1e3, FromName
		}
	}
	if len(m.keyed) > 0 {
		if key == "" {
			key = OpKey(g, id)
		}
		if t, ok := m.keyed[entryKey{pt.Name, pt.Threads, key}]; ok {
			return t, FromKey
		}
	}
	if pt.Calibration != nil {
		return pt.Calibration.PredictAt(g, id, pt, pt.PeakFLOPS*m.pathSpeedup(g, id, dt)), FromCalibration
	}
	return m.Base.OpTime(g, id, dt), FromBase
}

// pathSpeedup is PathSpeedup at the TF32 setting of m's base model.
func (m *Model) pathSpeedup(g *graph.Graph, id graph.OpID, dt *cluster.DeviceType) float64 {
	r, _ := m.Base.(cost.Roofline)
	return PathSpeedup(g, id, dt, r.TF32)
}

// PathSpeedup is how much faster than float32 device type dt runs op id's
// FLOPs: its peak on the op's path (tensor cores for a half-precision
// matmul or convolution; TF32 for a float32 one when tf32 is set) over
// its float32 peak. 1 when dt gives no float32 peak.
func PathSpeedup(g *graph.Graph, id graph.OpID, dt *cluster.DeviceType, tf32 bool) float64 {
	f32 := dt.FLOPS(graph.Float32)
	if !(f32 > 0) {
		return 1
	}
	if p := (cost.Roofline{TF32: tf32}).Peak(g, id, dt); p > 0 {
		return p / f32
	}
	return 1
}

// Advice implements cost.Advisor: it says when the profile cannot price
// the plan as its user may expect. A profile none of whose device types
// the cluster has changes nothing. Ops measured at other shapes than the
// plan's (another batch, other input dimensions) do not use their
// measured times: they get the roofline calibrated to the measurements,
// which scales with each op's FLOPs and bytes. Measurements without a key
// (so without shapes) are used as measured, whatever the batch.
func (m *Model) Advice(g *graph.Graph, c *cluster.Cluster, batch int64) []string {
	var here []*cluster.DeviceType
	var advice []string
	for i := range c.Devices {
		dt := c.Devices[i].Type
		if m.types[dt.Name] != nil && !slices.Contains(here, dt) {
			here = append(here, dt)
			if e, exact := m.Entry(dt); !exact {
				var have []string
				for _, d := range m.types[dt.Name] {
					have = append(have, fmt.Sprint(d.Threads))
				}
				advice = append(advice, fmt.Sprintf("device type %s runs %d threads in cluster %q, but the profile measured and calibrated it at %s threads only: it uses the %d-thread times and calibration, which do not carry the speed-up of other thread counts; measure at %d threads and pool that profile with this one",
					dt.Name, dt.Threads, c.Name, strings.Join(have, ", "), e.Threads, dt.Threads))
			}
		}
	}
	for _, dt := range here {
		if e, _ := m.Entry(dt); e.Calibration != nil && e.Calibration.Trace != "" {
			advice = append(advice, traceNote(e))
		}
	}
	if len(here) == 0 {
		return []string{fmt.Sprintf("the profile measured device type(s) %s, which cluster %q does not have: it changes nothing, every op keeps the model's estimate",
			strings.Join(m.names, ", "), c.Name)}
	}
	otherBatch := m.batch > 0 && batch > 0 && m.batch != batch
	var matched, other, keyless, priced int
	for i := range g.Ops {
		if Family(g.Ops[i].Type) == FamilyView {
			continue
		}
		priced++
		for _, dt := range here {
			e, _ := m.Entry(dt)
			ms, named := m.named[entryKey{e.Name, e.Threads, g.Ops[i].Name}]
			_, src := m.Lookup(g, graph.OpID(i), dt)
			if src == FromName && ms.Key == "" {
				keyless++
				break
			}
			if src == FromName || src == FromKey {
				matched++
				break
			}
			if named {
				other++
				break
			}
		}
	}
	if other == 0 && (keyless == 0 || !otherBatch) {
		return advice
	}
	why := fmt.Sprintf("the profile measured %d of this plan's ops at other shapes", other)
	if otherBatch {
		why = fmt.Sprintf("the profile was measured at batch %d and this plan is at batch %d", m.batch, batch)
	}
	others := "the roofline"
	if slices.ContainsFunc(here, func(dt *cluster.DeviceType) bool { e, _ := m.Entry(dt); return e.Calibration != nil }) {
		others = "the roofline calibrated to the measurements"
	}
	msg := fmt.Sprintf("%s: %d of %d ops have the measured shapes and use their measured times; the others are priced by %s, which scales with each op's FLOPs and bytes",
		why, matched, priced, others)
	if keyless > 0 {
		msg += fmt.Sprintf("; %d op(s) have times without shapes (no key), used as measured", keyless)
	}
	return append(advice, msg)
}

// traceNote says that a device type's times and efficiency constants
// come from a trace, with the fitted constants.
func traceNote(e *DeviceType) string {
	c := e.Calibration
	var parts []string
	for _, fam := range []string{FamilyConv, FamilyMatMul, FamilyElementwise} {
		f := c.Fit(fam)
		if f == nil {
			continue
		}
		if Group(fam) == FamilyCompute {
			parts = append(parts, fmt.Sprintf("%s e_max %.3g, W_half %.3g FLOPs (%s fit)", fam, f.ComputeEfficiency, f.ComputeHalfFLOPs, f.Family))
		} else {
			parts = append(parts, fmt.Sprintf("%s bandwidth fraction %.3g, overhead %.3g us (%s fit)", fam, f.MemoryEfficiency, f.OverheadS*1e6, f.Family))
		}
	}
	return fmt.Sprintf("device type %s is priced from trace %s: its traced ops by their measured times, the others by efficiency constants fitted to them (%s; median error %.1f%% over %d distinct ops)",
		e.Name, c.Trace, strings.Join(parts, "; "), 100*c.After.MedianRelErr, c.After.Samples)
}
