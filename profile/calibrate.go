package profile

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/gonum/mat"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/stats"
)

// MethodShape names the calibration method Calibrate and CalibratePooled
// write: per op family a roofline with shape terms (the compute ramp, the
// cache level), fitted on relative (log-space) error. Calibrations
// without a method (older files) hold the flat per-family fit; they load
// and predict as they did.
const MethodShape = "shape/1"

// Calibration holds the roofline fitted to one device type's
// measurements (per op family, with fall-backs), and how well the
// roofline predicted those measurements before and after.
type Calibration struct {
	// Method is MethodShape, or empty for the flat per-family fit of
	// older files.
	Method string `json:"method,omitempty"`
	// Models lists the models whose measurements were pooled into the fit.
	Models []string `json:"models,omitempty"`
	// Trace is the runtime trace the measurements were imported from
	// (opplace profile --import), empty when they were measured here.
	Trace    string      `json:"trace,omitempty"`
	Families []FamilyFit `json:"families"`
	Before   ErrorStats  `json:"before"`
	After    ErrorStats  `json:"after"`
}

// FamilyFit is the calibrated roofline of one op family (or of a group of
// families, or of all ops):
//
//	time = max(FLOPs / (peak × ComputeEfficiency × W/(W + ComputeHalfFLOPs)),
//	           bytes moved / (bandwidth × e_mem)) + OverheadS
//
// with W the op's FLOPs (the ramp of cluster.Efficiency.MatmulHalf: 0 means
// none) and e_mem = CacheEfficiency when the op's working set is at most
// CacheBytes (it stays in cache between runs), else MemoryEfficiency.
type FamilyFit struct {
	Family            string  `json:"family"`
	ComputeEfficiency float64 `json:"compute_efficiency"`
	// ComputeHalfFLOPs is W_half: an op of that many FLOPs reaches half of
	// ComputeEfficiency. 0: no ramp.
	ComputeHalfFLOPs float64 `json:"compute_half_flops,omitempty"`
	MemoryEfficiency float64 `json:"memory_efficiency"`
	// CacheEfficiency is the fraction of the (DRAM) bandwidth reached by
	// ops whose working set is at most CacheBytes; 0: no cache level.
	CacheEfficiency float64 `json:"cache_efficiency,omitempty"`
	CacheBytes      float64 `json:"cache_bytes,omitempty"`
	OverheadS       float64 `json:"overhead_s"`
	// Samples is how many distinct ops the fit saw.
	Samples int `json:"samples"`
	// Before and After are the errors of the uncalibrated and of this
	// fit on those ops.
	Before *ErrorStats `json:"before,omitempty"`
	After  *ErrorStats `json:"after,omitempty"`
}

// ErrorStats summarises relative errors |predicted - measured| / measured
// over distinct measured ops.
type ErrorStats struct {
	Samples      int     `json:"samples"`
	MedianRelErr float64 `json:"median_rel_err"`
	P90RelErr    float64 `json:"p90_rel_err"`
}

// MinFamilySamples is the fewest distinct ops a family needs for its own
// fit; smaller families use their group's fit (FamilyCompute or
// FamilyMemory), else the fit over all ops.
const MinFamilySamples = 5

// minCacheSamples is the fewest ops on each side of the cache threshold
// for the cache level to be fitted.
const minCacheSamples = 3

// Fit returns the fit for a family: its own, else its group's, else the
// one over all ops, else nil.
func (c *Calibration) Fit(family string) *FamilyFit {
	var group, all *FamilyFit
	g := Group(family)
	for i := range c.Families {
		switch c.Families[i].Family {
		case family:
			return &c.Families[i]
		case g:
			group = &c.Families[i]
		case FamilyAll:
			all = &c.Families[i]
		}
	}
	if group != nil {
		return group
	}
	return all
}

// Predict is the calibrated roofline time of op on device type dt, in
// seconds, its FLOPs at dt's float32 peak.
func (c *Calibration) Predict(g *graph.Graph, id graph.OpID, dt *DeviceType) float64 {
	return c.PredictAt(g, id, dt, dt.PeakFLOPS)
}

