package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/opplace/opplace/internal/files"
)

// ReadFile reads a plan document as Write writes it, JSON or YAML (told
// apart by content, not by extension). Every error names the
// file and says what is wrong with it in one line.
func ReadFile(path string) (*Plan, error) {
	data, err := files.Read(path, "plan")
	if err != nil {
		return nil, err
	}
	p, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Decode parses a plan document, JSON or YAML, and checks that it is
// one: its top level has the fields every plan has (a "devices" and an
// "ops" list, "predicted_step_ms"), it lists devices, and every op and
// transfer names one of them. A document that is no plan (a cluster
// file, a costed graph, a profile, a JSON list) is refused as such before
// it is decoded; fields a later opplace may add are read past. Every
// error is one line and names no Go type.
func Decode(data []byte) (*Plan, error) {
	trimmed := bytes.TrimSpace(bytes.TrimPrefix(data, []byte("\ufeff")))
	if len(trimmed) == 0 {
		return nil, errors.New("the file is empty; expected a plan document (the plan file opplace plan writes)")
	}
	if bytes.IndexByte(trimmed, 0) >= 0 || !utf8.Valid(trimmed) {
		return nil, notPlan("it is a binary file, not JSON or YAML: a model?")
	}
	p := &Plan{}
	if trimmed[0] == '{' || trimmed[0] == '[' {
		keys := JSONKeys(trimmed)
		if err := recognise(keys); err != nil {
			if trimmed[0] == '{' && !json.Valid(trimmed) {
				var v any
				return nil, fmt.Errorf("not a valid JSON plan: %s", files.JSONError(trimmed, json.Unmarshal(trimmed, &v)))
			}
			if trimmed[0] == '[' {
				return nil, notPlan("it is a list, not a map of a plan's fields")
			}
			return nil, err
		}
		if err := json.Unmarshal(trimmed, p); err != nil {
			return nil, fmt.Errorf("not a valid JSON plan: %s", files.JSONError(trimmed, err))
		}
	} else {
		var doc yaml.Node
		if err := yaml.Unmarshal(trimmed, &doc); err != nil {
			return nil, fmt.Errorf("not a valid plan (JSON or YAML): %s", yamlError(err))
		}
		root := &doc
		for root != nil && (root.Kind == yaml.DocumentNode && len(root.Content) > 0 || root.Kind == yaml.AliasNode) {
			if root.Kind == yaml.AliasNode {
				root = root.Alias
			} else {
				root = root.Content[0]
			}
		}
		if root == nil || root.Kind != yaml.MappingNode {
			return nil, notPlan("it is " + yamlKind(root) + ", not a map of a plan's fields")
		}
		keys := map[string]byte{}
		for i := 0; i+1 < len(root.Content); i += 2 {
			keys[root.Content[i].Value] = yamlFirst(root.Content[i+1])
		}
		if err := recognise(keys); err != nil {
			return nil, err
		}
		if err := root.Decode(p); err != nil {
			return nil, fmt.Errorf("not a valid plan: %s", yamlError(err))
		}
	}
	if err := check(p); err != nil {
		return nil, fmt.Errorf("not a valid plan: %v", err)
	}
	return p, nil
}

// notPlan is the refusal of a document that is no plan: why, and what
// to give instead.
func notPlan(why string) error {
	return fmt.Errorf("not an opplace plan (%s); give the plan file opplace plan writes", why)
}

// planFields are the top-level fields every plan has, with the first
// byte of their JSON value ('[' a list, '0' a number).
var planFields = []struct {
	name  string
	first byte
}{{"devices", '['}, {"ops", '['}, {"predicted_step_ms", '0'}}

// lookalikes name the files a user may give by mistake by a top-level
// field only they have.
var lookalikes = []struct{ field, what string }{
	{"hosts", "a cluster file"},
	{"links", "a cluster file"},
	{"edges", "a costed graph"},
	{"device_types", "a profile, which opplace profile writes"},
	{"measurements", "a profile, which opplace profile writes"},
	{"modelTopology", "a TensorFlow.js model"},
	{"weightsManifest", "a TensorFlow.js model"},
	{"traceEvents", "a schedule trace, which opplace plan writes on request"},
	{"pin", "a constraints file"},
	{"avoid", "a constraints file"},
	{"reserve", "a constraints file"},
	{"colocate", "a constraints file"},
	{"separate", "a constraints file"},
	{"strategies", "a comparison, which opplace compare -o json prints"},
}

// recognise checks a document's top-level fields (each with the first
// byte of its value, as JSONKeys gives them) for the ones every plan
// has, and says what the document looks like when they are missing.
func recognise(keys map[string]byte) error {
	var missing []string
	for _, f := range planFields {
		k, ok := keys[f.name]
		if !ok || f.first == '[' && k != '[' && k != 'n' || f.first == '0' && !number(k) {
			missing = append(missing, f.name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	for _, l := range lookalikes {
		if _, ok := keys[l.field]; ok {
			return notPlan("it looks like " + l.what)
		}
	}
	if _, ok := keys["devices"]; ok && slices.Contains(missing, "ops") {
		return notPlan("it looks like a cluster file")
	}
	scalars := len(keys) > 0
	for _, k := range keys {
		scalars = scalars && k == '"'
	}
	if scalars {
		return notPlan("it looks like a placement file: a map from ops to devices")
	}
	for i, m := range missing {
		missing[i] = strconv.Quote(m)
	}
	return notPlan("it has no " + strings.Join(missing, ", "))
}

func number(b byte) bool { return b == '-' || b >= '0' && b <= '9' }

// JSONKeys lists the keys of a JSON object's top level, each with the
// first byte of its value ('[' for a list, '{' for an object, '"' for a
// string, a digit or '-' for a number), by one pass over its bytes that
// follows strings and nesting and checks nothing else (the decoder that
// reads the document does), so telling a document's kind costs no
// parse. Keys keep their JSON escapes.
func JSONKeys(data []byte) map[string]byte {
	keys := map[string]byte{}
	depth, key := 0, []byte(nil)
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case '"':
			j := i + 1
			for j < len(data) && data[j] != '"' {
				if data[j] == '\\' {
					j++
				}
				j++
			}
			if depth == 1 {
				key = data[i+1 : min(j, len(data))]
			}
			i = j
		case ':':
			if depth == 1 && key != nil {
				k := i + 1
				for k < len(data) && (data[k] == ' ' || data[k] == '\t' || data[k] == '\n' || data[k] == '\r') {
					k++
				}
				if k < len(data) {
					keys[string(key)] = data[k]
				}
				key = nil
			}
		case ',':
			if depth == 1 {
				key = nil
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		}
	}
	return keys
}

// yamlFirst is the byte JSONKeys would give a YAML value: '[' for a
// list, '{' for a map, '0' for a number, '"' for any other scalar.
func yamlFirst(n *yaml.Node) byte {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch {
	case n.Kind == yaml.SequenceNode:
		return '['
	case n.Kind == yaml.MappingNode:
		return '{'
	case n.Tag == "!!int" || n.Tag == "!!float":
		return '0'
	case n.Tag == "!!null":
		return 'n'
	}
	return '"'
}

func yamlKind(n *yaml.Node) string {
	switch {
	case n == nil || n.Kind == 0 || n.Kind == yaml.DocumentNode:
		return "empty"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Tag == "!!null":
		return "empty"
	}
	return "a single value"
}

// yamlError is a yaml.v3 error in one line, without the Go types a
// *yaml.TypeError names: its first problem, and how many more.
func yamlError(err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		msg, _, _ := strings.Cut(strings.TrimPrefix(err.Error(), "yaml: "), "\n")
		return msg
	}
	msg := te.Errors[0]
	if m := yamlUnmarshal.FindStringSubmatch(msg); m != nil {
		got := map[string]string{"seq": "a list", "map": "a map", "str": "a string", "int": "a number",
			"float": "a number", "bool": "true or false", "null": "nothing", "binary": "binary data", "timestamp": "a time"}[m[2]]
		if got == "" {
			got = "!!" + m[2]
		}
		if m[3] != "" {
			got += m[3]
		}
		msg = fmt.Sprintf("%s: expected %s, found %s", m[1], files.GoTypeWord(m[4]), got)
	}
	if n := len(te.Errors) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more such errors)", n)
	}
	return msg
}

