package profile

import (
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
	named map[[2]string]Measurement
	keyed map[[2]string]float64
	types map[string]*DeviceType
}

// NewModel indexes a profile's measurements.
func NewModel(p *Profile, base cost.Model) *Model {
	if base == nil {
		base = cost.Roofline{}
	}
	m := &Model{Base: base, named: map[[2]string]Measurement{}, keyed: map[[2]string]float64{}, types: map[string]*DeviceType{}}
	for _, ms := range p.Ops {
		if ms.Name != "" {
			m.named[[2]string{ms.DeviceType, ms.Name}] = ms
		}
		if ms.Key != "" {
			k := [2]string{ms.DeviceType, ms.Key}
			if _, dup := m.keyed[k]; !dup {
				m.keyed[k] = ms.MedianMS / 1e3
			}
		}
	}
	for i := range p.DeviceTypes {
		m.types[p.DeviceTypes[i].Name] = &p.DeviceTypes[i]
	}
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

// Lookup is OpTime with where the time came from.
func (m *Model) Lookup(g *graph.Graph, id graph.OpID, dt *cluster.DeviceType) (float64, Source) {
	op := &g.Ops[id]
	key := ""
	if ms, ok := m.named[[2]string{dt.Name, op.Name}]; ok {
		key = OpKey(g, id)
		if ms.Key == "" || ms.Key == key {
			return ms.MedianMS / 1e3, FromName
		}
	}
	if len(m.keyed) > 0 {
		if key == "" {
			key = OpKey(g, id)
		}
		if t, ok := m.keyed[[2]string{dt.Name, key}]; ok {
			return t, FromKey
		}
	}
	if pt := m.types[dt.Name]; pt != nil && pt.Calibration != nil {
		return pt.Calibration.Predict(g, id, pt), FromCalibration
	}
	return m.Base.OpTime(g, id, dt), FromBase
}
