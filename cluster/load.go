package cluster

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/opplace/opplace/internal/files"
	"github.com/opplace/opplace/internal/yamlfile"

	"github.com/opplace/opplace/graph"
)

// Limits past which a value is taken for a unit mistake. They are far
// above any real part (an H100 has 80 GiB at 3.35 TB/s) and far below
// where float64 arithmetic on them would misbehave.
const (
	// maxMemory is the largest memory a device or device type may have.
	maxMemory = 1 << 50 // 1 PiB
	// maxBandwidth is the largest link or memory bandwidth, in B/s.
	maxBandwidth = 100e12 // 100 TB/s
	// maxFLOPS is the largest peak throughput of a device type.
	maxFLOPS = 1e18 // 1 EFLOP/s
	// maxSeconds is the largest latency or launch overhead.
	maxSeconds = 10.0
	// maxDevices is the most devices a cluster file may declare; it also
	// keeps count: and all-pairs links from exhausting memory.
	maxDevices = 1 << 14
	// maxThreads bounds a device type's threads.
	maxThreads = 1 << 16
	// maxPairs bounds the links that all-pairs expansion may create.
	maxPairs = 1 << 20
)

// implicitHost names the one host of a file without a hosts: list.
const implicitHost = "host0"

// Known keys, in the order error messages list them.
var (
	topKeys    = []string{"name", "device_types", "hosts", "devices", "links", "network"}
	typeKeys   = []string{"name", "base", "peak_flops", "memory_bandwidth", "launch_overhead", "memory", "threads", "efficiency"}
	effKeys    = []string{"compute", "tensor", "tensor_conv", "matmul_half", "memory", "clock"}
	hostKeys   = []string{"name", "intra"}
	deviceKeys = []string{"name", "type", "host", "memory", "count"}
	linkKeys   = []string{"preset", "kind", "bandwidth", "latency", "collective_efficiency"}
	linksKeys  = append([]string{"between"}, linkKeys...)
)

// Load reads and parses the cluster file at path. A problem with the
// file's contents is a *FileError; failing to read it is the error from
// files.ReadFile (os.ReadFile's, bounded for pipes and devices).
func Load(path string) (*Cluster, error) {
	data, err := files.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, path)
}

// Parse reads a cluster file's contents; file names it in errors and
// gives the cluster its default name. The format is described in
// docs/clusters.md. Every error is a *FileError naming the line and field at
// fault; the returned cluster has passed Validate.
func Parse(data []byte, file string) (*Cluster, error) {
	p := newParser(file)
	root, err := p.Decode(data)
	if err != nil {
		return nil, err
	}
	top, err := p.mapping(root, "", topKeys...)
	if err != nil {
		return nil, err
	}
	b := &builder{
		parser: p,
		c: &Cluster{
			Name:           defaultName(file),
			Direct:         map[[2]int]Link{},
			Network:        map[[2]int]Link{},
			DefaultNetwork: defaultNetwork,
		},
		types:     map[string]*DeviceType{},
		typeLines: map[string]int{},
		names:     map[string]int{},
		pairLines: map[[3]int]int{},
	}
	if name, _, ok, err := p.scalar(top, "name"); err != nil {
		return nil, err
	} else if ok {
		b.c.Name = name
	}
	// Sections are read in dependency order, whatever their order in the
	// file.
	for _, step := range []func(*mapping) error{b.deviceTypes, b.hosts, b.devices, b.links, b.network} {
		if err := step(top); err != nil {
			return nil, err
		}
	}
	if err := b.c.Validate(); err != nil {
		// The checks above should make this unreachable; if not, the
		// message still names the file.
		return nil, &FileError{File: file, Msg: err.Error()}
	}
	return b.c, nil
}

// defaultName is the file's base name without its extension.
func defaultName(file string) string {
	if file == "" {
		return "cluster"
	}
	base := filepath.Base(file)
	return strings.TrimSuffix(base, filepath.Ext(base))
}

// builder accumulates a Cluster from the sections of one file.
type builder struct {
	*parser
	c *Cluster
	// types holds declared types and presets used so far, by lower-case
	// name, so that all devices of a type share one *DeviceType.
	types     map[string]*DeviceType
	typeLines map[string]int // declaration line of each declared type
	// names maps every device and host name to its line; the two share
	// one namespace because links name either.
	names         map[string]int
	implicitHosts bool
	// pairLines records where each link pair was set: {0 device or 1
	// host, a, b} to line.
	pairLines map[[3]int]int
}

