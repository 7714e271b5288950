package profile_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/profile"
)

var synthCPU = profile.DeviceType{Name: "synth", PeakFLOPS: 1e10, MemoryBandwidth: 1e10, LaunchOverhead: 5e-6}

// synth makes samples of one family whose times the fit f generated.
func synth(family string, f profile.FamilyFit, feats [][3]float64) []profile.Sample {
	var out []profile.Sample
	for _, x := range feats {
		s := profile.Sample{Family: family, FLOPs: x[0], Bytes: x[1], WorkingSet: x[2]}
		s.Measured = s.Predict(&f, &synthCPU)
		out = append(out, s)
	}
	return out
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol*math.Abs(want) }

// The compute families' ramp: e_max and W_half are recovered from times
// the ramp generated, at the device's launch overhead.
func TestFitRecoversRamp(t *testing.T) {
	for _, tc := range []struct {
		family      string
		emax, whalf float64
		emem        float64
	}{
		{profile.FamilyMatMul, 0.6, 2e7, 0.5},
		{profile.FamilyConv, 0.3, 5e8, 0.2},
		{profile.FamilyMatMul, 0.9, 1e6, 0.8},
	} {
		truth := profile.FamilyFit{ComputeEfficiency: tc.emax, ComputeHalfFLOPs: tc.whalf, MemoryEfficiency: tc.emem, OverheadS: synthCPU.LaunchOverhead}
		var feats [][3]float64
		for w := 1e5; w <= 1e11; w *= 3 {
			// Mostly compute-bound; every fourth op streams a lot.
			b := w / 50
			if len(feats)%4 == 3 {
				b = w * 2
			}
			feats = append(feats, [3]float64{w, b, b})
		}
		cal := profile.FitSamples(synth(tc.family, truth, feats), &synthCPU)
		f := cal.Fit(tc.family)
		if f.Family != tc.family || !near(f.ComputeEfficiency, tc.emax, 0.01) || !near(f.ComputeHalfFLOPs, tc.whalf, 0.02) || !near(f.MemoryEfficiency, tc.emem, 0.01) {
			t.Errorf("%s: fit e_max %g W_half %g e_mem %g, want %g %g %g", tc.family, f.ComputeEfficiency, f.ComputeHalfFLOPs, f.MemoryEfficiency, tc.emax, tc.whalf, tc.emem)
		}
		if cal.After.MedianRelErr > 0.005 {
			t.Errorf("%s: error after %+v", tc.family, cal.After)
		}
	}
}

// Memory-bound families' cache level: ops whose working set fits reach a
// higher bandwidth; the threshold lands between the samples around it.
func TestFitRecoversCache(t *testing.T) {
	for _, tc := range []struct {
		family       string
		cache        float64
		ecache, emem float64
		overhead     float64
	}{
		{profile.FamilyElementwise, 1 << 20, 2.0, 0.4, 3e-6},
		{profile.FamilyReduce, 8 << 20, 1.2, 0.3, 2e-5},
		{profile.FamilyMovement, 256 << 10, 0.9, 0.15, 1e-6},
	} {
		truth := profile.FamilyFit{ComputeEfficiency: 0.7, MemoryEfficiency: tc.emem, CacheEfficiency: tc.ecache, CacheBytes: tc.cache, OverheadS: tc.overhead}
		var feats [][3]float64
		for b := 4e3; b <= 4e9; b *= 2 {
			feats = append(feats, [3]float64{b / 16, b, b})
		}
		cal := profile.FitSamples(synth(tc.family, truth, feats), &synthCPU)
		f := cal.Fit(tc.family)
		if f.Family != tc.family || f.CacheEfficiency == 0 {
			t.Fatalf("%s: no cache level: %+v", tc.family, f)
		}
		// Samples double in size: the threshold is within a factor 2.
		if f.CacheBytes < tc.cache/2 || f.CacheBytes > tc.cache*2 {
			t.Errorf("%s: cache %g bytes, want %g", tc.family, f.CacheBytes, tc.cache)
		}
		if !near(f.CacheEfficiency, tc.ecache, 0.02) || !near(f.MemoryEfficiency, tc.emem, 0.02) || !near(f.OverheadS, tc.overhead, 0.05) {
			t.Errorf("%s: e_cache %g e_mem %g overhead %g, want %g %g %g", tc.family, f.CacheEfficiency, f.MemoryEfficiency, f.OverheadS, tc.ecache, tc.emem, tc.overhead)
		}
	}
	// One bandwidth: no cache level is fitted.
	flat := profile.FamilyFit{ComputeEfficiency: 0.7, MemoryEfficiency: 0.5, OverheadS: 4e-6}
	var feats [][3]float64
	for b := 4e3; b <= 4e9; b *= 2 {
		feats = append(feats, [3]float64{b / 16, b, b})
	}
	if f := profile.FitSamples(synth(profile.FamilyElementwise, flat, feats), &synthCPU).Fit(profile.FamilyElementwise); f.CacheEfficiency != 0 {
		t.Errorf("flat bandwidth got a cache level: %+v", f)
	}
}

