package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/graph"
)

const testdata = "../testdata/clusters"

func load(t *testing.T, name string) *Cluster {
	t.Helper()
	c, err := Load(filepath.Join(testdata, name))
	if err != nil {
		t.Fatalf("Load(%s): %v", name, err)
	}
	return c
}

// transferTime is Link.Time's formula with the figures a test expects.
func transferTime(latency, bandwidth float64, bytes int64) float64 {
	return latency + float64(bytes)/bandwidth
}

func TestLoad4xV100(t *testing.T) {
	c := load(t, "4xV100.yaml")
	if c.Name != "4xV100" || len(c.Hosts) != 1 || c.Hosts[0].Name != "node0" {
		t.Fatalf("name %q hosts %+v", c.Name, c.Hosts)
	}
	if want := (Link{Kind: "pcie", Bandwidth: 16e9, Latency: 10e-6}); c.Hosts[0].Intra != want {
		t.Errorf("intra = %+v, want %+v", c.Hosts[0].Intra, want)
	}
	if len(c.Devices) != 4 {
		t.Fatalf("%d devices, want 4", len(c.Devices))
	}
	for i, d := range c.Devices {
		if want := "gpu" + string(rune('0'+i)); d.Name != want {
			t.Errorf("device %d named %q, want %q", i, d.Name, want)
		}
		if d.Type.Name != "V100-16GB" || d.Memory != 16<<30 || d.Host != 0 {
			t.Errorf("device %s: type %s memory %d host %d", d.Name, d.Type.Name, d.Memory, d.Host)
		}
		if d.Type != c.Devices[0].Type {
			t.Errorf("device %s does not share its *DeviceType", d.Name)
		}
	}
	nv := Link{Kind: "nvlink", Bandwidth: 50e9, Latency: 2e-6}
	if len(c.Direct) != 6 {
		t.Errorf("%d direct links, want 6 (all pairs of 4)", len(c.Direct))
	}
	for a := 0; a < 4; a++ {
		for b := 0; b < 4; b++ {
			if a != b && c.Path(a, b) != nv {
				t.Errorf("Path(%d, %d) = %+v, want %+v", a, b, c.Path(a, b), nv)
			}
		}
	}
	const n = 256 << 20
	if got, want := c.TransferTime(0, 3, n), transferTime(2e-6, 50e9, n); got != want {
		t.Errorf("TransferTime(gpu0, gpu3, 256MiB) = %v, want %v", got, want)
	}
	if got := c.TransferTime(2, 2, n); got != 0 {
		t.Errorf("TransferTime on one device = %v, want 0", got)
	}
	if c.TotalMemory() != 64<<30 {
		t.Errorf("TotalMemory = %d", c.TotalMemory())
	}
}

func TestLoad8xA1002Host(t *testing.T) {
	c := load(t, "8xA100-2host.yaml")
	if len(c.Hosts) != 2 || len(c.Devices) != 8 {
		t.Fatalf("%d hosts, %d devices; want 2, 8", len(c.Hosts), len(c.Devices))
	}
	for i, d := range c.Devices {
		if d.Host != i/4 || d.Type.Name != "A100-80GB" || d.Memory != 80<<30 {
			t.Errorf("device %s: host %d type %s memory %d", d.Name, d.Host, d.Type.Name, d.Memory)
		}
	}
	if i, ok := c.DeviceIndex("n1gpu2"); !ok || i != 6 {
		t.Errorf("DeviceIndex(n1gpu2) = %d, %v", i, ok)
	}
	nv := Link{Kind: "nvlink", Bandwidth: 100e9, Latency: 2e-6}
	net := Link{Kind: "network", Bandwidth: 12.5e9, Latency: 5e-6}
	tests := []struct {
		a, b int
		want Link
	}{
		{0, 1, nv}, {0, 3, nv}, {2, 1, nv},
		{4, 5, nv}, {7, 4, nv},
		{0, 4, net}, {3, 7, net}, {6, 1, net},
	}
	for _, tt := range tests {
		if got := c.Path(tt.a, tt.b); got != tt.want {
			t.Errorf("Path(%s, %s) = %+v, want %+v", c.Devices[tt.a].Name, c.Devices[tt.b].Name, got, tt.want)
		}
	}
	if len(c.Direct) != 12 || len(c.Network) != 1 {
		t.Errorf("%d direct, %d network links; want 12, 1", len(c.Direct), len(c.Network))
	}
	const n = 1 << 30
	if got, want := c.TransferTime(1, 5, n), transferTime(5e-6, 12.5e9, n); got != want {
		t.Errorf("TransferTime across hosts = %v, want %v", got, want)
	}
	if got, want := c.TransferTime(1, 2, n), transferTime(2e-6, 100e9, n); got != want {
		t.Errorf("TransferTime within a host = %v, want %v", got, want)
	}
}

