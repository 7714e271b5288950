package constraint

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The reader walks a yaml.Node tree rather than decoding into structs so
// that every error can name the line and field it is about, unknown keys
// included, as the cluster file reader does.

// parser carries the file name into every error, and counts selectors.
type parser struct {
	file       string
	nSelectors int
}

// maxSelectors bounds the selectors one file may hold: YAML aliases can
// repeat a list many times over without making the file any longer.
const maxSelectors = 1 << 16

// errAt makes a FileError at node n (which may be nil, giving no line).
func (p *parser) errAt(n *yaml.Node, field, format string, args ...any) *FileError {
	e := &FileError{File: p.file, Field: field, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line = n.Line
	}
	return e
}

// yamlLine pulls the line number out of a yaml.v3 syntax error, which
// reads "yaml: line 3: did not find expected key".
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// emptyHint ends the messages about a file with no rules.
const emptyHint = "a constraints file needs at least one rule, like pin: [{ops: module:/wte/, to: gpu0}] (see docs/constraints.md)"

// decode parses data as one YAML document and returns its root node.
func (p *parser) decode(data []byte) (root *yaml.Node, err error) {
	// yaml.v3 is not known to panic on any input, but Parse promises never
	// to, and a panic here would take down the whole CLI.
	defer func() {
		if r := recover(); r != nil {
			root, err = nil, p.errAt(nil, "", "not valid YAML (the YAML parser failed: %v)", r)
		}
	}()
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, p.errAt(nil, "", "file is empty: it holds no rules; %s", emptyHint)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, p.errAt(nil, "", "file holds no YAML document (only comments?), so no rules; %s", emptyHint)
		}
		return nil, p.yamlError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, p.errAt(&extra, "", "file holds more than one YAML document (a --- line); put all rules in one")
	} else if !errors.Is(err, io.EOF) {
		return nil, p.yamlError(err)
	}
	if len(doc.Content) == 0 {
		return nil, p.errAt(nil, "", "file is empty: it holds no rules; %s", emptyHint)
	}
	root = resolve(doc.Content[0])
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, p.errAt(root, "", "file is empty: it holds no rules; %s", emptyHint)
	}
	return root, nil
}

// yamlError turns a yaml.v3 syntax error into a FileError.
func (p *parser) yamlError(err error) *FileError {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &FileError{File: p.file, Line: line, Msg: "not valid YAML: " + m[2] + ` (quote values that start with * & ! or hold ": ", like on: "*")`}
	}
	return &FileError{File: p.file, Msg: "not valid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

// resolve follows aliases (*name) to the node they stand for.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// kindName describes a node's kind for messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "empty"
		}
		return fmt.Sprintf("the value %q", n.Value)
	}
	return "something else"
}

// A mapping is a YAML mapping checked against its known keys.
type mapping struct {
	node *yaml.Node
	path string
	vals map[string]*yaml.Node
}

// mapping checks that n is a mapping whose keys are all in known, each at
// most once.
func (p *parser) mapping(n *yaml.Node, path string, known ...string) (*mapping, error) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return nil, p.errAt(n, path, "expected a mapping with keys %s, found %s", strings.Join(known, ", "), kindName(n))
	}
	m := &mapping{node: n, path: path, vals: map[string]*yaml.Node{}}
	keyLines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, p.errAt(k, path, "a key must be a plain name, found %s", kindName(k))
		}
		if !slices.Contains(known, k.Value) {
			return nil, p.errAt(k, path, "unknown field %q (known: %s)%s", k.Value, strings.Join(known, ", "), suggest(k.Value, known))
		}
		if l, dup := keyLines[k.Value]; dup {
			return nil, p.errAt(k, m.field(k.Value), "given twice (first at line %d); keep one", l)
		}
		keyLines[k.Value] = k.Line
		m.vals[k.Value] = resolve(v)
	}
	return m, nil
}

// field is the path of key within m.
func (m *mapping) field(key string) string {
	if m.path == "" {
		return key
	}
	return m.path + "." + key
}

// get returns the value of key, or nil when it is absent.
func (m *mapping) get(key string) *yaml.Node { return m.vals[key] }

// scalarNode returns the text of scalar n; an empty value or a
// non-scalar is an error.
func (p *parser) scalarNode(n *yaml.Node, field, what string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", p.errAt(n, field, "expected %s, found %s", what, kindName(n))
	}
	if n.Tag == "!!null" || strings.TrimSpace(n.Value) == "" {
		return "", p.errAt(n, field, "has no value; give %s", what)
	}
	return strings.TrimSpace(n.Value), nil
}

// required returns the text of key's scalar value, which must be there.
func (p *parser) required(m *mapping, key, what string) (string, *yaml.Node, error) {
	n := m.get(key)
	if n == nil {
		return "", nil, p.errAt(m.node, m.path, "missing required field %q (%s)", key, what)
	}
	s, err := p.scalarNode(n, m.field(key), what)
	return s, n, err
}

// list returns the items of n, which must be a non-empty list.
func (p *parser) list(n *yaml.Node, field, what string) ([]*yaml.Node, error) {
	if n.Kind != yaml.SequenceNode {
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return nil, p.errAt(n, field, "has no value; give a list of %s, or remove the key", what)
		}
		return nil, p.errAt(n, field, "expected a list of %s, found %s", what, kindName(n))
	}
	if len(n.Content) == 0 {
		return nil, p.errAt(n, field, "is an empty list; list %s, or remove the key", what)
	}
	items := make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		items[i] = resolve(c)
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
		return nil, p.errAt(n, field, "the file holds more than %d selectors; write fewer, broader ones (a glob, a regex or a module)", maxSelectors)
	}
	sels := make([]Selector, len(texts))
	for i, s := range texts {
		if sels[i], err = ParseSelector(s); err != nil {
			return nil, p.errAt(nodes[i], fields[i], "%v", err)
		}
	}
	return sels, nil
}

// ops reads a rule's required ops: key.
func (p *parser) ops(m *mapping) ([]Selector, error) {
	n := m.get("ops")
	if n == nil {
		return nil, p.errAt(m.node, m.path, "missing required field \"ops\" (a selector, like module:/wte/, or a list of them)")
	}
	return p.selectors(n, m.field("ops"))
}

// target reads key's value as a target; ok is false when it is absent.
func (p *parser) target(m *mapping, key string) (t Target, ok bool, err error) {
	n := m.get(key)
	if n == nil {
		return Target{}, false, nil
	}
	s, err := p.scalarNode(n, m.field(key), targetSpelling)
	if err != nil {
		return Target{}, false, err
	}
	if t, err = ParseTarget(s); err != nil {
		return Target{}, false, p.errAt(n, m.field(key), "%v", err)
	}
	return t, true, nil
}

// requiredTarget is target for a key that must be present.
func (p *parser) requiredTarget(m *mapping, key string) (Target, error) {
	t, ok, err := p.target(m, key)
	if err == nil && !ok {
		err = p.errAt(m.node, m.path, "missing required field %q (%s)", key, targetSpelling)
	}
	return t, err
}
