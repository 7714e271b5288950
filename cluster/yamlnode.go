package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The loader walks a yaml.Node tree rather than decoding into structs so
// that every error can name the line and field it is about, unknown keys
// included.

// parser carries the file name into every error.
type parser struct {
	file string
}

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
		return nil, p.errAt(nil, "", "file is empty; a cluster file needs at least a devices: list")
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, p.errAt(nil, "", "file holds no YAML document (only comments?); a cluster file needs at least a devices: list")
		}
		return nil, p.yamlError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, p.errAt(&extra, "", "file holds more than one YAML document; put one cluster per file")
	} else if !errors.Is(err, io.EOF) {
		return nil, p.yamlError(err)
	}
	if len(doc.Content) == 0 {
		return nil, p.errAt(nil, "", "file is empty; a cluster file needs at least a devices: list")
	}
	root = resolve(doc.Content[0])
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, p.errAt(root, "", "file is empty; a cluster file needs at least a devices: list")
	}
	return root, nil
}

// yamlError turns a yaml.v3 syntax error into a FileError.
func (p *parser) yamlError(err error) *FileError {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &FileError{File: p.file, Line: line, Msg: "not valid YAML: " + m[2]}
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
		if !contains(known, k.Value) {
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

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
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

// scalar returns the text of key's value. ok is false when the key is
// absent; an empty value or a non-scalar is an error, since a key with no
// value is more likely a mistake than a request for the default.
func (p *parser) scalar(m *mapping, key string) (s string, n *yaml.Node, ok bool, err error) {
	n = m.get(key)
	if n == nil {
		return "", nil, false, nil
	}
	if n.Kind != yaml.ScalarNode {
		return "", n, false, p.errAt(n, m.field(key), "expected a single value, found %s", kindName(n))
	}
	if n.Tag == "!!null" || strings.TrimSpace(n.Value) == "" {
		return "", n, false, p.errAt(n, m.field(key), "has no value; give one or remove the key")
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
		return "", nil, p.errAt(m.node, m.path, "missing required field %q (%s)", key, what)
	}
	return s, n, nil
}

// sequence returns the items of key's value, which must be a non-empty
// list; ok is false when the key is absent.
func (p *parser) sequence(m *mapping, key string) (items []*yaml.Node, n *yaml.Node, ok bool, err error) {
	n = m.get(key)
	if n == nil {
		return nil, nil, false, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, n, false, p.errAt(n, m.field(key), "expected a list, found %s", kindName(n))
	}
	if len(n.Content) == 0 {
		return nil, n, false, p.errAt(n, m.field(key), "is an empty list; list at least one entry or remove the key")
	}
	items = make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		items[i] = resolve(c)
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
		return 0, false, p.errAt(n, m.field(key), "%v", err)
	}
	switch {
	case open && v <= lo:
		return 0, false, p.errAt(n, m.field(key), "must be positive, found %s", s)
	case v < lo:
		return 0, false, p.errAt(n, m.field(key), "must be at least %g, found %s", lo, s)
	case v > hi:
		return 0, false, p.errAt(n, m.field(key), "%s is implausibly large (limit %s); check the unit", s, hiText)
	}
	return v, true, nil
}
