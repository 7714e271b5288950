// Package cluster describes the machines a plan runs on: devices, their
// types (peak FLOP/s per element type, memory bandwidth, launch overhead),
// the hosts they sit in and the links between them. Load reads the YAML
// cluster file; Preset gives datasheet figures for common parts.
package cluster

import (
	"fmt"
	"slices"

	"github.com/opplace/opplace/graph"
)

// DeviceType is a kind of accelerator or processor.
type DeviceType struct {
	Name string
	// PeakFLOPS is peak throughput in FLOP/s per element type; types not
	// listed run at the Float32 figure.
	PeakFLOPS map[graph.DType]float64
	// TF32FLOPS is the peak of float32 matmuls and convolutions on TF32
	// tensor cores, used when a plan asks for tf32; 0 means the part has
	// none and they run at the float32 figure.
	TF32FLOPS float64
	// MemoryBandwidth is in bytes per second.
	MemoryBandwidth float64
	// LaunchOverhead is the fixed cost of starting one kernel, in seconds.
	LaunchOverhead float64
	// Memory is the default device memory in bytes.
	Memory int64
	// Threads is the thread count the device runs ops with (threads: in
	// the cluster file; the cores given to a CPU device's runtime), 0 when
	// not stated. It selects the calibration of that thread count in a
	// profile (plan --profile).
	Threads int
	// Efficiency is the achievable-speed model: what fraction of the
	// peaks above real kernels reach (docs/model.md#achievable-speed).
	Efficiency Efficiency
}

// Efficiency says how much of a device type's datasheet peaks real
// kernels sustain. A zero field means "not given": the cost model then
// uses its flat default (70% of peak FLOP/s, 80% of bandwidth, no ramp,
// the datasheet clock), which is what a type declared without a base gets.
type Efficiency struct {
	// Compute is the fraction of peak FLOP/s a large matmul or convolution
	// on the CUDA cores (float32, float64) reaches at the datasheet clock
	// (e_max); it also bounds every other op's compute.
	Compute float64
	// Tensor is e_max for matmuls on tensor cores: in a half type, or
	// float32 under TF32. 0 means Compute.
	Tensor float64
	// TensorConv is e_max for convolutions on tensor cores, which reach
	// less of the peak than GEMMs do. 0 means Tensor.
	TensorConv float64
	// MatmulHalf is W_half in FLOPs: a matmul or convolution of W FLOPs
	// runs at Compute × W/(W + MatmulHalf) of peak, so one of MatmulHalf
	// FLOPs reaches half of Compute. 0: no ramp.
	MatmulHalf float64
	// Memory is the fraction of peak memory bandwidth streaming kernels
	// reach.
	Memory float64
	// Clock is the sustained fraction of the boost clock the datasheet
	// peak assumes, for parts whose power cap throttles them under load
	// (a 70 W T4); it scales every compute peak. 0 means 1.
	Clock float64
}

// FLOPS returns the peak FLOP/s for element type dt.
func (t *DeviceType) FLOPS(dt graph.DType) float64 {
	if f, ok := t.PeakFLOPS[dt]; ok && f > 0 {
		return f
	}
	return t.PeakFLOPS[graph.Float32]
}

// MatmulFLOPS is the peak FLOP/s of a float32 matmul or convolution
// with TF32 allowed: the TF32 figure where the part has one.
func (t *DeviceType) MatmulFLOPS(tf32 bool) float64 {
	if tf32 && t.TF32FLOPS > 0 {
		return t.TF32FLOPS
	}
	return t.FLOPS(graph.Float32)
}

// Device is one placement target.
type Device struct {
	Name string
	Type *DeviceType
	// Memory is the usable memory in bytes.
	Memory int64
	// Host is the index into Cluster.Hosts.
	Host int
}

// Link is a communication path with a bandwidth and a latency.
type Link struct {
	// Kind is descriptive: nvlink, pcie, network, ...
	Kind string
	// Bandwidth is in bytes per second.
	Bandwidth float64
	// Latency is in seconds.
	Latency float64
	// CollectiveEfficiency is the fraction of Bandwidth NCCL's ring
	// collectives reach on the link (its bus bandwidth over line rate);
	// 0 takes the kind's default (DefaultCollectiveEfficiency).
	CollectiveEfficiency float64
}

// BusBandwidth is the bandwidth a collective's ring reaches over the
// link: Bandwidth × its collective efficiency.
func (l Link) BusBandwidth() float64 {
	e := l.CollectiveEfficiency
	if !(e > 0) {
		e = DefaultCollectiveEfficiency(l.Kind)
	}
	return l.Bandwidth * e
}

// Time is how long moving the given number of bytes over the link takes.
func (l Link) Time(bytes int64) float64 {
	if bytes <= 0 {
		return 0
	}
	return l.Latency + float64(bytes)/l.Bandwidth
}

// Host is a machine holding devices.
type Host struct {
	Name string
	// Intra connects devices of this host that have no direct link.
	Intra Link
}

// Cluster is the whole set of devices and the links between them.
type Cluster struct {
	Name    string
	Hosts   []Host
	Devices []Device
	// Direct holds explicit device-to-device links (NVLink), keyed by
	// device index pair with the smaller index first.
	Direct map[[2]int]Link
	// Network holds host-to-host links, keyed like Direct by host index.
	Network map[[2]int]Link
	// DefaultNetwork joins hosts with no explicit link.
	DefaultNetwork Link
}

// Route says which kind of path joins two devices.
type Route uint8