// yamlUnmarshal reads a yaml.v3 type error: "line 3: cannot unmarshal
// !!str `16GiB` into []plan.MemorySample".
var yamlUnmarshal = regexp.MustCompile("^(line \\d+): cannot unmarshal !!(\\w+)( `.*`)? into (.+)$")

// check catches documents that parse but are no plan (a truncated plan,
// an edited one), so the report never draws nonsense.
func check(p *Plan) error {
	if len(p.Devices) == 0 {
		return errors.New("it lists no devices (is it a plan document?)")
	}
	devs := make(map[string]bool, len(p.Devices))
	for _, d := range p.Devices {
		if d.Name == "" {
			return errors.New("a device has no name")
		}
		devs[d.Name] = true
	}
	for _, op := range p.Ops {
		if !devs[op.Device] {
			return fmt.Errorf("op %q is placed on %q, which is not among the plan's devices", op.Name, op.Device)
		}
		if op.EndMS < op.StartMS {
			return fmt.Errorf("op %q ends (%g ms) before it starts (%g ms)", op.Name, op.EndMS, op.StartMS)
		}
	}
	for _, t := range p.Transfers {
		if !devs[t.From] || !devs[t.To] {
			return fmt.Errorf("transfer of %q goes from %q to %q, not both among the plan's devices", t.Tensor, t.From, t.To)
		}
	}
	if p.PredictedStepMS < 0 {
		return fmt.Errorf("negative predicted step %g ms", p.PredictedStepMS)
	}
	return nil
}