func TestLoadHetero(t *testing.T) {
	c := load(t, "hetero.yaml")
	want := []struct {
		name, typ string
		memory    int64
		fp32, bw  float64
	}{
		{"v100a", "V100-16GB", 16 << 30, 15.7e12, 900e9},
		{"v100b", "V100-16GB", 16 << 30, 15.7e12, 900e9},
		{"t4", "T4", 15 << 30, 8.1e12, 320e9},
		{"a100", "A100-40GB-PCIe", 40 << 30, 19.5e12, 1555e9},
		{"cpu0", "Workstation-CPU", 128 << 30, 1e12, 140.8e9},
	}
	if len(c.Devices) != len(want) {
		t.Fatalf("%d devices, want %d", len(c.Devices), len(want))
	}
	for i, w := range want {
		d := c.Devices[i]
		if d.Name != w.name || d.Type.Name != w.typ || d.Memory != w.memory ||
			d.Type.FLOPS(graph.Float32) != w.fp32 || d.Type.MemoryBandwidth != w.bw {
			t.Errorf("device %d = %s %s mem %d fp32 %v bw %v; want %+v", i, d.Name, d.Type.Name, d.Memory,
				d.Type.FLOPS(graph.Float32), d.Type.MemoryBandwidth, w)
		}
	}
	cpu := c.Devices[4].Type
	if cpu.FLOPS(graph.Float64) != 0.5e12 || cpu.LaunchOverhead != 1e-6 {
		t.Errorf("cpu0 type %+v", cpu)
	}
	// base: copies the preset; the A100 keeps its bf16 figure.
	if c.Devices[3].Type.FLOPS(graph.BFloat16) != 312e12 {
		t.Errorf("a100 bf16 = %v", c.Devices[3].Type.FLOPS(graph.BFloat16))
	}
	if c.Devices[0].Type != c.Devices[1].Type {
		t.Error("v100a and v100b do not share their *DeviceType")
	}
	pcie := Link{Kind: "pcie", Bandwidth: 12e9, Latency: 10e-6}
	if len(c.Direct) != 0 {
		t.Errorf("%d direct links, want 0", len(c.Direct))
	}
	for a := range c.Devices {
		for b := range c.Devices {
			if a != b && c.Path(a, b) != pcie {
				t.Errorf("Path(%d, %d) = %+v, want %+v", a, b, c.Path(a, b), pcie)
			}
		}
	}
	if got, want := c.TransferTime(4, 2, 4096), transferTime(10e-6, 12e9, 4096); got != want {
		t.Errorf("TransferTime(cpu0, t4, 4KiB) = %v, want %v", got, want)
	}
}

func TestParseMinimal(t *testing.T) {
	c, err := Parse([]byte("devices:\n  - {name: g, type: t4}\n  - {name: c, type: CPU, memory: 64GiB}\n"), "dir/min.yml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "min" || len(c.Hosts) != 1 || c.Hosts[0].Name != "host0" {
		t.Errorf("name %q hosts %+v", c.Name, c.Hosts)
	}
	if c.Hosts[0].Intra != (Link{Kind: "pcie", Bandwidth: 16e9, Latency: 10e-6}) {
		t.Errorf("default intra %+v", c.Hosts[0].Intra)
	}
	if c.DefaultNetwork != (Link{Kind: "network", Bandwidth: 12.5e9, Latency: 5e-6}) {
		t.Errorf("default network %+v", c.DefaultNetwork)
	}
	if c.Devices[0].Type.Name != "T4" || c.Devices[1].Memory != 64<<30 {
		t.Errorf("devices %+v", c.Devices)
	}
}

