package constraint

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/opplace/opplace/internal/yamlfile"
)

// The reader walks a yaml.Node tree rather than decoding into structs so
// that every error can name the line and field it is about, unknown keys
// included, as the cluster file reader does.

// parser carries the file name into every error, and counts selectors.
type parser struct {
	yamlfile.Parser
	nSelectors int
}

func newParser(file string) *parser {
	return &parser{Parser: yamlfile.Parser{File: file, What: "constraints file",
		Empty: "it holds no rules; " + emptyHint, ManyDocuments: "put all rules in one (a --- line starts another)",
		SyntaxHint: `quote values that start with * & ! or hold ": ", like on: "*"`}}
}

// maxSelectors bounds the selectors one file may hold: YAML aliases can
// repeat a list many times over without making the file any longer.
const maxSelectors = 1 << 16

// emptyHint ends the messages about a file with no rules.
const emptyHint = "a constraints file needs at least one rule, like pin: [{ops: module:/wte/, to: gpu0}] (see docs/constraints.md)"

// mapping is a YAML mapping checked against its known keys.
type mapping = yamlfile.Mapping

// mapping checks that n is a mapping whose keys are all in known, each at
// most once, suggesting a known key for a misspelt one.
func (p *parser) mapping(n *yaml.Node, path string, known ...string) (*mapping, error) {
	return p.Mapping(n, path, suggest, known...)
}

// scalarNode returns the text of scalar n; an empty value or a
// non-scalar is an error.
func (p *parser) scalarNode(n *yaml.Node, field, what string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", p.ErrAt(n, field, "expected %s, found %s", what, yamlfile.KindName(n))
	}
	if n.Tag == "!!null" || strings.TrimSpace(n.Value) == "" {
		return "", p.ErrAt(n, field, "has no value; give %s", what)
	}
	return strings.TrimSpace(n.Value), nil
}

// required returns the text of key's scalar value, which must be there.
func (p *parser) required(m *mapping, key, what string) (string, *yaml.Node, error) {
	n := m.Get(key)
	if n == nil {
		return "", nil, p.ErrAt(m.Node, m.Path, "missing required field %q (%s)", key, what)
	}
	s, err := p.scalarNode(n, m.Field(key), what)
	return s, n, err
}

// list returns the items of n, which must be a non-empty list.
func (p *parser) list(n *yaml.Node, field, what string) ([]*yaml.Node, error) {
	if n.Kind != yaml.SequenceNode {
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return nil, p.ErrAt(n, field, "has no value; give a list of %s, or remove the key", what)
		}
		return nil, p.ErrAt(n, field, "expected a list of %s, found %s", what, yamlfile.KindName(n))
	}
	if len(n.Content) == 0 {
		return nil, p.ErrAt(n, field, "is an empty list; list %s, or remove the key", what)
	}
	items := make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		items[i] = yamlfile.Resolve(c)
	}
	return items, nil
}

// scalars reads n as one scalar or a non-empty list of scalars, giving
// each item's text, node and field.
func (p *parser) scalars(n *yaml.Node, field, what string) (texts []string, nodes []*yaml.Node, fields []string, err error) {
	if n.Kind != yaml.SequenceNode {
		s, err := p.scalarNode(n, field, what+", or a list of them")
		if err != nil {
			return nil, nil, nil, err
		}
		return []string{s}, []*yaml.Node{n}, []string{field}, nil
	}
	items, err := p.list(n, field, strings.TrimPrefix(what, "a ")+"s")
	if err != nil {
		return nil, nil, nil, err
	}
	for i, item := range items {
		f := fmt.Sprintf("%s[%d]", field, i)
		s, err := p.scalarNode(item, f, what)
		if err != nil {
			return nil, nil, nil, err
		}
		texts, nodes, fields = append(texts, s), append(nodes, item), append(fields, f)
	}
	return texts, nodes, fields, nil
}

// selectors reads n as one selector or a list of them (their union).
func (p *parser) selectors(n *yaml.Node, field string) ([]Selector, error) {
	texts, nodes, fields, err := p.scalars(n, field, "a selector")
	if err != nil {
		return nil, err
	}
	p.nSelectors += len(texts)
	if p.nSelectors > maxSelectors {
		return nil, p.ErrAt(n, field, "the file holds more than %d selectors; write fewer, broader ones (a glob, a regex or a module)", maxSelectors)
	}
	sels := make([]Selector, len(texts))
	for i, s := range texts {
		if sels[i], err = ParseSelector(s); err != nil {
			return nil, p.ErrAt(nodes[i], fields[i], "%v", err)
		}
	}
	return sels, nil
}

// ops reads a rule's required ops: key.
func (p *parser) ops(m *mapping) ([]Selector, error) {
	n := m.Get("ops")
	if n == nil {
		return nil, p.ErrAt(m.Node, m.Path, "missing required field \"ops\" (a selector, like module:/wte/, or a list of them)")
	}
	return p.selectors(n, m.Field("ops"))
}

// target reads key's value as a target; ok is false when it is absent.
func (p *parser) target(m *mapping, key string) (t Target, ok bool, err error) {
	n := m.Get(key)
	if n == nil {
		return Target{}, false, nil
	}
	s, err := p.scalarNode(n, m.Field(key), targetSpelling)
	if err != nil {
		return Target{}, false, err
	}
	if t, err = ParseTarget(s); err != nil {
		return Target{}, false, p.ErrAt(n, m.Field(key), "%v", err)
	}
	return t, true, nil
}

// requiredTarget is target for a key that must be present.
func (p *parser) requiredTarget(m *mapping, key string) (Target, error) {
	t, ok, err := p.target(m, key)
	if err == nil && !ok {
		err = p.ErrAt(m.Node, m.Path, "missing required field %q (%s)", key, targetSpelling)
	}
	return t, err
}
