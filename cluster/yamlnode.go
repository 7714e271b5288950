package cluster

import (
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/opplace/opplace/internal/yamlfile"
)

// The loader walks a yaml.Node tree rather than decoding into structs so
// that every error can name the line and field it is about, unknown keys
// included.

// parser carries the file name into every error.
type parser struct {
	yamlfile.Parser
}

func newParser(file string) *parser {
	return &parser{yamlfile.Parser{File: file, What: "cluster file",
		Empty: "a cluster file needs at least a devices: list", ManyDocuments: "put one cluster per file"}}
}

// mapping is a YAML mapping checked against its known keys.
type mapping = yamlfile.Mapping

// mapping checks that n is a mapping whose keys are all in known, each at
// most once, suggesting a known key for a misspelt one.
func (p *parser) mapping(n *yaml.Node, path string, known ...string) (*mapping, error) {
	return p.Mapping(n, path, suggest, known...)
}

// scalar returns the text of key's value. ok is false when the key is
// absent; an empty value or a non-scalar is an error, since a key with no
// value is more likely a mistake than a request for the default.
func (p *parser) scalar(m *mapping, key string) (s string, n *yaml.Node, ok bool, err error) {
	n = m.Get(key)
	if n == nil {
		return "", nil, false, nil
	}
	if n.Kind != yaml.ScalarNode {
		return "", n, false, p.ErrAt(n, m.Field(key), "expected a single value, found %s", yamlfile.KindName(n))
	}
	if n.Tag == "!!null" || strings.TrimSpace(n.Value) == "" {
		return "", n, false, p.ErrAt(n, m.Field(key), "has no value; give one or remove the key")
	}
	return strings.TrimSpace(n.Value), n, true, nil
}

// required is scalar for a key that must be present.
func (p *parser) required(m *mapping, key, what string) (string, *yaml.Node, error) {
	s, n, ok, err := p.scalar(m, key)
	if err != nil {
		return "", nil, err
	}
	if !ok {
		return "", nil, p.ErrAt(m.Node, m.Path, "missing required field %q (%s)", key, what)
	}
	return s, n, nil
}

// sequence returns the items of key's value, which must be a non-empty
// list; ok is false when the key is absent.
func (p *parser) sequence(m *mapping, key string) (items []*yaml.Node, n *yaml.Node, ok bool, err error) {
	n = m.Get(key)
	if n == nil {
		return nil, nil, false, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, n, false, p.ErrAt(n, m.Field(key), "expected a list, found %s", yamlfile.KindName(n))
	}
	if len(n.Content) == 0 {
		return nil, n, false, p.ErrAt(n, m.Field(key), "is an empty list; list at least one entry or remove the key")
	}
	items = make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		items[i] = yamlfile.Resolve(c)
	}
	return items, n, true, nil
}

// quantity reads key with parse and checks it against [lo, hi]; lo is
// exclusive when open is true. ok is false when the key is absent.
func (p *parser) quantity(m *mapping, key string, parse func(string) (float64, error), lo float64, open bool, hi float64, hiText string) (v float64, ok bool, err error) {
	s, n, ok, err := p.scalar(m, key)
	if !ok || err != nil {
		return 0, false, err
	}
	v, err = parse(s)
	if err != nil {
		return 0, false, p.ErrAt(n, m.Field(key), "%v", err)
	}
	switch {
	case open && v <= lo:
		return 0, false, p.ErrAt(n, m.Field(key), "must be positive, found %s", s)
	case v < lo:
		return 0, false, p.ErrAt(n, m.Field(key), "must be at least %g, found %s", lo, s)
	case v > hi:
		return 0, false, p.ErrAt(n, m.Field(key), "%s is implausibly large (limit %s); check the unit", s, hiText)
	}
	return v, true, nil
}