// typeNames lists presets and declared types for error messages.
func (b *builder) typeNames() []string {
	names := PresetNames()
	for _, n := range sortedKeys(b.typeLines) {
		if t := b.types[n]; t != nil && !slices.Contains(names, t.Name) {
			names = append(names, t.Name)
		}
	}
	return names
}

// lookupType finds a declared type or a preset by case-insensitive name.
func (b *builder) lookupType(name string) (*DeviceType, bool) {
	key := strings.ToLower(name)
	if t, ok := b.types[key]; ok {
		return t, true
	}
	t, ok := Preset(name)
	if ok {
		b.types[key] = t
	}
	return t, ok
}

// deviceTypes reads device_types: custom types and preset overrides.
func (b *builder) deviceTypes(top *mapping) error {
	items, _, ok, err := b.sequence(top, "device_types")
	if !ok {
		return err
	}
	for i, item := range items {
		path := fmt.Sprintf("device_types[%d]", i)
		m, err := b.mapping(item, path, typeKeys...)
		if err != nil {
			return err
		}
		name, nameNode, err := b.required(m, "name", "the name devices refer to it by")
		if err != nil {
			return err
		}
		key := strings.ToLower(name)
		if l, dup := b.typeLines[key]; dup {
			return b.ErrAt(nameNode, m.Field("name"), "device type %q is declared twice (first at line %d); merge the two", name, l)
		}
		// A type named like a preset overrides it: it starts from the
		// preset unless it names another base.
		var base *DeviceType
		if baseName, baseNode, ok, err := b.scalar(m, "base"); err != nil {
			return err
		} else if ok {
			if base, ok = b.lookupType(baseName); !ok {
				return b.ErrAt(baseNode, m.Field("base"), "unknown device type %q%s; use a preset (%s) or a type declared above",
					baseName, suggest(baseName, b.typeNames()), strings.Join(PresetNames(), ", "))
			}
		} else if p, ok := Preset(name); ok {
			base = p
		}
		t := &DeviceType{PeakFLOPS: map[graph.DType]float64{}, LaunchOverhead: defaultLaunchOverhead}
		if base != nil {
			t = base.clone()
		}
		t.Name = name
		if err := b.peakFLOPS(m, t, base == nil); err != nil {
			return err
		}
		if v, ok, err := b.quantity(m, "memory_bandwidth", ParseBandwidth, 0, true, maxBandwidth, "100 TB/s"); err != nil {
			return err
		} else if ok {
			t.MemoryBandwidth = v
		} else if base == nil {
			return b.ErrAt(m.Node, path, "missing required field %q (memory bandwidth, like 900GB/s; or give a base: preset)", "memory_bandwidth")
		}
		if v, ok, err := b.quantity(m, "launch_overhead", ParseSeconds, 0, false, maxSeconds, "10s"); err != nil {
			return err
		} else if ok {
			t.LaunchOverhead = v
		}
		if v, ok, err := b.quantity(m, "memory", parseBytesFloat, 0, true, maxMemory, "1 PiB"); err != nil {
			return err
		} else if ok {
			t.Memory = int64(v)
		} else if base == nil {
			return b.ErrAt(m.Node, path, "missing required field %q (default device memory, like 16GiB; or give a base: preset)", "memory")
		}
		if s, n, ok, err := b.scalar(m, "threads"); err != nil {
			return err
		} else if ok {
			v, err := strconv.Atoi(s)
			if err != nil || v < 1 {
				return b.ErrAt(n, m.Field("threads"), "threads must be a positive whole number (the cores a CPU device runs ops on), found %q", s)
			}
			if v > maxThreads {
				return b.ErrAt(n, m.Field("threads"), "threads %d is more than %d", v, maxThreads)
			}
			t.Threads = v
		}
		if err := b.efficiency(m, t); err != nil {
			return err
		}
		b.types[key] = t
		b.typeLines[key] = nameNode.Line
	}
	return nil
}