func TestParseFeatures(t *testing.T) {
	src := `
name: feat
device_types:
  - name: v100-16gb          # overrides the preset (names ignore case)
    launch_overhead: 3us
  - name: Fast
    peak_flops: {fp32: 1P, bf16: 2P}
    memory_bandwidth: 10TB/s
    memory: 1TiB
hosts:
  - {name: a}
  - {name: b, intra: {bandwidth: 32GB/s}}   # latency from the default
  - {name: c, intra: {preset: pcie5, latency: 1us}}
devices:
  - {name: x, type: V100-16GB, host: a}
  - {name: f, type: fast, host: b, count: 2}
  - {name: "c{i}-dev", type: Fast, host: c, count: 2}
links:
  - {between: [a, b], preset: ib-hdr}
  - {between: [f0, f1], bandwidth: 1TB/s, latency: 0}
network: {bandwidth: 10Gb/s, latency: 20us}
`
	c, err := Parse([]byte(src), "feat.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range c.Devices {
		names = append(names, d.Name)
	}
	if got := strings.Join(names, " "); got != "x f0 f1 c0-dev c1-dev" {
		t.Errorf("devices %s", got)
	}
	if ty := c.Devices[0].Type; ty.LaunchOverhead != 3e-6 || ty.FLOPS(graph.Float16) != 125e12 || ty.Name != "v100-16gb" {
		t.Errorf("override: %+v", ty)
	}
	if ty := c.Devices[1].Type; ty.FLOPS(graph.BFloat16) != 2e15 || ty.LaunchOverhead != defaultLaunchOverhead || ty != c.Devices[4].Type {
		t.Errorf("custom type: %+v", ty)
	}
	if got := c.Hosts[1].Intra; got != (Link{Kind: "pcie", Bandwidth: 32e9, Latency: 10e-6}) {
		t.Errorf("host b intra %+v", got)
	}
	if got := c.Hosts[2].Intra; got != (Link{Kind: "pcie", Bandwidth: 64e9, Latency: 1e-6}) {
		t.Errorf("host c intra %+v", got)
	}
	if got := c.Path(0, 1); got != (Link{Kind: "network", Bandwidth: 25e9, Latency: 5e-6}) {
		t.Errorf("a-b network %+v", got)
	}
	if got := c.Path(0, 3); got != (Link{Kind: "network", Bandwidth: 1.25e9, Latency: 20e-6}) {
		t.Errorf("a-c default network %+v", got)
	}
	if got := c.Path(2, 1); got != (Link{Kind: "direct", Bandwidth: 1e12, Latency: 0}) {
		t.Errorf("f0-f1 %+v", got)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	var fe *FileError
	if err == nil || errors.As(err, &fe) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v; want a not-exist error that is not a *FileError", err)
	}
}

// TestFormatExamples parses every yaml block of docs/clusters.md, so
// that the documentation cannot drift from the loader.
func TestFormatExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/clusters.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(doc), "```yaml\n")[1:]
	if len(blocks) < 2 {
		t.Fatalf("found %d yaml blocks in docs/clusters.md, want at least 2", len(blocks))
	}
	for i, b := range blocks {
		src, _, _ := strings.Cut(b, "```")
		c, err := Parse([]byte(src), "docs/clusters.md")
		if err != nil {
			t.Errorf("block %d: %v", i, err)
			continue
		}
		if i == 1 {
			// The full example: spot-check what the comments promise.
			if c.Name != "lab" || len(c.Devices) != 5 || c.Devices[4].Name != "n1gpu3" ||
				c.Devices[0].Memory != 15<<30 || c.Path(0, 1) != (Link{Kind: "network", Bandwidth: 25e9, Latency: 5e-6}) ||
				c.Path(1, 2) != (Link{Kind: "nvlink", Bandwidth: 100e9, Latency: 2e-6, CollectiveEfficiency: 0.8}) {
				t.Errorf("full example parsed as %+v", c)
			}
		}
	}
}

