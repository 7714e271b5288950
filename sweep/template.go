package sweep

import (
	_ "embed"
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/internal/files"
	"github.com/opplace/opplace/internal/yamlfile"
)

// defaultTemplate is the template a sweep uses when none is given; it is
// documented in docs/sweep.md.
//
//go:embed default_template.yaml
var defaultTemplate []byte

// Template says how the devices of one sweep point (a device type and a
// count) are grouped into hosts and joined: a Layout for every type, and
// overrides by type name.
type Template struct {
	// File names the template in messages ("" for the default).
	File string
	// Default is the layout of a type the template does not name.
	Default Layout
	// Types holds the named types' layouts by lower-case name.
	Types map[string]Layout
}

// Layout is how the devices of one type are grouped and joined.
type Layout struct {
	// PerHost is the most devices one host holds.
	PerHost int
	// Intra joins the devices of one host that have no direct link.
	Intra cluster.Link
	// Direct, when set, joins every pair of devices of one host (NVLink).
	Direct *cluster.Link
	// Network joins the hosts.
	Network cluster.Link
	// PricePerHour is one device's price in dollars an hour; 0: not given.
	PricePerHour float64
}

var (
	templateKeys   = []string{"per_host", "intra", "direct", "network", "types"}
	typeLayoutKeys = []string{"name", "per_host", "intra", "direct", "network", "price_per_hour"}
	linkKeys       = []string{"preset", "kind", "bandwidth", "latency"}
)

// maxPerHost bounds per_host: a host of more devices is a unit mistake.
const maxPerHost = 1 << 10

// DefaultTemplate is the built-in template (sweep/default_template.yaml).
func DefaultTemplate() *Template {
	t, err := ParseTemplate(defaultTemplate, "")
	if err != nil {
		panic("sweep: the default template is bad: " + err.Error())
	}
	return t
}

// LoadTemplate reads a template file. Every problem with its contents is
// a *yamlfile.Error naming the file, line and field.
func LoadTemplate(path string) (*Template, error) {
	data, err := files.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot read the cluster template: %w", path, files.Cause(err))
	}
	return ParseTemplate(data, path)
}

// ParseTemplate reads a template's contents; file names it in messages.
func ParseTemplate(data []byte, file string) (*Template, error) {
	p := &yamlfile.Parser{File: file, What: "cluster template",
		Empty:         "a cluster template holds per_host:, intra:, direct:, network: and types: (docs/sweep.md)",
		ManyDocuments: "give one template"}
	root, err := p.Decode(data)
	if err != nil {
		return nil, err
	}
	top, err := p.Mapping(root, "", nil, templateKeys...)
	if err != nil {
		return nil, err
	}
	base := Layout{PerHost: 8, Intra: mustLink("pcie3"), Network: mustLink("eth100")}
	if err := readLayout(p, top, &base); err != nil {
		return nil, err
	}
	t := &Template{File: file, Default: base, Types: map[string]Layout{}}
	n := top.Get("types")
	if n == nil {
		return t, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.ErrAt(n, "types", "expected a list of {name: TYPE, ...}, found %s", yamlfile.KindName(n))
	}
	lines := map[string]int{}
	for i, item := range n.Content {
		path := fmt.Sprintf("types[%d]", i)
		m, err := p.Mapping(item, path, nil, typeLayoutKeys...)
		if err != nil {
			return nil, err
		}
		nameNode := m.Get("name")
		if nameNode == nil || nameNode.Kind != yaml.ScalarNode || nameNode.Value == "" {
			return nil, p.ErrAt(m.Node, m.Field("name"), "missing required field %q (the device type it lays out, like A100-80GB)", "name")
		}
		key := strings.ToLower(nameNode.Value)
		if l, dup := lines[key]; dup {
			return nil, p.ErrAt(nameNode, m.Field("name"), "type %q is laid out twice (first at line %d); merge the two", nameNode.Value, l)
		}
		lines[key] = nameNode.Line
		l := base
		if err := readLayout(p, m, &l); err != nil {
			return nil, err
		}
		if v := m.Get("price_per_hour"); v != nil {
			f, err := strconv.ParseFloat(v.Value, 64)
			if v.Kind != yaml.ScalarNode || err != nil || !(f > 0) || math.IsInf(f, 0) {
				return nil, p.ErrAt(v, m.Field("price_per_hour"), "want a positive number of dollars an hour for one device, like 2.5; found %s", yamlfile.KindName(v))
			}
			l.PricePerHour = f
		}
		t.Types[key] = l
	}
	return t, nil
}

