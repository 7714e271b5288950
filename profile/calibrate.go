package profile

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/gonum/mat"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
)

// Calibration holds the roofline efficiency factors fitted to one device
// type's measurements, and how well the roofline predicted those
// measurements before and after.
type Calibration struct {
	Families []FamilyFit `json:"families"`
	Before   ErrorStats  `json:"before"`
	After    ErrorStats  `json:"after"`
}

// FamilyFit is the calibrated roofline of one op family:
//
//	time = max(FLOPs / (peak × ComputeEfficiency),
//	           bytes moved / (bandwidth × MemoryEfficiency)) + OverheadS
type FamilyFit struct {
	Family            string  `json:"family"`
	ComputeEfficiency float64 `json:"compute_efficiency"`
	MemoryEfficiency  float64 `json:"memory_efficiency"`
	OverheadS         float64 `json:"overhead_s"`
	// Samples is how many distinct ops the fit saw.
	Samples int `json:"samples"`
}

// ErrorStats summarises relative errors |predicted - measured| / measured
// over distinct measured ops.
type ErrorStats struct {
	Samples      int     `json:"samples"`
	MedianRelErr float64 `json:"median_rel_err"`
	P90RelErr    float64 `json:"p90_rel_err"`
}

// MinFamilySamples is the fewest distinct ops a family needs for its own
// fit; smaller families use the fit over all ops.
const MinFamilySamples = 3

// Fit returns the fit for a family: its own, else the one over all ops,
// else nil.
func (c *Calibration) Fit(family string) *FamilyFit {
	var all *FamilyFit
	for i := range c.Families {
		switch c.Families[i].Family {
		case family:
			return &c.Families[i]
		case FamilyAll:
			all = &c.Families[i]
		}
	}
	return all
}

// Predict is the calibrated roofline time of op on device type dt, in
// seconds.
func (c *Calibration) Predict(g *graph.Graph, id graph.OpID, dt *DeviceType) float64 {
	fam := Family(g.Ops[id].Type)
	if fam == FamilyView {
		return 0
	}
	f := c.Fit(fam)
	if f == nil {
		return cost.Roofline{}.OpTime(g, id, dt.Cluster())
	}
	return f.predict(float64(g.Ops[id].Work.FLOPs)/dt.PeakFLOPS, float64(cost.BytesMoved(g, id))/dt.MemoryBandwidth)
}

// predict takes the op's time at peak compute and at peak bandwidth.
func (f *FamilyFit) predict(compute, memory float64) float64 {
	return max(compute/f.ComputeEfficiency, memory/f.MemoryEfficiency) + f.OverheadS
}

// Sample is one distinct measured op: its FLOPs and bytes moved at the
// device's peaks, in seconds, and its measured time.
type Sample struct {
	Name    string
	Family  string
	Compute float64
	Memory  float64
	// Default is the uncalibrated roofline's prediction.
	Default  float64
	Measured float64
}

// Samples collects the measurements of device type dt that belong to ops
// of g (same name and key), one per distinct key (the median of their
// medians), skipping view ops and zero times.
func Samples(p *Profile, g *graph.Graph, dt *DeviceType) []Sample {
	cdt := dt.Cluster()
	byKey := map[string][]float64{}
	first := map[string]graph.OpID{}
	var keys []string
	for _, ms := range p.Ops {
		if ms.DeviceType != dt.Name || !(ms.MedianMS > 0) {
			continue
		}
		id, ok := g.OpByName(ms.Name)
		if !ok || Family(g.Ops[id].Type) == FamilyView {
			continue
		}
		key := OpKey(g, id)
		if ms.Key != "" && ms.Key != key {
			continue
		}
		if _, seen := byKey[key]; !seen {
			keys = append(keys, key)
			first[key] = id
		}
		byKey[key] = append(byKey[key], ms.MedianMS/1e3)
	}
	slices.Sort(keys)
	out := make([]Sample, 0, len(keys))
	for _, k := range keys {
		id := first[k]
		out = append(out, Sample{
			Name:     g.Ops[id].Name,
			Family:   Family(g.Ops[id].Type),
			Compute:  float64(g.Ops[id].Work.FLOPs) / dt.PeakFLOPS,
			Memory:   float64(cost.BytesMoved(g, id)) / dt.MemoryBandwidth,
			Default:  cost.Roofline{}.OpTime(g, id, cdt),
			Measured: median(byKey[k]),
		})
	}
	return out
}

// Calibrate fits the roofline of device type dt to the measurements of
// g's ops in p: per family with at least MinFamilySamples distinct ops,
// and over all ops. It stores the result in dt.Calibration and returns it.
func Calibrate(p *Profile, g *graph.Graph, dtName string) (*Calibration, error) {
	dt := p.DeviceType(dtName)
	if dt == nil {
		return nil, fmt.Errorf("the profile has no device type %q", dtName)
	}
	samples := Samples(p, g, dt)
	if len(samples) == 0 {
		return nil, fmt.Errorf("the profile has no measurements of this model's ops on %q to calibrate with", dtName)
	}
	c := &Calibration{}
	families := map[string][]Sample{}
	var names []string
	for _, s := range samples {
		if _, ok := families[s.Family]; !ok {
			names = append(names, s.Family)
		}
		families[s.Family] = append(families[s.Family], s)
	}
	slices.Sort(names)
	for _, n := range names {
		if len(families[n]) >= MinFamilySamples {
			c.Families = append(c.Families, fitFamily(n, families[n], dt.LaunchOverhead))
		}
	}
	c.Families = append(c.Families, fitFamily(FamilyAll, samples, dt.LaunchOverhead))
	before := make([]float64, len(samples))
	after := make([]float64, len(samples))
	for i, s := range samples {
		before[i] = relErr(s.Default, s.Measured)
		after[i] = relErr(c.Fit(s.Family).predict(s.Compute, s.Memory), s.Measured)
	}
	c.Before, c.After = Stats(before), Stats(after)
	dt.Calibration = c
	return c, nil
}

