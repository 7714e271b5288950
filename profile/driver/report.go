package driver

import (
	"fmt"
	"io"
	"slices"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/profile"
)

// Report checks a calibrated profile: its calibration per family, the ops
// it predicts worst, and the whole graph on one device of its type.
type Report struct {
	// Calibration is the device type's calibration, nil when it has
	// none; Worst are the (at most 5) ops it predicts worst, worst first.
	Calibration *profile.Calibration
	Worst       []Predicted
	// Ops is the graph's op count, Measured how many the profile has a
	// time for and MeasuredMS the sum of those times.
	Ops, Measured int
	MeasuredMS    float64
	// Steps are the simulated step of the graph on one device of the
	// type with the roofline, the calibrated roofline and the profile
	// (measured times, calibrated roofline for the rest).
	Steps []Step
}

// Predicted is a measured op with its calibrated prediction.
type Predicted struct {
	profile.Sample
	Calibrated float64 // seconds
}

// Step is the simulated step under one cost model.
type Step struct {
	Model   string
	Seconds float64
}

// NewReport checks p's device type dtName on g.
func NewReport(p *profile.Profile, g *graph.Graph, dtName string) *Report {
	dt := p.DeviceType(dtName)
	r := &Report{Calibration: dt.Calibration, Ops: len(g.Ops)}
	if c := dt.Calibration; c != nil {
		samples := profile.Samples(p, g, dt)
		slices.SortStableFunc(samples, func(x, y profile.Sample) int {
			ex := relErr(c.Fit(x.Family), x, dt)
			ey := relErr(c.Fit(y.Family), y, dt)
			switch {
			case ex > ey:
				return -1
			case ex < ey:
				return 1
			}
			return 0
		})
		for _, s := range samples[:min(5, len(samples))] {
			r.Worst = append(r.Worst, Predicted{s, s.Predict(c.Fit(s.Family), dt)})
		}
	}
	// Whole graph, one device of this type: the simulator runs the ops
	// one after another, so its step is the sum of the model's op times.
	seen := map[string]bool{}
	for _, ms := range p.Ops {
		if ms.DeviceType == dtName && !seen[ms.Name] {
			if _, ok := g.OpByName(ms.Name); ok {
				seen[ms.Name] = true
				r.MeasuredMS += ms.MedianMS
				r.Measured++
			}
		}
	}
	c := oneDeviceCluster(dt)
	calOnly := *p
	calOnly.Ops = nil
	for _, row := range []struct {
		name  string
		model cost.Model
	}{
		{"roofline", cost.Roofline{}},
		{"calibrated roofline", profile.NewModel(&calOnly, nil)},
		{"profile (measured + calibrated)", profile.NewModel(p, nil)},
	} {
		r.Steps = append(r.Steps, Step{row.name, simulateOne(g, c, row.model)})
	}
	return r
}

func relErr(f *profile.FamilyFit, s profile.Sample, dt *profile.DeviceType) float64 {
	d := s.Predict(f, dt) - s.Measured
	if d < 0 {
		d = -d
	}
	return d / s.Measured
}

// oneDeviceCluster is a cluster of a single device of the profile's type.
func oneDeviceCluster(dt *profile.DeviceType) *cluster.Cluster {
	t := dt.Cluster()
	mem := dt.Memory
	if mem <= 0 {
		mem = 1 << 50
	}
	return &cluster.Cluster{
		Name:    dt.Name,
		Hosts:   []cluster.Host{{Name: "local", Intra: cluster.Link{Kind: "local", Bandwidth: dt.MemoryBandwidth}}},
		Devices: []cluster.Device{{Name: "cpu0", Type: t, Memory: mem}},
	}
}

// simulateOne is the simulated step of g on c's single device: the sum
// of its op times, which is what the simulator gives on one device.
func simulateOne(g *graph.Graph, c *cluster.Cluster, m cost.Model) float64 {
	var s float64
	t := cost.NewTable(g, c, m)
	for i := range g.Ops {
		s += t.OpTime(graph.OpID(i), 0)
	}
	return s
}

// GorgoniaClusterSource says how the gorgonia measurement measured the
// CPU, for a cluster file of it.
const GorgoniaClusterSource = `# peak_flops is a 512x512 float32 GEMM through gorgonia (gonum BLAS),
# memory_bandwidth a 64 MiB copy (read + write), launch_overhead the median
# run of a one-element op.`

// WriteCPUCluster writes a one-host, one-device cluster file of the
// measured CPU; source is comment lines saying how it was measured
// (Result.ClusterSource).
func WriteCPUCluster(w io.Writer, dt *profile.DeviceType, source string) error {
	threads := ""
	if dt.Threads > 0 {
		threads = fmt.Sprintf("\n    threads: %d", dt.Threads)
	}
	_, err := fmt.Fprintf(w, `# This machine's CPU as measured by opplace profile: %s.
%s
name: %s
device_types:
  - name: %s
    peak_flops: {float32: %g}
    memory_bandwidth: %gB/s
    launch_overhead: %gus
    memory: %dB%s
hosts:
  - name: local
    intra: {kind: memory, bandwidth: %gB/s, latency: 0us}
devices:
  - {name: cpu0, type: %s, host: local}
`, dt.Description, source, dt.Name, dt.Name, dt.PeakFLOPS, dt.MemoryBandwidth, dt.LaunchOverhead*1e6, max(dt.Memory, 1<<30), threads, dt.MemoryBandwidth, dt.Name)
	return err
}