// PredictAt is Predict with op's FLOPs at peak FLOP/s: the peak of the
// path the op runs on, such as the tensor cores for a half-precision
// matmul, so that an efficiency fitted on float32 ops (a fraction of
// their peak) prices the same op under mixed precision as that fraction
// of the faster path.
func (c *Calibration) PredictAt(g *graph.Graph, id graph.OpID, dt *DeviceType, peak float64) float64 {
	fam := Family(g.Ops[id].Type)
	if fam == FamilyView {
		return 0
	}
	f := c.Fit(fam)
	if f == nil {
		return cost.Roofline{}.OpTime(g, id, dt.Cluster())
	}
	return f.timeAt(float64(g.Ops[id].Work.FLOPs), float64(cost.BytesMoved(g, id)), float64(WorkingSet(g, id)), peak, dt.MemoryBandwidth)
}

// Time is the fit's time of an op of these features on dt, in seconds.
func (f *FamilyFit) Time(flops, bytes, workingSet float64, dt *DeviceType) float64 {
	return f.timeAt(flops, bytes, workingSet, dt.PeakFLOPS, dt.MemoryBandwidth)
}

func (f *FamilyFit) timeAt(flops, bytes, workingSet, peak, bandwidth float64) float64 {
	var compute float64
	if flops > 0 {
		ce := f.ComputeEfficiency
		if f.ComputeHalfFLOPs > 0 {
			ce *= cost.Ramp(flops, f.ComputeHalfFLOPs)
		}
		compute = flops / (peak * ce)
	}
	me := f.MemoryEfficiency
	if f.CacheEfficiency > 0 && workingSet <= f.CacheBytes {
		me = f.CacheEfficiency
	}
	return max(compute, bytes/(bandwidth*me)) + f.OverheadS
}

// Sample is one distinct measured op: its features, its FLOPs and bytes
// moved at the device's peaks in seconds, and its measured time.
type Sample struct {
	Name   string
	Family string
	// Model is the model (profile) the sample came from.
	Model                    string
	FLOPs, Bytes, WorkingSet float64
	Compute                  float64
	Memory                   float64
	// PathSpeedup is the measurement's (Measurement.PathSpeedup).
	PathSpeedup float64
	// Default is the uncalibrated roofline's prediction.
	Default  float64
	Measured float64
	// Count is how many measured ops have this key.
	Count int
}

// Predict is the fit's time for the sample on dt, its FLOPs at the peak
// of the path they ran on.
func (s *Sample) Predict(f *FamilyFit, dt *DeviceType) float64 {
	return f.timeAt(s.FLOPs, s.Bytes, s.WorkingSet, dt.PeakFLOPS*s.speedup(), dt.MemoryBandwidth)
}

func (s *Sample) speedup() float64 {
	if s.PathSpeedup > 0 {
		return s.PathSpeedup
	}
	return 1
}

// Samples collects the measurements of device type dt that belong to ops
// of g (same name and key), one per distinct key (the median of their
// medians), skipping view ops and zero times. It records the ops'
// features in those measurements (FillFeatures).
func Samples(p *Profile, g *graph.Graph, dt *DeviceType) []Sample {
	FillFeatures(p, g)
	return collect([]*Profile{p}, dt, func(m *Measurement) bool {
		id, ok := g.OpByName(m.Name)
		return ok && (m.Key == "" || m.Key == OpKey(g, id))
	})
}

// SamplesOf collects the samples of device type entry dt (its name and
// threads) from the measurements of ps that carry features, one per
// distinct key, priced on dt.
func SamplesOf(ps []*Profile, dt *DeviceType) []Sample { return collect(ps, dt, nil) }

// collect gathers the samples of device type dt's measurements (by
// name and threads) in ps that carry features and pass keep (nil: all),
// one per distinct key, with the features priced on ref.
func collect(ps []*Profile, ref *DeviceType, keep func(*Measurement) bool) []Sample {
	type acc struct {
		s     Sample
		times []float64
	}
	byKey := map[string]*acc{}
	var keys []string
	for _, p := range ps {
		for i := range p.Ops {
			m := &p.Ops[i]
			if !ref.of(m) || !(m.MedianMS > 0) || !m.HasFeatures() || Family(m.Type) == FamilyView {
				continue
			}
			if keep != nil && !keep(m) {
				continue
			}
			key := m.Key
			if key == "" {
				key = p.Model + "\x00" + m.Name
			}
			a := byKey[key]
			if a == nil {
				a = &acc{s: Sample{Name: m.Name, Family: Family(m.Type), Model: p.Model,
					FLOPs: float64(m.FLOPs), Bytes: float64(m.Bytes), WorkingSet: float64(m.WorkingSet),
					PathSpeedup: m.PathSpeedup}}
				byKey[key] = a
				keys = append(keys, key)
			}
			a.times = append(a.times, m.MedianMS/1e3)
			a.s.Count++
		}
	}
	slices.Sort(keys)
	def := defaultFit(ref)
	out := make([]Sample, 0, len(keys))
	for _, k := range keys {
		s := byKey[k].s
		s.Measured = median(byKey[k].times)
		s.Compute = s.FLOPs / (ref.PeakFLOPS * s.speedup())
		s.Memory = s.Bytes / ref.MemoryBandwidth
		s.Default = s.Predict(&def, ref)
		out = append(out, s)
	}
	return out
}

