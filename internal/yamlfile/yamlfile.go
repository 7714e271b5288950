// Package yamlfile reads the YAML files users write (cluster files,
// constraints files) so that every error names the file, the line and the
// field it is about, unknown keys included: it walks a yaml.v3 Node tree
// rather than decoding into structs.
package yamlfile

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

// Error is a problem with a file: its parser returns one for every invalid
// input, so callers can tell bad input (errors.As finds an *Error) from
// I/O failures.
type Error struct {
	// File is the name given to the parser (a path, usually).
	File string
	// Line is the 1-based line of the offending YAML node, or 0 when the
	// problem has no single place (an empty file).
	Line int
	// Field is the path of the offending field, like "devices[1].memory";
	// empty for problems with the file as a whole.
	Field string
	// Msg says what is wrong and what to do about it.
	Msg string
	// What names the kind of file ("cluster file") where File is empty;
	// "file" when it is empty too.
	What string
}

// Error formats e as "file:line: field: msg", leaving out the parts that
// are unset.
func (e *Error) Error() string {
	var b strings.Builder
	file := e.File
	if file == "" {
		file = e.What
	}
	if file == "" {
		file = "file"
	}
	b.WriteString(file)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Parser carries the file's name and its kind's wording into every error.
type Parser struct {
	File string
	// What names the kind of file, for an Error without a File.
	What string
	// Empty ends the message about a file that holds nothing (what the
	// file needs at least); ManyDocuments says what to do with a second
	// YAML document; SyntaxHint, if set, follows every YAML syntax error.
	Empty, ManyDocuments, SyntaxHint string
}

// ErrAt makes an Error at node n (which may be nil, giving no line).
func (p *Parser) ErrAt(n *yaml.Node, field, format string, args ...any) *Error {
	e := &Error{File: p.File, Field: field, Msg: fmt.Sprintf(format, args...), What: p.What}
	if n != nil {
		e.Line = n.Line
	}
	return e
}

// yamlLine pulls the line number out of a yaml.v3 syntax error, which
// reads "yaml: line 3: did not find expected key".
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// Decode parses data as one YAML document and returns its root node.
func (p *Parser) Decode(data []byte) (root *yaml.Node, err error) {
	// yaml.v3 is not known to panic on any input, but a parser promises
	// never to, and a panic here would take down the whole CLI.
	defer func() {
		if r := recover(); r != nil {
			root, err = nil, p.ErrAt(nil, "", "not valid YAML (the YAML parser failed: %v)", r)
		}
	}()
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, p.ErrAt(nil, "", "file is empty; %s", p.Empty)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, p.ErrAt(nil, "", "file holds no YAML document (only comments?); %s", p.Empty)
		}
		return nil, p.syntax(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, p.ErrAt(&extra, "", "file holds more than one YAML document; %s", p.ManyDocuments)
	} else if !errors.Is(err, io.EOF) {
		return nil, p.syntax(err)
	}
	if len(doc.Content) == 0 {
		return nil, p.ErrAt(nil, "", "file is empty; %s", p.Empty)
	}
	root = Resolve(doc.Content[0])
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, p.ErrAt(root, "", "file is empty; %s", p.Empty)
	}
	return root, nil
}

// syntax turns a yaml.v3 syntax error into an Error.
func (p *Parser) syntax(err error) *Error {
	msg := err.Error()
	e := &Error{File: p.File, What: p.What}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = "not valid YAML: " + m[2]
	} else {
		e.Msg = "not valid YAML: " + strings.TrimPrefix(msg, "yaml: ")
	}
	if p.SyntaxHint != "" {
		e.Msg += " (" + p.SyntaxHint + ")"
	}
	return e
}

// Resolve follows aliases (*name) to the node they stand for.
func Resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// KindName describes a node's kind for messages.
func KindName(n *yaml.Node) string {
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

// A Mapping is a YAML mapping checked against its known keys.
type Mapping struct {
	Node *yaml.Node
	// Path is the mapping's field path ("devices[1]"), "" at the top.
	Path string
	// Vals holds each key's value, aliases resolved.
	Vals map[string]*yaml.Node
}

// Mapping checks that n is a mapping whose keys are all in known, each at
// most once; suggest proposes a known key for an unknown one (nil: none).
func (p *Parser) Mapping(n *yaml.Node, path string, suggest func(string, []string) string, known ...string) (*Mapping, error) {
	n = Resolve(n)
	if n.Kind != yaml.MappingNode {
		return nil, p.ErrAt(n, path, "expected a mapping with keys %s, found %s", strings.Join(known, ", "), KindName(n))
	}
	m := &Mapping{Node: n, Path: path, Vals: map[string]*yaml.Node{}}
	keyLines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := Resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, p.ErrAt(k, path, "a key must be a plain name, found %s", KindName(k))
		}
		if !slices.Contains(known, k.Value) {
			hint := ""
			if suggest != nil {
				hint = suggest(k.Value, known)
			}
			return nil, p.ErrAt(k, path, "unknown field %q (known: %s)%s", k.Value, strings.Join(known, ", "), hint)
		}
		if l, dup := keyLines[k.Value]; dup {
			return nil, p.ErrAt(k, m.Field(k.Value), "given twice (first at line %d); keep one", l)
		}
		keyLines[k.Value] = k.Line
		m.Vals[k.Value] = Resolve(v)
	}
	return m, nil
}

// Field is the path of key within m.
func (m *Mapping) Field(key string) string {
	if m.Path == "" {
		return key
	}
	return m.Path + "." + key
}

// Get returns the value of key, or nil when it is absent.
func (m *Mapping) Get(key string) *yaml.Node { return m.Vals[key] }

// EditDistance is the Levenshtein distance between a and b, in bytes;
// long inputs are not typos worth the quadratic cost.
func EditDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b))
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