// peakFLOPS reads peak_flops into t; float32 is required for a type with
// no base, since it is the fallback for every other element type.
func (b *builder) peakFLOPS(m *mapping, t *DeviceType, needF32 bool) error {
	n := m.Get("peak_flops")
	if n == nil {
		if needF32 {
			return b.ErrAt(m.Node, m.Path, "missing required field %q (like {float32: 15.7T}; or give a base: preset)", "peak_flops")
		}
		return nil
	}
	n = yamlfile.Resolve(n)
	if n.Kind != yaml.MappingNode {
		return b.ErrAt(n, m.Field("peak_flops"), "expected a mapping from element type to FLOP/s, like {float32: 15.7T, float16: 125T}; found %s", yamlfile.KindName(n))
	}
	path := m.Field("peak_flops")
	seen := map[graph.DType]int{}
	tf32Line := 0
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := yamlfile.Resolve(n.Content[i]), yamlfile.Resolve(n.Content[i+1])
		if k.Kind == yaml.ScalarNode && strings.EqualFold(k.Value, "tf32") {
			// Not an element type: float32 matmuls on TF32 tensor cores.
			field := path + "." + k.Value
			if tf32Line > 0 {
				return b.ErrAt(k, field, "tf32 is given twice (first at line %d); keep one", tf32Line)
			}
			tf32Line = k.Line
			sub := &mapping{Node: n, Path: path, Vals: map[string]*yaml.Node{k.Value: v}}
			f, _, err := b.quantity(sub, k.Value, ParseFLOPS, 0, true, maxFLOPS, "1 EFLOP/s")
			if err != nil {
				return err
			}
			t.TF32FLOPS = f
			continue
		}
		dt, ok := graph.ParseDType(k.Value)
		if k.Kind != yaml.ScalarNode || !ok {
			return b.ErrAt(k, path, "unknown element type %q; use float32, float16, bfloat16, float64, int8, float8e4m3fn, ... or tf32", k.Value)
		}
		field := path + "." + k.Value
		if l, dup := seen[dt]; dup {
			return b.ErrAt(k, field, "element type %s is given twice (first at line %d); keep one", dt, l)
		}
		seen[dt] = k.Line
		// Element types are keys here, not fields, so reuse quantity's
		// checks through a one-entry mapping.
		sub := &mapping{Node: n, Path: path, Vals: map[string]*yaml.Node{k.Value: v}}
		f, _, err := b.quantity(sub, k.Value, ParseFLOPS, 0, true, maxFLOPS, "1 EFLOP/s")
		if err != nil {
			return err
		}
		t.PeakFLOPS[dt] = f
	}
	if _, ok := t.PeakFLOPS[graph.Float32]; !ok && needF32 {
		return b.ErrAt(n, path, "missing float32, the figure every element type without its own falls back to")
	}
	return nil
}

// efficiency reads efficiency: into t.Efficiency; each key overrides the
// base's figure and the rest are kept.
func (b *builder) efficiency(m *mapping, t *DeviceType) error {
	n := m.Get("efficiency")
	if n == nil {
		return nil
	}
	em, err := b.mapping(n, m.Field("efficiency"), effKeys...)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		key string
		dst *float64
	}{{"compute", &t.Efficiency.Compute}, {"tensor", &t.Efficiency.Tensor}, {"tensor_conv", &t.Efficiency.TensorConv}, {"memory", &t.Efficiency.Memory}, {"clock", &t.Efficiency.Clock}} {
		if v, ok, err := b.quantity(em, f.key, parseFraction, 0, true, math.Inf(1), ""); err != nil {
			return err
		} else if ok {
			if v > 1 {
				return b.ErrAt(em.Get(f.key), em.Field(f.key), "must be at most 1 (a fraction of the datasheet figure), found %s", em.Get(f.key).Value)
			}
			*f.dst = v
		}
	}
	if v, ok, err := b.quantity(em, "matmul_half", parseFLOPCount, 0, false, maxFLOPS, "1E FLOPs"); err != nil {
		return err
	} else if ok {
		t.Efficiency.MatmulHalf = v
	}
	return nil
}

// parseFraction reads a fraction, 0.88 or 88%.
func parseFraction(s string) (float64, error) {
	pct := strings.HasSuffix(s, "%")
	v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(s, "%")), 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a fraction; write it like 0.88 or 88%%", s)
	}
	if pct {
		v /= 100
	}
	return v, nil
}