// defaultFit is the uncalibrated roofline as a fit.
func defaultFit(dt *DeviceType) FamilyFit {
	return FamilyFit{Family: "roofline", ComputeEfficiency: cost.DefaultComputeEfficiency,
		MemoryEfficiency: cost.DefaultMemoryEfficiency, OverheadS: dt.LaunchOverhead}
}

// Calibrate fits the roofline of device type dt (its first entry of that
// name) to the measurements of g's ops in p and stores the result in its
// Calibration. It records the ops' features in the measurements first
// (FillFeatures), so a profile written before they were kept is refitted.
func Calibrate(p *Profile, g *graph.Graph, dtName string) (*Calibration, error) {
	dt := p.DeviceType(dtName)
	if dt == nil {
		return nil, fmt.Errorf("the profile has no device type %q", dtName)
	}
	samples := Samples(p, g, dt)
	if len(samples) == 0 {
		return nil, fmt.Errorf("the profile has no measurements of this model's ops on %q to calibrate with", dtName)
	}
	c := FitSamples(samples, dt)
	if p.Model != "" {
		c.Models = []string{p.Model}
	}
	dt.Calibration = c
	return c, nil
}

// CalibratePooled fits one calibration of device type dtName at threads
// threads (the entries of exactly that count; 0: those that do not state
// one) to the measurements of every profile in ps, whatever models they measured:
// the fit needs only each measurement's features (FLOPs, bytes, working
// set), which profiles record since features were added. A profile with
// measurements of that device type but without features is an error
// naming it: refit it with its model (`opplace profile MODEL --from
// FILE`). Features are priced on PooledDeviceType's roofline, which Merge
// also gives the merged profile's entry. The result is not stored.
func CalibratePooled(ps []*Profile, dtName string, threads int) (*Calibration, error) {
	var ref *DeviceType
	var use []*Profile
	var models []string
	for i, p := range ps {
		d := p.entry(dtName, threads)
		if d == nil {
			continue
		}
		missing := 0
		for j := range p.Ops {
			m := &p.Ops[j]
			if d.of(m) && m.lacksFeatures() {
				missing++
			}
		}
		label := Label(p, i)
		if missing > 0 {
			return nil, fmt.Errorf("%s: %d measurements on %q have no op features (flops, bytes; the profile predates them): refit them by reading the profile again together with the model it measured, at the shapes it was measured at (opplace profile MODEL with the profile as its source)",
				label, missing, dtName)
		}
		if ref == nil {
			r := PooledDeviceType(ps, dtName, threads)
			ref = &r
		}
		// Each profile is read at its own entry's thread count.
		use = append(use, p.Relabel(d, ref))
		models = append(models, label)
	}
	if ref == nil {
		return nil, fmt.Errorf("no profile has device type %q%s", dtName, threadsNote(threads))
	}
	samples := collect(use, ref, nil)
	if len(samples) == 0 {
		return nil, fmt.Errorf("the profiles have no measurements on %q%s to calibrate with", dtName, threadsNote(threads))
	}
	c := FitSamples(samples, ref)
	c.Models = models
	return c, nil
}

// PooledDeviceType is the roofline of device type dtName at exactly
// threads threads over the profiles that have it: the first one's entry
// with the median of their peak FLOP/s, bandwidth and launch overhead
// (this machine's CPU is measured with each profile, and one measurement
// taken while other jobs load the machine can be far off). The zero value
// when none has it.
func PooledDeviceType(ps []*Profile, dtName string, threads int) DeviceType {
	var out DeviceType
	var peak, bw, launch []float64
	for _, p := range ps {
		d := p.entry(dtName, threads)
		if d == nil {
			continue
		}
		if peak == nil {
			out = *d
			out.Calibration = nil
		}
		peak = append(peak, d.PeakFLOPS)
		bw = append(bw, d.MemoryBandwidth)
		launch = append(launch, d.LaunchOverhead)
	}
	if len(peak) > 1 {
		out.PeakFLOPS, out.MemoryBandwidth, out.LaunchOverhead = sig(median(peak)), sig(median(bw)), sig(median(launch))
	}
	return out
}