func mustLink(name string) cluster.Link {
	l, ok := cluster.LinkPreset(name)
	if !ok {
		panic("sweep: no link preset " + name)
	}
	return l
}

// readLayout reads the layout keys m gives into l.
func readLayout(p *yamlfile.Parser, m *yamlfile.Mapping, l *Layout) error {
	if v := m.Get("per_host"); v != nil {
		k, err := strconv.Atoi(v.Value)
		if v.Kind != yaml.ScalarNode || err != nil || k < 1 || k > maxPerHost {
			return p.ErrAt(v, m.Field("per_host"), "want a whole number of devices per host from 1 to %d, found %s", maxPerHost, yamlfile.KindName(v))
		}
		l.PerHost = k
	}
	var err error
	if v := m.Get("intra"); v != nil {
		if l.Intra, err = readLink(p, v, m.Field("intra"), "pcie"); err != nil {
			return err
		}
	}
	if v := m.Get("network"); v != nil {
		if l.Network, err = readLink(p, v, m.Field("network"), "network"); err != nil {
			return err
		}
	}
	if v := m.Get("direct"); v != nil {
		if v.Kind == yaml.ScalarNode && v.Value == "none" {
			l.Direct = nil
			return nil
		}
		d, err := readLink(p, v, m.Field("direct"), "nvlink")
		if err != nil {
			return err
		}
		l.Direct = &d
	}
	return nil
}

// readLink reads a link as cluster files give one: {preset: NAME} and
// any of kind:, bandwidth:, latency: over it, or all of bandwidth: (and
// latency:, default 0) without a preset. A bare preset name is taken too.
func readLink(p *yamlfile.Parser, n *yaml.Node, field, kind string) (cluster.Link, error) {
	presets := strings.Join(cluster.LinkPresetNames(), ", ")
	if n.Kind == yaml.ScalarNode {
		l, ok := cluster.LinkPreset(n.Value)
		if !ok {
			return cluster.Link{}, p.ErrAt(n, field, "unknown link preset %q; use one of %s, or {bandwidth: 50GB/s, latency: 2us}", n.Value, presets)
		}
		return l, nil
	}
	m, err := p.Mapping(n, field, nil, linkKeys...)
	if err != nil {
		return cluster.Link{}, err
	}
	l := cluster.Link{Kind: kind}
	preset := false
	if v := m.Get("preset"); v != nil {
		if l, preset = cluster.LinkPreset(v.Value); !preset || v.Kind != yaml.ScalarNode {
			return cluster.Link{}, p.ErrAt(v, m.Field("preset"), "unknown link preset %q; use one of %s", v.Value, presets)
		}
	}
	if v := m.Get("kind"); v != nil {
		if v.Kind != yaml.ScalarNode || v.Value == "" {
			return cluster.Link{}, p.ErrAt(v, m.Field("kind"), "want a word like nvlink, pcie or network, found %s", yamlfile.KindName(v))
		}
		l.Kind = v.Value
	}
	if v := m.Get("bandwidth"); v != nil {
		b, err := cluster.ParseBandwidth(v.Value)
		if v.Kind != yaml.ScalarNode || err == nil && !(b > 0) {
			return cluster.Link{}, p.ErrAt(v, m.Field("bandwidth"), "want a positive bandwidth like 50GB/s or 100Gb/s, found %s", yamlfile.KindName(v))
		}
		if err != nil {
			return cluster.Link{}, p.ErrAt(v, m.Field("bandwidth"), "%v", err)
		}
		l.Bandwidth = b
	} else if !preset {
		return cluster.Link{}, p.ErrAt(m.Node, field, "missing required field %q (like 50GB/s; or give a preset: from %s)", "bandwidth", presets)
	}
	if v := m.Get("latency"); v != nil {
		s, err := cluster.ParseSeconds(v.Value)
		if v.Kind != yaml.ScalarNode {
			err = fmt.Errorf("want a time like 2us, found %s", yamlfile.KindName(v))
		}
		if err != nil {
			return cluster.Link{}, p.ErrAt(v, m.Field("latency"), "%v", err)
		}
		l.Latency = s
	}
	return l, nil
}

// Layout is the layout of the named device type.
func (t *Template) Layout(typ string) Layout {
	if l, ok := t.Types[strings.ToLower(typ)]; ok {
		return l
	}
	return t.Default
}
