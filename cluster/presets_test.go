package cluster

import (
	"math"
	"slices"
	"testing"

	"github.com/opplace/opplace/graph"
)

func TestPresetNames(t *testing.T) {
	want := []string{"A100-40GB", "A100-80GB", "CPU", "H100-80GB", "T4", "V100-16GB", "V100-32GB"}
	if got := PresetNames(); !slices.Equal(got, want) {
		t.Errorf("PresetNames() = %v, want %v", got, want)
	}
}

func TestPresetFigures(t *testing.T) {
	// Spot checks against the datasheets named in presets.go.
	tests := []struct {
		name   string
		dt     graph.DType
		flops  float64
		bw     float64
		memory int64
	}{
		{"V100-16GB", graph.Float32, 15.7e12, 900e9, 16 << 30},
		{"V100-16GB", graph.Float16, 125e12, 900e9, 16 << 30},
		{"V100-16GB", graph.BFloat16, 15.7e12, 900e9, 16 << 30}, // no bf16: falls back to fp32
		{"V100-32GB", graph.Float16, 125e12, 900e9, 32 << 30},
		{"A100-40GB", graph.Float32, 19.5e12, 1555e9, 40 << 30}, // CUDA cores, not TF32
		{"A100-40GB", graph.BFloat16, 312e12, 1555e9, 40 << 30},
		{"A100-80GB", graph.Float16, 312e12, 2039e9, 80 << 30},
		{"H100-80GB", graph.Float32, 67e12, 3350e9, 80 << 30},
		{"H100-80GB", graph.BFloat16, 989.5e12, 3350e9, 80 << 30}, // dense
		{"H100-80GB", graph.Float8E4M3FN, 1979e12, 3350e9, 80 << 30},
		{"T4", graph.Float32, 8.1e12, 320e9, 16 << 30},
		{"T4", graph.Float16, 65e12, 320e9, 16 << 30},
		{"T4", graph.Int8, 130e12, 320e9, 16 << 30},
		{"CPU", graph.Float32, 2e12, 200e9, 256 << 30},
		{"CPU", graph.Float16, 2e12, 200e9, 256 << 30},
	}
	for _, tt := range tests {
		p, ok := Preset(tt.name)
		if !ok {
			t.Fatalf("Preset(%q) not found", tt.name)
		}
		if p.Name != tt.name {
			t.Errorf("Preset(%q).Name = %q", tt.name, p.Name)
		}
		if got := p.FLOPS(tt.dt); got != tt.flops {
			t.Errorf("%s FLOPS(%v) = %v, want %v", tt.name, tt.dt, got, tt.flops)
		}
		if p.MemoryBandwidth != tt.bw || p.Memory != tt.memory {
			t.Errorf("%s: bandwidth %v memory %d, want %v %d", tt.name, p.MemoryBandwidth, p.Memory, tt.bw, tt.memory)
		}
	}
}

func TestPresetsSane(t *testing.T) {
	for _, name := range PresetNames() {
		p, _ := Preset(name)
		if p.FLOPS(graph.Float32) <= 0 || p.MemoryBandwidth <= 0 || p.Memory <= 0 || p.LaunchOverhead <= 0 {
			t.Errorf("%s: non-positive figure: %+v", name, p)
		}
		for dt, f := range p.PeakFLOPS {
			// Lower precision is never slower than fp32 on these parts,
			// and fp64 never faster.
			switch {
			case dt == graph.Float64 && f > p.FLOPS(graph.Float32):
				t.Errorf("%s: float64 %v faster than float32", name, f)
			case dt != graph.Float64 && f < p.FLOPS(graph.Float32):
				t.Errorf("%s: %v %v slower than float32", name, dt, f)
			}
		}
		want := 5e-6
		if name == "CPU" {
			want = 1e-6
		}
		if p.LaunchOverhead != want {
			t.Errorf("%s: launch overhead %v, want %v", name, p.LaunchOverhead, want)
		}
	}
}

func TestPresetLookup(t *testing.T) {
	p, ok := Preset("v100-16gb")
	if !ok || p.Name != "V100-16GB" {
		t.Errorf("case-insensitive lookup: %v %v", p, ok)
	}
	if _, ok := Preset("V100"); ok {
		t.Error("Preset(V100) found; it is ambiguous and should not be")
	}
	// Preset hands out copies: changing one must not change the table.
	p.PeakFLOPS[graph.Float32] = 1
	p.Memory = 1
	q, _ := Preset("V100-16GB")
	if q.FLOPS(graph.Float32) != 15.7e12 || q.Memory != 16<<30 {
		t.Errorf("Preset returned shared state: %+v", q)
	}
}

func TestLinkPresets(t *testing.T) {
	want := []string{"eth100", "eth25", "ib-edr", "ib-hdr", "ib-ndr", "nvswitch-a100", "nvswitch-h100", "pcie3", "pcie4", "pcie5"}
	if got := LinkPresetNames(); !slices.Equal(got, want) {
		t.Errorf("LinkPresetNames() = %v, want %v", got, want)
	}
	l, ok := LinkPreset("PCIe4")
	if !ok || l != (Link{Kind: "pcie", Bandwidth: 32e9, Latency: 10e-6}) {
		t.Errorf("LinkPreset(PCIe4) = %+v, %v", l, ok)
	}
	if l, _ := LinkPreset("ib-hdr"); l.Bandwidth != 25e9 {
		t.Errorf("ib-hdr bandwidth %v, want 25e9 (200 Gb/s)", l.Bandwidth)
	}
	if _, ok := LinkPreset("nvlink"); ok {
		t.Error("LinkPreset(nvlink) found")
	}
}

// TestBusBandwidth: a link's collectives run at its line rate times its
// kind's default share, or the share the file gives.
func TestBusBandwidth(t *testing.T) {
	for _, tc := range []struct {
		l    Link
		want float64
	}{
		{Link{Kind: "nvlink", Bandwidth: 300e9}, 240e9},
		{Link{Kind: "pcie", Bandwidth: 32e9}, 25.6e9},
		{Link{Kind: "network", Bandwidth: 25e9}, 21.25e9},
		{Link{Kind: "custom", Bandwidth: 10e9}, 10e9},
		{Link{Kind: "nvlink", Bandwidth: 300e9, CollectiveEfficiency: 0.5}, 150e9},
	} {
		if got := tc.l.BusBandwidth(); math.Abs(got-tc.want) > 1 {
			t.Errorf("%+v: bus bandwidth %v, want %v", tc.l, got, tc.want)
		}
	}
	c, err := Parse([]byte("devices: [{name: a, type: T4}, {name: b, type: T4}]\nlinks:\n  - {between: [a, b], kind: nvlink, bandwidth: 100GB/s, latency: 1us, collective_efficiency: 70%}\n"), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Path(0, 1); l.CollectiveEfficiency != 0.7 || math.Abs(l.BusBandwidth()-70e9) > 1 {
		t.Errorf("link %+v: bus bandwidth %v, want 70e9", l, l.BusBandwidth())
	}
}