// parseFLOPCount reads a number of FLOPs with the FLOP/s suffixes (2G, 1.5T).
func parseFLOPCount(s string) (float64, error) {
	return ParseFLOPS(strings.TrimSuffix(strings.TrimSuffix(s, "FLOPs"), "FLOP"))
}

func parseBytesFloat(s string) (float64, error) {
	v, err := ParseBytes(s)
	return float64(v), err
}

// addName claims a device or host name, which must be unique across both.
func (b *builder) addName(name string, n *yaml.Node, field string) error {
	if l, dup := b.names[name]; dup {
		return b.ErrAt(n, field, "name %q is already used at line %d; device and host names must all differ", name, l)
	}
	b.names[name] = n.Line
	return nil
}

// hosts reads hosts:, or makes the one implicit host when it is absent.
func (b *builder) hosts(top *mapping) error {
	items, _, ok, err := b.sequence(top, "hosts")
	if err != nil {
		return err
	}
	if !ok {
		b.implicitHosts = true
		b.c.Hosts = []Host{{Name: implicitHost, Intra: defaultIntra}}
		return nil
	}
	for i, item := range items {
		path := fmt.Sprintf("hosts[%d]", i)
		m, err := b.mapping(item, path, hostKeys...)
		if err != nil {
			return err
		}
		name, nameNode, err := b.required(m, "name", "the name devices and links refer to it by")
		if err != nil {
			return err
		}
		if err := b.addName(name, nameNode, m.Field("name")); err != nil {
			return err
		}
		h := Host{Name: name, Intra: defaultIntra}
		if n := m.Get("intra"); n != nil {
			lm, err := b.mapping(n, m.Field("intra"), linkKeys...)
			if err != nil {
				return err
			}
			if h.Intra, err = b.link(lm, &defaultIntra, "pcie"); err != nil {
				return err
			}
		}
		b.c.Hosts = append(b.c.Hosts, h)
	}
	return nil
}

// devices reads devices:, expanding count:.
func (b *builder) devices(top *mapping) error {
	items, _, ok, err := b.sequence(top, "devices")
	if err != nil {
		return err
	}
	if !ok {
		return b.ErrAt(top.Node, "", "missing required field %q (the list of devices, like - {name: gpu0, type: V100-16GB})", "devices")
	}
	for i, item := range items {
		path := fmt.Sprintf("devices[%d]", i)
		m, err := b.mapping(item, path, deviceKeys...)
		if err != nil {
			return err
		}
		name, nameNode, err := b.required(m, "name", `like gpu0, or gpu{i} with count:`)
		if err != nil {
			return err
		}
		typeName, typeNode, err := b.required(m, "type", "a preset ("+strings.Join(PresetNames(), ", ")+") or a declared device type")
		if err != nil {
			return err
		}
		t, ok := b.lookupType(typeName)
		if !ok {
			return b.ErrAt(typeNode, m.Field("type"), "unknown device type %q%s; use a preset (%s) or declare it under device_types",
				typeName, suggest(typeName, b.typeNames()), strings.Join(PresetNames(), ", "))
		}
		host, err := b.deviceHost(m)
		if err != nil {
			return err
		}
		mem := t.Memory
		if v, ok, err := b.quantity(m, "memory", parseBytesFloat, 0, true, maxMemory, "1 PiB"); err != nil {
			return err
		} else if ok {
			mem = int64(v)
		}
		count, counted := 1, false
		if s, n, ok, err := b.scalar(m, "count"); err != nil {
			return err
		} else if ok {
			counted = true
			count, err = strconv.Atoi(s)
			if err != nil || count < 1 {
				return b.ErrAt(n, m.Field("count"), "count must be a positive whole number, found %q", s)
			}
			if count > maxDevices {
				return b.ErrAt(n, m.Field("count"), "count %d is more than the %d devices a cluster may have", count, maxDevices)
			}
		}
		for k := 0; k < count; k++ {
			if len(b.c.Devices) >= maxDevices {
				return b.ErrAt(nameNode, path, "more than %d devices; a cluster file may declare at most that many", maxDevices)
			}
			dn := name
			if counted {
				dn = expandName(name, k)
			}
			if err := b.addName(dn, nameNode, m.Field("name")); err != nil {
				return err
			}
			b.c.Devices = append(b.c.Devices, Device{Name: dn, Type: t, Memory: mem, Host: host})
		}
	}
	return nil
}