// TestParsePrecisionPeaks: the tensor-core figures of the presets, and a
// cluster file overriding them (tf32 is a key of peak_flops beside the
// element types).
func TestParsePrecisionPeaks(t *testing.T) {
	src := `device_types:
  - name: A100-80GB
    peak_flops: {tf32: 120T, bfloat16: 250T}
  - {name: V100-bf16, base: V100-16GB, peak_flops: {bfloat16: 125T}}
devices:
  - {name: a, type: A100-80GB}
  - {name: v, type: V100-bf16}
  - {name: h, type: H100-80GB}
`
	c, err := Parse([]byte(src), "prec.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, v, h := c.Devices[0].Type, c.Devices[1].Type, c.Devices[2].Type
	if a.TF32FLOPS != 120e12 || a.FLOPS(graph.BFloat16) != 250e12 || a.FLOPS(graph.Float16) != 312e12 || a.FLOPS(graph.Float32) != 19.5e12 {
		t.Errorf("A100 override: tf32 %g, bf16 %g, fp16 %g, fp32 %g", a.TF32FLOPS, a.FLOPS(graph.BFloat16), a.FLOPS(graph.Float16), a.FLOPS(graph.Float32))
	}
	if v.FLOPS(graph.BFloat16) != 125e12 || v.TF32FLOPS != 0 || v.MatmulFLOPS(true) != 15.7e12 {
		t.Errorf("V100 with bf16: %g, tf32 %g", v.FLOPS(graph.BFloat16), v.MatmulFLOPS(true))
	}
	if h.TF32FLOPS != 494.5e12 || h.FLOPS(graph.BFloat16) != 989.5e12 {
		t.Errorf("H100 preset: tf32 %g, bf16 %g", h.TF32FLOPS, h.FLOPS(graph.BFloat16))
	}
	if p, _ := Preset("A100-40GB"); p.TF32FLOPS != 156e12 {
		t.Errorf("A100-40GB tf32 %g", p.TF32FLOPS)
	}
	for _, name := range []string{"V100-16GB", "V100-32GB", "T4", "CPU"} {
		if p, _ := Preset(name); p.TF32FLOPS != 0 || p.PeakFLOPS[graph.BFloat16] != 0 {
			t.Errorf("%s has tf32 %g, bf16 %g; the part has neither", name, p.TF32FLOPS, p.PeakFLOPS[graph.BFloat16])
		}
	}
}

func TestLoadEfficiency(t *testing.T) {
	src := `device_types:
  - name: T4
    efficiency: {memory: 75%, matmul_half: 2G}
  - name: Mine
    base: A100-80GB
    efficiency:
      compute: 0.85
      tensor: 0.6
      tensor_conv: 0.5
      clock: 0.9
  - name: Bare
    peak_flops: {float32: 1T}
    memory_bandwidth: 1TB/s
    memory: 1GiB
devices:
  - {name: a, type: T4}
  - {name: b, type: Mine}
  - {name: c, type: Bare}
`
	c, err := Parse([]byte(src), "eff.yaml")
	if err != nil {
		t.Fatal(err)
	}
	preset, _ := Preset("T4")
	t4 := c.Devices[0].Type.Efficiency
	want := preset.Efficiency
	want.Memory, want.MatmulHalf = 0.75, 2e9
	if t4 != want {
		t.Errorf("T4 override: %+v, want %+v (the preset's other figures kept)", t4, want)
	}
	a100, _ := Preset("A100-80GB")
	want = a100.Efficiency
	want.Compute, want.Tensor, want.TensorConv, want.Clock = 0.85, 0.6, 0.5, 0.9
	if got := c.Devices[1].Type.Efficiency; got != want {
		t.Errorf("Mine: %+v, want %+v", got, want)
	}
	if got := c.Devices[2].Type.Efficiency; got != (Efficiency{}) {
		t.Errorf("a type without base has no model (flat defaults): %+v", got)
	}
}

func TestPresetEfficiencySane(t *testing.T) {
	for _, name := range PresetNames() {
		p, _ := Preset(name)
		e := p.Efficiency
		for what, v := range map[string]float64{"compute": e.Compute, "tensor": e.Tensor, "tensor_conv": e.TensorConv, "memory": e.Memory, "clock": e.Clock} {
			if v < 0 || v > 1 {
				t.Errorf("%s: efficiency %s = %v, want within [0, 1]", name, what, v)
			}
		}
		if name != "CPU" && (e.Compute == 0 || e.Memory == 0 || e.MatmulHalf == 0) {
			t.Errorf("%s: GPU preset without an achievable-speed model: %+v", name, e)
		}
	}
}

// threads: is a device type's thread count; presets leave it 0 (not
// stated) and a type based on another keeps the base's.
func TestParseThreads(t *testing.T) {
	src := `device_types:
  - {name: cpu1, base: CPU, threads: 1}
  - name: cpu2
    base: cpu1
    threads: 2
  - {name: cpu-again, base: cpu2}
devices:
  - {name: a, type: cpu1}
  - {name: b, type: cpu2}
  - {name: c, type: cpu-again}
  - {name: d, type: CPU}
`
	c, err := Parse([]byte(src), "threads.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{1, 2, 2, 0} {
		if got := c.Devices[i].Type.Threads; got != want {
			t.Errorf("device %s: threads %d, want %d", c.Devices[i].Name, got, want)
		}
	}
}