func threadsNote(threads int) string {
	if threads == 0 {
		return ""
	}
	return fmt.Sprintf(" at %d threads", threads)
}

// FitSamples fits a MethodShape calibration to samples priced on dt: per
// family with at least MinFamilySamples distinct ops, per group (compute:
// conv and matmul; memory: the rest) and over all ops.
func FitSamples(samples []Sample, dt *DeviceType) *Calibration {
	c := &Calibration{Method: MethodShape}
	fams := map[string][]Sample{}
	var names []string
	add := func(name string, s Sample) {
		if _, ok := fams[name]; !ok {
			names = append(names, name)
		}
		fams[name] = append(fams[name], s)
	}
	for _, s := range samples {
		add(s.Family, s)
		add(Group(s.Family), s)
	}
	slices.Sort(names)
	for _, n := range names {
		if len(fams[n]) >= MinFamilySamples {
			c.Families = append(c.Families, fitShape(n, fams[n], dt))
		}
	}
	c.Families = append(c.Families, fitShape(FamilyAll, samples, dt))
	before := make([]float64, len(samples))
	after := make([]float64, len(samples))
	for i, s := range samples {
		before[i] = relErr(s.Default, s.Measured)
		after[i] = relErr(s.Predict(c.Fit(s.Family), dt), s.Measured)
	}
	c.Before, c.After = Stats(before), Stats(after)
	// Per fit: its errors on the ops it prices.
	for i := range c.Families {
		f := &c.Families[i]
		var b, a []float64
		for _, s := range samples {
			if c.Fit(s.Family) == f {
				b = append(b, relErr(s.Default, s.Measured))
				a = append(a, relErr(s.Predict(f, dt), s.Measured))
			}
		}
		if len(a) > 0 {
			sb, sa := Stats(b), Stats(a)
			f.Before, f.After = &sb, &sa
		}
	}
	return c
}

// Check is how well a calibration predicts a profile's measurements.
type Check struct {
	// Ops is over the distinct measured ops; Families per family.
	Ops      ErrorStats
	Families map[string]ErrorStats
	// MeasuredS sums the measured times of every measured op (each op,
	// not each key); PredictedS sums the calibration's times of the same
	// ops, and WholeRelErr is their relative difference: the error of a
	// whole-model time on one device.
	MeasuredS, PredictedS, WholeRelErr float64
}