// expandName names the k-th device of a count: entry: "{i}" in name is
// replaced by k, or k is appended when there is none ("gpu" -> gpu0).
func expandName(name string, k int) string {
	if strings.Contains(name, "{i}") {
		return strings.ReplaceAll(name, "{i}", strconv.Itoa(k))
	}
	return name + strconv.Itoa(k)
}

// deviceHost resolves a device's host: field to a host index.
func (b *builder) deviceHost(m *mapping) (int, error) {
	hostName, hostNode, ok, err := b.scalar(m, "host")
	if err != nil {
		return 0, err
	}
	if b.implicitHosts {
		if ok && hostName != implicitHost {
			return 0, b.ErrAt(hostNode, m.Field("host"), "host %q is not declared; add a hosts: list naming it (without one, all devices share the implicit host %q)", hostName, implicitHost)
		}
		return 0, nil
	}
	if !ok {
		return 0, b.ErrAt(m.Node, m.Path, "missing required field %q (the file has a hosts: list, so every device must name one of %s)", "host", listNames(b.hostNames()))
	}
	for i, h := range b.c.Hosts {
		if h.Name == hostName {
			return i, nil
		}
	}
	return 0, b.ErrAt(hostNode, m.Field("host"), "host %q is not declared%s; use one of %s or add it to hosts:", hostName, suggest(hostName, b.hostNames()), listNames(b.hostNames()))
}

func (b *builder) hostNames() []string {
	names := make([]string, len(b.c.Hosts))
	for i, h := range b.c.Hosts {
		names[i] = h.Name
	}
	return names
}

func (b *builder) deviceNames() []string {
	names := make([]string, len(b.c.Devices))
	for i, d := range b.c.Devices {
		names[i] = d.Name
	}
	return names
}

// links reads links:, each joining all pairs of its devices (Direct) or
// of its hosts (Network).
func (b *builder) links(top *mapping) error {
	items, _, ok, err := b.sequence(top, "links")
	if !ok {
		return err
	}
	for i, item := range items {
		path := fmt.Sprintf("links[%d]", i)
		m, err := b.mapping(item, path, linksKeys...)
		if err != nil {
			return err
		}
		ends, ofHosts, err := b.endpoints(m)
		if err != nil {
			return err
		}
		kind := "direct"
		if ofHosts {
			kind = "network"
		}
		l, err := b.link(m, nil, kind)
		if err != nil {
			return err
		}
		table, class := b.c.Direct, 0
		if ofHosts {
			table, class = b.c.Network, 1
		}
		if len(table)+len(ends)*(len(ends)-1)/2 > maxPairs {
			return b.ErrAt(m.Get("between"), m.Field("between"), "more than %d linked pairs in all; model large fabrics with a host network instead", maxPairs)
		}
		for x := 0; x < len(ends); x++ {
			for y := x + 1; y < len(ends); y++ {
				key := [2]int{min(ends[x], ends[y]), max(ends[x], ends[y])}
				if l0, dup := b.pairLines[[3]int{class, key[0], key[1]}]; dup {
					return b.ErrAt(m.Get("between"), m.Field("between"), "the link between %s and %s is already set at line %d; each pair may be linked once",
						b.endName(ofHosts, key[0]), b.endName(ofHosts, key[1]), l0)
				}
				b.pairLines[[3]int{class, key[0], key[1]}] = m.Node.Line
				table[key] = l
			}
		}
	}
	return nil
}

func (b *builder) endName(ofHosts bool, i int) string {
	if ofHosts {
		return b.c.Hosts[i].Name
	}
	return b.c.Devices[i].Name
}