// A family with too few ops uses its group's fit, else the one over all.
func TestFitFallback(t *testing.T) {
	f := profile.FamilyFit{ComputeEfficiency: 0.5, MemoryEfficiency: 0.5, OverheadS: 5e-6}
	var s []profile.Sample
	for i, fam := range []string{"conv", "conv", "matmul", "matmul", "conv", "matmul", "pool", "elementwise"} {
		w := 1e6 * float64(i+1)
		s = append(s, synth(fam, f, [][3]float64{{w, w / 10, w / 10}})...)
	}
	cal := profile.FitSamples(s, &synthCPU)
	for fam, want := range map[string]string{"conv": profile.FamilyCompute, "matmul": profile.FamilyCompute, "pool": profile.FamilyAll, "elementwise": profile.FamilyAll} {
		if got := cal.Fit(fam).Family; got != want {
			t.Errorf("Fit(%s) = %s, want %s", fam, got, want)
		}
	}
}

func loadProfile(t *testing.T, name string) *profile.Profile {
	t.Helper()
	p, err := profile.Load("../testdata/profiles/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Real gorgonia profiles of this repository's CPU (testdata/profiles, batch
// 1): a calibration pooled from ResNet-50 and GPT-2 prices BERT's measured
// ops better than one from either alone, per op and for the whole model.
func TestPooledTransfers(t *testing.T) {
	resnet := loadProfile(t, "resnet50_b1_gorgonia_cpu.json")
	gpt2 := loadProfile(t, "gpt2_small_b1_gorgonia_cpu.json")
	bert := loadProfile(t, "bert_base_b1_gorgonia_cpu.json")
	const dt = profile.DefaultCPUType
	check := func(ps ...*profile.Profile) profile.Check {
		c, err := profile.CalibratePooled(ps, dt, 0)
		if err != nil {
			t.Fatal(err)
		}
		return profile.CheckCalibration(c, ps[0].DeviceType(dt), bert)
	}
	a, b, pooled := check(resnet), check(gpt2), check(resnet, gpt2)
	t.Logf("BERT held out: resnet50 %+v whole %.3f; gpt2 %+v whole %.3f; pooled %+v whole %.3f", a.Ops, a.WholeRelErr, b.Ops, b.WholeRelErr, pooled.Ops, pooled.WholeRelErr)
	if pooled.Ops.MedianRelErr >= min(a.Ops.MedianRelErr, b.Ops.MedianRelErr) {
		t.Errorf("pooled median op error %.3f, alone %.3f and %.3f", pooled.Ops.MedianRelErr, a.Ops.MedianRelErr, b.Ops.MedianRelErr)
	}
	if pooled.WholeRelErr >= min(a.WholeRelErr, b.WholeRelErr) || pooled.WholeRelErr > 0.2 {
		t.Errorf("pooled whole-model error %.3f, alone %.3f and %.3f", pooled.WholeRelErr, a.WholeRelErr, b.WholeRelErr)
	}
	// The merged profile keeps every measurement and both models.
	m := profile.Merge([]*profile.Profile{resnet, gpt2})
	if len(m.Ops) != len(resnet.Ops)+len(gpt2.Ops) || len(m.DeviceTypes) != 1 || m.DeviceTypes[0].Calibration != nil {
		t.Errorf("merged: %d ops, %d device types", len(m.Ops), len(m.DeviceTypes))
	}
	c, _ := profile.CalibratePooled([]*profile.Profile{resnet, gpt2}, dt, 0)
	if strings.Join(c.Models, ",") != "resnet50.onnx,gpt2_small.onnx" || c.Method != profile.MethodShape {
		t.Errorf("models %v method %q", c.Models, c.Method)
	}
}

// A profile written before measurements carried features still loads and
// prices with its flat calibration; pooling it is an error naming it and
// the fix; Calibrate with its model refits it.
func TestOldProfile(t *testing.T) {
	old := `{"format": "opplace-profile/1", "model": "tiny.onnx", "source": "gorgonia",
 "device_types": [{"name": "test-cpu", "peak_flops": 1e10, "memory_bandwidth": 1e10, "launch_overhead_s": 1e-6,
  "calibration": {"families": [{"family": "all", "compute_efficiency": 0.5, "memory_efficiency": 0.5, "overhead_s": 1e-5, "samples": 3}],
   "before": {"samples": 3, "median_rel_err": 0.5, "p90_rel_err": 0.6}, "after": {"samples": 3, "median_rel_err": 0.1, "p90_rel_err": 0.2}}}],
 "ops": [{"name": "matmul", "key": "", "type": "MatMul", "device_type": "test-cpu", "median_ms": 2, "p10_ms": 2, "p90_ms": 2, "runs": 3},
  {"name": "relu", "key": "", "type": "Relu", "device_type": "test-cpu", "median_ms": 0.5, "p10_ms": 0.5, "p90_ms": 0.5, "runs": 3}]}`
	p, err := profile.Parse("old.json", []byte(old))
	if err != nil {
		t.Fatal(err)
	}
	g := tiny(t)
	dt := p.DeviceType("test-cpu")
	// Relu, priced by the old flat fit: bytes at half bandwidth + 10us.
	relu, _ := g.OpByName("relu")
	want := float64(profile.WorkingSet(g, relu))/(1e10*0.5) + 1e-5
	if got := dt.Calibration.Predict(g, relu, dt); !near(got, want, 1e-9) {
		t.Errorf("old calibration prices relu %g, want %g", got, want)
	}
	_, err = profile.CalibratePooled([]*profile.Profile{p}, "test-cpu", 0)
	if err == nil || !strings.Contains(err.Error(), "tiny.onnx") || !strings.Contains(err.Error(), "have no op features") {
		t.Errorf("pooling an old profile: %v", err)
	}
	if n := profile.FillFeatures(p, g); n != 2 {
		t.Errorf("FillFeatures set %d, want 2", n)
	}
	if _, err := profile.CalibratePooled([]*profile.Profile{p}, "test-cpu", 0); err != nil {
		t.Errorf("after FillFeatures: %v", err)
	}
}

// plan --profile prices a cluster device type with the profile's entry of
// its thread count, and says so when it has none.
func TestModelThreads(t *testing.T) {
	g := tiny(t)
	mm, _ := g.OpByName("matmul")
	key := profile.OpKey(g, mm)
	one, two := testCPU, testCPU
	one.Threads, two.Threads = 1, 2
	p := &profile.Profile{Format: profile.FormatVersion, DeviceTypes: []profile.DeviceType{one, two}, Ops: []profile.Measurement{
		{Name: "matmul", Key: key, DeviceType: "test-cpu", Threads: 1, MedianMS: 4},
		{Name: "matmul", Key: key, DeviceType: "test-cpu", Threads: 2, MedianMS: 2.5},
	}}
	m := profile.NewModel(p, nil)
	c := &cluster.Cluster{Name: "c", Hosts: []cluster.Host{{Name: "h"}}}
	for _, tc := range []struct {
		threads int
		want    float64
		advice  bool
	}{{0, 4e-3, false}, {1, 4e-3, false}, {2, 2.5e-3, false}, {3, 2.5e-3, true}, {8, 2.5e-3, true}} {
		cdt := testCPU.Cluster()
		cdt.Threads = tc.threads
		if got := m.OpTime(g, mm, cdt); got != tc.want {
			t.Errorf("threads %d: %g, want %g", tc.threads, got, tc.want)
		}
		c.Devices = []cluster.Device{{Name: "d", Type: cdt, Memory: 1 << 30}}
		adv := strings.Join(m.Advice(g, c, 0), "\n")
		if got := strings.Contains(adv, "threads"); got != tc.advice {
			t.Errorf("threads %d: advice %q", tc.threads, adv)
		}
	}
	if p.DeviceTypeAt("test-cpu", 2).Threads != 2 || p.DeviceTypeAt("test-cpu", 0).Threads != 1 || p.DeviceTypeAt("test-cpu", 5) != nil {
		t.Error("DeviceTypeAt")
	}
	// The same name and thread count twice is an error.
	p.DeviceTypes[1].Threads = 1
	var b strings.Builder
	_ = p.Write(&b)
	if _, err := profile.Parse("dup.json", []byte(b.String())); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate entry: %v", err)
	}
}

var _ = graph.Float32

// Profiles of one device type at two thread counts pool into one profile
// with an entry per count, each calibrated on its own measurements.
func TestPooledThreads(t *testing.T) {
	two := loadProfile(t, "bert_base_b1_gorgonia_cpu.json")
	one := loadProfile(t, "bert_base_b1_gorgonia_cpu.json")
	for _, p := range []*profile.Profile{one, two} {
		th := 2
		if p == one {
			th = 1
		}
		p.DeviceTypes[0].Threads = th
		for i := range p.Ops {
			p.Ops[i].Threads = th
			if th == 1 {
				p.Ops[i].MedianMS *= 1.5 // one thread: everything 1.5x slower
			}
		}
	}
	m := profile.Merge([]*profile.Profile{one, two})
	if len(m.DeviceTypes) != 2 || m.DeviceTypeAt(profile.DefaultCPUType, 1) == nil || m.DeviceTypeAt(profile.DefaultCPUType, 2) == nil {
		t.Fatalf("merged device types %+v", m.DeviceTypes)
	}
	c1, err := profile.CalibratePooled([]*profile.Profile{m}, profile.DefaultCPUType, 1)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := profile.CalibratePooled([]*profile.Profile{m}, profile.DefaultCPUType, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := profile.CalibratePooled([]*profile.Profile{m}, profile.DefaultCPUType, 4); err == nil || !strings.Contains(err.Error(), "at 4 threads") {
		t.Errorf("no 4-thread entry: %v", err)
	}
	dt := m.DeviceTypeAt(profile.DefaultCPUType, 2)
	var ratios []float64
	for _, s := range profile.SamplesOf([]*profile.Profile{m}, dt) {
		ratios = append(ratios, s.Predict(c1.Fit(s.Family), dt)/s.Predict(c2.Fit(s.Family), dt))
	}
	slices.Sort(ratios)
	if r := ratios[len(ratios)/2]; !near(r, 1.5, 0.05) {
		t.Errorf("median 1-thread/2-thread prediction %.3f, want 1.5", r)
	}
}
