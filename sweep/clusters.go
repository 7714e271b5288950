package sweep

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/internal/files"
	"github.com/opplace/opplace/internal/yamlfile"
)

// Types are the device types a sweep may name: the presets
// (cluster.PresetNames) and the types a cluster file declares.
type Types struct {
	// File is the cluster file the declared types come from ("": none).
	File string
	// declared is that file's device_types: list, copied into every
	// generated cluster; names its types' names by lower-case name.
	declared *yaml.Node
	names    map[string]string
}

// LoadTypes reads the device types a cluster file declares (its
// device_types: list; see docs/clusters.md). The file must be a valid
// cluster file: it is loaded as one first, so its errors name its lines.
func LoadTypes(path string) (*Types, error) {
	data, err := files.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot read the types file: %w", path, files.Cause(err))
	}
	if _, err := cluster.Parse(data, path); err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: not a cluster file opplace can read again", path)
	}
	ts := &Types{File: path, names: map[string]string{}}
	root := yamlfile.Resolve(doc.Content[0])
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != "device_types" {
			continue
		}
		ts.declared = yamlfile.Resolve(root.Content[i+1])
		for _, item := range ts.declared.Content {
			item = yamlfile.Resolve(item)
			for j := 0; j+1 < len(item.Content); j += 2 {
				if item.Content[j].Value == "name" {
					name := item.Content[j+1].Value
					ts.names[strings.ToLower(name)] = name
				}
			}
		}
	}
	if len(ts.names) == 0 {
		return nil, fmt.Errorf("%s: declares no device types (device_types: is missing or empty); the presets (%s) need no types file", path, strings.Join(cluster.PresetNames(), ", "))
	}
	return ts, nil
}

// Resolve returns the name a device type goes by: a type the types file
// declares, else a preset's canonical name (names match
// case-insensitively). ts may be nil: presets only.
func (ts *Types) Resolve(name string) (string, error) {
	if ts != nil {
		if n, ok := ts.names[strings.ToLower(name)]; ok {
			return n, nil
		}
	}
	if t, ok := cluster.Preset(name); ok {
		return t.Name, nil
	}
	known := cluster.PresetNames()
	where := "use a preset (" + strings.Join(known, ", ") + ") or declare it under device_types: in a cluster file given as the types file (--types-file)"
	if ts != nil {
		declared := make([]string, 0, len(ts.names))
		for _, n := range ts.names {
			declared = append(declared, n)
		}
		slices.Sort(declared)
		where = "use a preset (" + strings.Join(known, ", ") + ") or a type " + ts.File + " declares (" + strings.Join(declared, ", ") + ")"
	}
	return "", fmt.Errorf("unknown device type %q; %s", name, where)
}

// Generated is the cluster of one sweep point.
type Generated struct {
	// Name is the cluster's name, like 8xA100-80GB or 16xT4-2host.
	Name string
	// YAML is the cluster file it was parsed from: opplace plan --cluster
	// on it plans the same point.
	YAML    []byte
	Cluster *cluster.Cluster
	// Hosts is the number of hosts.
	Hosts int
	// PricePerHour is the price of all its devices, 0 when the template
	// gives the type none.
	PricePerHour float64
}

// The generated cluster file's shape.
type clusterDoc struct {
	Name        string     `yaml:"name"`
	DeviceTypes *yaml.Node `yaml:"device_types,omitempty"`
	Hosts       []hostDoc  `yaml:"hosts"`
	Devices     []devDoc   `yaml:"devices"`
	Links       []linkDoc  `yaml:"links,omitempty"`
	Network     linkDoc    `yaml:"network,flow"`
}

type hostDoc struct {
	Name  string  `yaml:"name"`
	Intra linkDoc `yaml:"intra,flow"`
}

type devDoc struct {
	Name  string `yaml:"name"`
	Count int    `yaml:"count"`
	Type  string `yaml:"type"`
	Host  string `yaml:"host"`
}

type linkDoc struct {
	Between   []string `yaml:"between,omitempty,flow"`
	Kind      string   `yaml:"kind"`
	Bandwidth string   `yaml:"bandwidth"`
	Latency   string   `yaml:"latency"`
}

// Cluster builds the cluster of count devices of type typ (a name
// Resolve returned) under the template: ceil(count/PerHost) hosts named
// node0, node1, ..., host k's devices named n<k>d0, n<k>d1, ...
func (t *Template) Cluster(typ string, count int, ts *Types) (*Generated, error) {
	if count < 1 {
		return nil, fmt.Errorf("device count %d: want 1 or more", count)
	}
	l := t.Layout(typ)
	hosts := (count + l.PerHost - 1) / l.PerHost
	name := fmt.Sprintf("%dx%s", count, typ)
	if hosts > 1 {
		name += fmt.Sprintf("-%dhost", hosts)
	}
	doc := clusterDoc{Name: name, Network: linkOf(l.Network, nil)}
	if ts != nil {
		doc.DeviceTypes = ts.declared
	}
	for h, left := 0, count; left > 0; h++ {
		n := min(left, l.PerHost)
		left -= n
		host := fmt.Sprintf("node%d", h)
		doc.Hosts = append(doc.Hosts, hostDoc{Name: host, Intra: linkOf(l.Intra, nil)})
		doc.Devices = append(doc.Devices, devDoc{Name: fmt.Sprintf("n%dd{i}", h), Count: n, Type: typ, Host: host})
		if l.Direct != nil && n > 1 {
			between := make([]string, n)
			for i := range between {
				between[i] = fmt.Sprintf("n%dd%d", h, i)
			}
			doc.Links = append(doc.Links, linkOf(*l.Direct, between))
		}
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# %s: generated by opplace sweep from the cluster template %s\n", name, templateName(t))
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	c, err := cluster.Parse(buf.Bytes(), name+".yaml")
	if err != nil {
		return nil, fmt.Errorf("%s: type %s: the cluster it lays out is not valid: %w", templateName(t), typ, err)
	}
	g := &Generated{Name: name, YAML: buf.Bytes(), Cluster: c, Hosts: hosts}
	if l.PricePerHour > 0 {
		g.PricePerHour = l.PricePerHour * float64(count)
	}
	return g, nil
}

func templateName(t *Template) string {
	if t.File == "" {
		return "(the default, docs/sweep.md)"
	}
	return t.File
}

func linkOf(l cluster.Link, between []string) linkDoc {
	return linkDoc{Between: between, Kind: l.Kind, Bandwidth: quantity(l.Bandwidth, cluster.ParseBandwidth, "GB/s", 1e9, "MB/s", 1e6, "B/s", 1),
		Latency: quantity(l.Latency, cluster.ParseSeconds, "us", 1e-6, "ns", 1e-9, "s", 1)}
}

// quantity writes v in the first of the units (name, factor pairs) that
// reads back exactly, so generated files say 300GB/s rather than 3e+11B/s.
func quantity(v float64, parse func(string) (float64, error), units ...any) string {
	for i := 0; i+1 < len(units); i += 2 {
		// 15 digits first: 1e-5 s over 1e-6 is 9.999999999999999, but
		// "10us" reads back as 1e-5.
		for _, digits := range []int{15, -1} {
			s := strconv.FormatFloat(v/units[i+1].(float64), 'g', digits, 64) + units[i].(string)
			if back, err := parse(s); err == nil && back == v {
				return s
			}
		}
	}
	if v == 0 {
		return "0s"
	}
	return strconv.FormatFloat(v, 'g', -1, 64) + units[len(units)-2].(string)
}