// endpoints resolves a link's between: list to device indices, or host
// indices when ofHosts.
func (b *builder) endpoints(m *mapping) (ends []int, ofHosts bool, err error) {
	items, seqNode, ok, err := b.sequence(m, "between")
	if err != nil {
		return nil, false, err
	}
	if !ok {
		return nil, false, b.ErrAt(m.Node, m.Path, "missing required field %q (the devices, or the hosts, the link joins: [gpu0, gpu1])", "between")
	}
	if len(items) < 2 {
		return nil, false, b.ErrAt(seqNode, m.Field("between"), "a link needs at least two endpoints")
	}
	firstHost := false
	seen := map[string]bool{}
	for j, n := range items {
		field := fmt.Sprintf("%s[%d]", m.Field("between"), j)
		if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
			return nil, false, b.ErrAt(n, field, "expected a device or host name, found %s", yamlfile.KindName(n))
		}
		name := strings.TrimSpace(n.Value)
		if seen[name] {
			return nil, false, b.ErrAt(n, field, "%q is listed twice; list each endpoint once", name)
		}
		seen[name] = true
		idx, isHost := -1, false
		if d, ok := b.c.DeviceIndex(name); ok {
			idx = d
		} else if h := indexOf(b.hostNames(), name); h >= 0 {
			idx, isHost = h, true
		} else {
			all := append(b.deviceNames(), b.hostNames()...)
			return nil, false, b.ErrAt(n, field, "unknown device or host %q%s; declare it, or use one of %s", name, suggest(name, all), listNames(all))
		}
		if j == 0 {
			firstHost = isHost
		} else if isHost != firstHost {
			return nil, false, b.ErrAt(n, field, "%q is a %s but %q is a %s; a link joins devices (a direct link) or hosts (the network between them), not both",
				name, hostOrDevice(isHost), strings.TrimSpace(items[0].Value), hostOrDevice(firstHost))
		}
		ends = append(ends, idx)
	}
	return ends, firstHost, nil
}

func hostOrDevice(isHost bool) string {
	if isHost {
		return "host"
	}
	return "device"
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// network reads the top-level network: default between hosts.
func (b *builder) network(top *mapping) error {
	n := top.Get("network")
	if n == nil {
		return nil
	}
	m, err := b.mapping(n, "network", linkKeys...)
	if err != nil {
		return err
	}
	b.c.DefaultNetwork, err = b.link(m, &defaultNetwork, "network")
	return err
}

// link reads the link keys of m. It starts from the preset: if given,
// else from base; with neither, bandwidth and latency are required. An
// absent kind falls back to the start's, then to kind.
func (b *builder) link(m *mapping, base *Link, kind string) (Link, error) {
	var l Link
	have := base != nil
	if base != nil {
		l = *base
	}
	if name, n, ok, err := b.scalar(m, "preset"); err != nil {
		return Link{}, err
	} else if ok {
		p, found := LinkPreset(name)
		if !found {
			return Link{}, b.ErrAt(n, m.Field("preset"), "unknown link preset %q%s; use one of %s, or give bandwidth: and latency:",
				name, suggest(name, LinkPresetNames()), strings.Join(LinkPresetNames(), ", "))
		}
		l, have = p, true
	}
	if s, _, ok, err := b.scalar(m, "kind"); err != nil {
		return Link{}, err
	} else if ok {
		l.Kind = s
	}
	if l.Kind == "" {
		l.Kind = kind
	}
	if v, ok, err := b.quantity(m, "bandwidth", ParseBandwidth, 0, true, maxBandwidth, "100 TB/s"); err != nil {
		return Link{}, err
	} else if ok {
		l.Bandwidth = v
	} else if !have {
		return Link{}, b.ErrAt(m.Node, m.Path, "missing required field %q (like 16GB/s or 100Gb/s; or give a preset: from %s)", "bandwidth", strings.Join(LinkPresetNames(), ", "))
	}
	if v, ok, err := b.quantity(m, "latency", ParseSeconds, 0, false, maxSeconds, "10s"); err != nil {
		return Link{}, err
	} else if ok {
		l.Latency = v
	} else if !have {
		return Link{}, b.ErrAt(m.Node, m.Path, "missing required field %q (like 5us; 0 if negligible)", "latency")
	}
	if v, ok, err := b.quantity(m, "collective_efficiency", parseFraction, 0, true, math.Inf(1), ""); err != nil {
		return Link{}, err
	} else if ok {
		if v > 1 {
			return Link{}, b.ErrAt(m.Get("collective_efficiency"), m.Field("collective_efficiency"), "must be at most 1 (the fraction of the link's bandwidth NCCL's collectives reach), found %s", m.Get("collective_efficiency").Value)
		}
		l.CollectiveEfficiency = v
	}
	return l, nil
}

// sortedKeys returns m's keys in order, for deterministic messages.
func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