// The routes, from cheapest to most shared.
const (
	// RouteLocal: the same device; nothing moves.
	RouteLocal Route = iota
	// RouteDirect: a dedicated device-to-device link (NVLink).
	RouteDirect
	// RouteIntraHost: the host's shared fabric (a PCIe switch).
	RouteIntraHost
	// RouteNetwork: between hosts, through both hosts' network cards.
	RouteNetwork
)

// Path returns the link a transfer from device a to device b uses: a
// direct device link if there is one, else the host's intra-host link for
// devices in one host, else the network between their hosts.
func (c *Cluster) Path(a, b int) Link {
	l, _ := c.Route(a, b)
	return l
}

// Route returns the link between devices a and b and what kind of path it
// is, so a simulator knows which transfers share it.
func (c *Cluster) Route(a, b int) (Link, Route) {
	if a == b {
		return Link{Kind: "local"}, RouteLocal
	}
	key := [2]int{min(a, b), max(a, b)}
	if l, ok := c.Direct[key]; ok {
		return l, RouteDirect
	}
	ha, hb := c.Devices[a].Host, c.Devices[b].Host
	if ha == hb {
		return c.Hosts[ha].Intra, RouteIntraHost
	}
	if l, ok := c.Network[[2]int{min(ha, hb), max(ha, hb)}]; ok {
		return l, RouteNetwork
	}
	return c.DefaultNetwork, RouteNetwork
}

// TransferTime is the time to move bytes from device a to device b; zero
// on the same device.
func (c *Cluster) TransferTime(a, b int, bytes int64) float64 {
	if a == b {
		return 0
	}
	return c.Path(a, b).Time(bytes)
}

// DeviceIndex finds a device by name.
func (c *Cluster) DeviceIndex(name string) (int, bool) {
	for i := range c.Devices {
		if c.Devices[i].Name == name {
			return i, true
		}
	}
	return -1, false
}

// TotalMemory sums the memory of every device.
func (c *Cluster) TotalMemory() int64 {
	var s int64
	for i := range c.Devices {
		s += c.Devices[i].Memory
	}
	return s
}

// Validate checks the invariants every consumer relies on; Load calls it,
// and programs that build a Cluster in Go should too.
func (c *Cluster) Validate() error {
	if len(c.Devices) == 0 {
		return fmt.Errorf("cluster %q has no devices", c.Name)
	}
	seen := map[string]bool{}
	for i, d := range c.Devices {
		if d.Name == "" {
			return fmt.Errorf("device %d has no name", i)
		}
		if seen[d.Name] {
			return fmt.Errorf("device name %q is used twice", d.Name)
		}
		seen[d.Name] = true
		if d.Type == nil {
			return fmt.Errorf("device %q has no type", d.Name)
		}
		if d.Memory <= 0 {
			return fmt.Errorf("device %q: memory must be positive", d.Name)
		}
		if d.Host < 0 || d.Host >= len(c.Hosts) {
			return fmt.Errorf("device %q: host index %d out of range", d.Name, d.Host)
		}
		if d.Type.FLOPS(graph.Float32) <= 0 || d.Type.MemoryBandwidth <= 0 {
			return fmt.Errorf("device %q: type %q needs positive float32 peak FLOP/s and memory bandwidth", d.Name, d.Type.Name)
		}
	}
	check := func(what string, l Link) error {
		if l.Bandwidth <= 0 || l.Latency < 0 {
			return fmt.Errorf("%s: bandwidth must be positive and latency non-negative", what)
		}
		return nil
	}
	for _, h := range c.Hosts {
		if err := check("host "+h.Name+" intra-host link", h.Intra); err != nil {
			return err
		}
	}
	for k, l := range c.Direct {
		if err := check(fmt.Sprintf("link %s-%s", c.Devices[k[0]].Name, c.Devices[k[1]].Name), l); err != nil {
			return err
		}
	}
	for k, l := range c.Network {
		if err := check(fmt.Sprintf("link %s-%s", c.Hosts[k[0]].Name, c.Hosts[k[1]].Name), l); err != nil {
			return err
		}
	}
	if len(c.Hosts) > 1 {
		if err := check("default network", c.DefaultNetwork); err != nil {
			return err
		}
	}
	return nil
}

// Classes groups the devices into interchangeable classes (one device
// type, one memory size), classes in order of their first device, the
// devices of each ordered by host, then index: the order in which
// strategies hand out devices of a class.
func (c *Cluster) Classes() [][]int {
	var out [][]int
	for d := range c.Devices {
		k := slices.IndexFunc(out, func(cl []int) bool {
			e := &c.Devices[cl[0]]
			return e.Type == c.Devices[d].Type && e.Memory == c.Devices[d].Memory
		})
		if k < 0 {
			out = append(out, nil)
			k = len(out) - 1
		}
		out[k] = append(out[k], d)
	}
	for _, cl := range out {
		slices.SortStableFunc(cl, func(a, b int) int { return c.Devices[a].Host - c.Devices[b].Host })
	}
	return out
}

// Sub is the cluster of the given devices only (in that order), with the
// same hosts, device types and links, so a strategy can place a graph on
// part of a cluster; index i of the result is devs[i] of c.
func (c *Cluster) Sub(devs []int) *Cluster {
	s := &Cluster{Name: c.Name, Hosts: c.Hosts, Network: c.Network, DefaultNetwork: c.DefaultNetwork, Direct: map[[2]int]Link{}}
	for i, d := range devs {
		s.Devices = append(s.Devices, c.Devices[d])
		for j, e := range devs[:i] {
			if l, ok := c.Direct[[2]int{min(d, e), max(d, e)}]; ok {
				s.Direct[[2]int{j, i}] = l
			}
		}
	}
	return s
}