// CheckCalibration prices p's measurements of device type dt's name and
// threads that carry features with c (fitted for dt; nil: the
// uncalibrated roofline) and compares.
func CheckCalibration(c *Calibration, dt *DeviceType, p *Profile) Check {
	samples := collect([]*Profile{p}, dt, nil)
	out := Check{Families: map[string]ErrorStats{}}
	var all []float64
	byFam := map[string][]float64{}
	def := defaultFit(dt)
	for _, s := range samples {
		f := &def
		if c != nil {
			if cf := c.Fit(s.Family); cf != nil {
				f = cf
			}
		}
		pred := s.Predict(f, dt)
		e := relErr(pred, s.Measured)
		all = append(all, e)
		byFam[s.Family] = append(byFam[s.Family], e)
		out.MeasuredS += s.Measured * float64(s.Count)
		out.PredictedS += pred * float64(s.Count)
	}
	out.Ops = Stats(all)
	for f, e := range byFam {
		out.Families[f] = Stats(e)
	}
	if out.MeasuredS > 0 {
		out.WholeRelErr = round4(relErr(out.PredictedS, out.MeasuredS))
	}
	return out
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

// shape says which terms of FamilyFit a fit frees.
type shape struct {
	ramp     bool // ComputeHalfFLOPs
	overhead bool // OverheadS (else the device's launch overhead)
	cache    bool // CacheEfficiency at CacheBytes
}

// fitShape fits a family's roofline to its samples, minimising the
// squared log of predicted/measured (relative error, symmetric in over-
// and under-prediction) by Levenberg-Marquardt (gonum mat) over the logs
// of the free parameters.
//
// Compute families (conv, matmul) free the efficiency ramp: with W the
// op's FLOPs, FLOPs/(peak·e·W/(W+W_half)) = (W + W_half)/(peak·e), so the
// ramp is a fixed cost of W_half/(peak·e) on top of the FLOPs at e_max and
// cannot be told from a fitted overhead on compute-bound ops: the
// overhead is held at the device's launch overhead (at most half the
// fastest op) and W_half takes the rest. The two differ on memory-bound
// ops (the ramp's cost is inside the max, an overhead outside), so the
// family is also fitted with a free overhead and no ramp, and the better
// of the two (three parameters each) is kept. Other families fit their own overhead and may have a cache
// level: for each candidate threshold (between the samples' sorted
// working sets, at least minCacheSamples each side) the fit frees a
// second bandwidth for working sets at or below it; the threshold whose
// fit has the lowest error wins when it beats the one-level fit by the
// Akaike criterion (two more parameters).
func fitShape(name string, s []Sample, dt *DeviceType) FamilyFit {
	compute := Group(name) == FamilyCompute
	sh := shape{ramp: compute, overhead: !compute}
	fixedO := dt.LaunchOverhead
	for _, x := range s {
		fixedO = min(fixedO, x.Measured/2)
	}
	best, bestObj := fitWith(name, s, dt, sh, 0, fixedO)
	if compute {
		// The ramp's fixed cost sits inside the max (memory-bound ops do
		// not pay it), a fitted overhead outside: both have three
		// parameters, the better fit wins.
		if f, obj := fitWith(name, s, dt, shape{overhead: true}, 0, fixedO); obj < bestObj {
			best, bestObj = f, obj
		}
	}
	if !compute && len(s) >= 2*minCacheSamples+2 {
		ws := make([]float64, len(s))
		for i, x := range s {
			ws[i] = x.WorkingSet
		}
		slices.Sort(ws)
		n := float64(len(s))
		aic := func(obj float64, k int) float64 { return n*math.Log(obj/n+1e-12) + 2*float64(k) }
		k := 3
		bestAIC := aic(bestObj, k)
		var cands []float64
		for i := minCacheSamples - 1; i+minCacheSamples < len(ws); i++ {
			if ws[i] < ws[i+1] {
				cands = append(cands, math.Sqrt(ws[i]*ws[i+1]))
			}
		}
		// At most 24 candidates, evenly through the list.
		if len(cands) > 24 {
			var thin []float64
			for j := 0; j < 24; j++ {
				thin = append(thin, cands[j*len(cands)/24])
			}
			cands = thin
		}
		csh := sh
		csh.cache = true
		for _, cb := range cands {
			f, obj := fitWith(name, s, dt, csh, cb, fixedO)
			if a := aic(obj, k+2); a < bestAIC {
				best, bestAIC = f, a
			}
		}
	}
	best.ComputeEfficiency = sig(best.ComputeEfficiency)
	best.ComputeHalfFLOPs = sig(best.ComputeHalfFLOPs)
	best.MemoryEfficiency = sig(best.MemoryEfficiency)
	best.CacheEfficiency = sig(best.CacheEfficiency)
	best.CacheBytes = math.Round(best.CacheBytes)
	best.OverheadS = sig(best.OverheadS)
	return best
}

// fitWith fits the free parameters of sh (the cache threshold, when
// freed, held at cacheBytes) and returns the fit and its objective.
func fitWith(name string, s []Sample, dt *DeviceType, sh shape, cacheBytes, fixedO float64) (FamilyFit, float64) {
	// Starting point: the flat defaults, a ramp at the smallest op's
	// FLOPs, the device's overhead.
	minW := math.Inf(1)
	for _, x := range s {
		if x.FLOPs > 0 {
			minW = min(minW, x.FLOPs)
		}
	}
	if math.IsInf(minW, 1) {
		minW = 1e6
	}
	o0 := max(fixedO, 1e-7)
	// The max makes a bound that limits no op flat in its parameter, so
	// the fit starts from the flat defaults and from the efficiencies that
	// make each bound alone meet the median op, keeping the best.
	var cr, mr []float64
	for _, x := range s {
		if x.Compute > 0 {
			cr = append(cr, x.Compute/x.Measured)
		}
		mr = append(mr, x.Memory/x.Measured)
	}
	clamp := func(v float64) float64 { return math.Log(min(max(v, 1e-4), 1e2)) }
	ces := []float64{clamp(cost.DefaultComputeEfficiency)}
	if len(cr) > 0 {
		ces = append(ces, clamp(median(cr)))
	}
	mes := []float64{clamp(cost.DefaultMemoryEfficiency), clamp(median(mr))}
	build := func(x []float64) FamilyFit {
		f := FamilyFit{Family: name, ComputeEfficiency: math.Exp(x[0]), MemoryEfficiency: math.Exp(x[1]), OverheadS: fixedO, Samples: len(s)}
		i := 2
		if sh.ramp {
			f.ComputeHalfFLOPs = math.Exp(x[i])
			i++
		}
		if sh.overhead {
			f.OverheadS = math.Exp(x[i])
			i++
		}
		if sh.cache {
			f.CacheEfficiency = math.Exp(x[i])
			f.CacheBytes = cacheBytes
		}
		return f
	}
	resid := func(x []float64, r []float64) bool {
		for _, v := range x {
			// Keep the search in a physical range: sizes and times
			// short of overflow, efficiencies below 1000x peak.
			if v > 60 || v < -60 {
				return false
			}
		}
		if x[0] > math.Log(1e3) || x[1] > math.Log(1e3) {
			return false
		}
		f := build(x)
		for i := range s {
			r[i] = math.Log(s[i].Predict(&f, dt) / s[i].Measured)
		}
		return true
	}
	var best []float64
	bestObj := math.Inf(1)
	for _, ce := range ces {
		for _, me := range mes {
			x0 := []float64{ce, me}
			if sh.ramp {
				x0 = append(x0, math.Log(minW))
			}
			if sh.overhead {
				x0 = append(x0, math.Log(o0))
			}
			if sh.cache {
				x0 = append(x0, me+math.Log(2))
			}
			if x, obj := levenbergMarquardt(resid, x0, len(s)); obj < bestObj || best == nil {
				best, bestObj = x, obj
			}
		}
	}
	return build(best), bestObj
}

// levenbergMarquardt minimises the sum of squared residuals resid(x)
// (n of them; false: x is out of range) from x0, with a forward-difference
// Jacobian and gonum's mat for the damped normal equations. It returns
// the best point and its sum of squares.
func levenbergMarquardt(resid func(x, r []float64) bool, x0 []float64, n int) ([]float64, float64) {
	k := len(x0)
	x := slices.Clone(x0)
	r := make([]float64, n)
	sumsq := func(r []float64) float64 {
		var s float64
		for _, v := range r {
			s += v * v
		}
		return s
	}
	if !resid(x, r) {
		return x, math.Inf(1)
	}
	cur := sumsq(r)
	lambda := 1e-2
	J := mat.NewDense(n, k, nil)
	rt := make([]float64, n)
	xt := make([]float64, k)
	for iter := 0; iter < 200 && lambda < 1e10; iter++ {
		// Jacobian by forward differences in log-parameter space.
		for j := 0; j < k; j++ {
			copy(xt, x)
			h := 1e-6 * max(1, math.Abs(x[j]))
			xt[j] += h
			if !resid(xt, rt) {
				xt[j] = x[j] - h
				h = -h
				if !resid(xt, rt) {
					return x, cur
				}
			}
			for i := 0; i < n; i++ {
				J.Set(i, j, (rt[i]-r[i])/h)
			}
		}
		var JtJ mat.Dense
		JtJ.Mul(J.T(), J)
		var g mat.VecDense
		g.MulVec(J.T(), mat.NewVecDense(n, slices.Clone(r)))
		improved := false
		for !improved && lambda < 1e10 {
			A := mat.DenseCopyOf(&JtJ)
			for j := 0; j < k; j++ {
				A.Set(j, j, A.At(j, j)*(1+lambda)+1e-12)
			}
			var d mat.VecDense
			if err := d.SolveVec(A, &g); err != nil {
				lambda *= 10
				continue
			}
			for j := 0; j < k; j++ {
				xt[j] = x[j] - d.AtVec(j)
			}
			if resid(xt, rt) {
				if s := sumsq(rt); s < cur {
					step := cur - s
					copy(x, xt)
					copy(r, rt)
					cur = s
					lambda = max(lambda/10, 1e-9)
					improved = true
					if step < 1e-12*max(cur, 1e-12) {
						return x, cur
					}
					continue
				}
			}
			lambda *= 10
		}
	}
	return x, cur
}

// sig rounds to six significant digits so files stay readable and stable.
func sig(v float64) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 6, 64), 64)
	return r
}

func median(v []float64) float64 { return stats.Median(v) }

func quantile(v []float64, q float64) float64 { return stats.Quantile(v, q) }