func relErr(pred, meas float64) float64 { return math.Abs(pred-meas) / meas }

// Stats summarises relative errors.
func Stats(errs []float64) ErrorStats {
	if len(errs) == 0 {
		return ErrorStats{}
	}
	return ErrorStats{Samples: len(errs), MedianRelErr: round4(quantile(errs, 0.5)), P90RelErr: round4(quantile(errs, 0.9))}
}

func round4(v float64) float64 { return math.Round(v*1e4) / 1e4 }

// fitFamily fits t = max(c·a, m·b) + o to the samples, minimising the
// squared relative error, where a = 1/compute efficiency and b = 1/memory
// efficiency. The max makes it piecewise linear: each round assigns every
// sample to the bound (compute or memory) the current fit says limits it
// and solves the weighted linear least-squares problem of that assignment
// (gonum QR), until the assignment stops changing. The overhead is kept
// non-negative by also solving without it; the better fit wins.
func fitFamily(name string, s []Sample, overhead float64) FamilyFit {
	a, b := 1/cost.DefaultComputeEfficiency, 1/cost.DefaultMemoryEfficiency
	best := FamilyFit{Family: name, ComputeEfficiency: 1 / a, MemoryEfficiency: 1 / b, OverheadS: overhead, Samples: len(s)}
	bestObj := objective(best, s)
	computeBound := make([]bool, len(s))
	for round := 0; round < 20; round++ {
		changed := round == 0
		for i, x := range s {
			cb := x.Compute*a >= x.Memory*b
			changed = changed || cb != computeBound[i]
			computeBound[i] = cb
		}
		if !changed {
			break
		}
		for _, withOverhead := range []bool{true, false} {
			na, nb, no, ok := solve(s, computeBound, withOverhead, a, b)
			if !ok {
				continue
			}
			f := FamilyFit{Family: name, ComputeEfficiency: 1 / na, MemoryEfficiency: 1 / nb, OverheadS: no, Samples: len(s)}
			if obj := objective(f, s); obj < bestObj {
				best, bestObj = f, obj
			}
		}
		a, b = 1/best.ComputeEfficiency, 1/best.MemoryEfficiency
	}
	best.ComputeEfficiency = sig(best.ComputeEfficiency)
	best.MemoryEfficiency = sig(best.MemoryEfficiency)
	best.OverheadS = sig(best.OverheadS)
	return best
}

// sig rounds to six significant digits so files stay readable and stable.
func sig(v float64) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 6, 64), 64)
	return r
}

// solve is one weighted least-squares round. Columns with no sample (no
// compute-bound or no memory-bound op) keep their current coefficient.
func solve(s []Sample, computeBound []bool, withOverhead bool, a, b float64) (na, nb, no float64, ok bool) {
	var hasC, hasM bool
	for _, cb := range computeBound {
		hasC, hasM = hasC || cb, hasM || !cb
	}
	var cols []int // 0: a, 1: b, 2: overhead
	if hasC {
		cols = append(cols, 0)
	}
	if hasM {
		cols = append(cols, 1)
	}
	if withOverhead {
		cols = append(cols, 2)
	}
	if len(cols) == 0 || len(s) < len(cols) {
		return 0, 0, 0, false
	}
	A := mat.NewDense(len(s), len(cols), nil)
	y := mat.NewVecDense(len(s), nil)
	for i, x := range s {
		w := 1 / x.Measured
		target := x.Measured
		// A column not being fitted contributes with its fixed value.
		if !hasC && computeBound[i] {
			target -= x.Compute * a
		}
		if !hasM && !computeBound[i] {
			target -= x.Memory * b
		}
		for j, c := range cols {
			var v float64
			switch c {
			case 0:
				if computeBound[i] {
					v = x.Compute
				}
			case 1:
				if !computeBound[i] {
					v = x.Memory
				}
			case 2:
				v = 1
			}
			A.Set(i, j, v*w)
		}
		y.SetVec(i, target*w)
	}
	var sol mat.VecDense
	if err := sol.SolveVec(A, y); err != nil {
		return 0, 0, 0, false
	}
	na, nb = a, b
	for j, c := range cols {
		v := sol.AtVec(j)
		switch c {
		case 0:
			na = v
		case 1:
			nb = v
		case 2:
			no = v
		}
	}
	// Efficiencies above 100x peak or non-positive are not physical; a
	// negative overhead is dropped by the round without one.
	if na < 0.01 || nb < 0.01 || no < 0 || math.IsNaN(na+nb+no) {
		return 0, 0, 0, false
	}
	return na, nb, no, true
}

func objective(f FamilyFit, s []Sample) float64 {
	var sum float64
	for _, x := range s {
		r := (f.predict(x.Compute, x.Memory) - x.Measured) / x.Measured
		sum += r * r
	}
	return sum
}

func median(v []float64) float64 { return quantile(v, 0.5) }

// quantile is the linearly interpolated q-quantile of v.
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}
