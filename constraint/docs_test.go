package constraint

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const (
	docsFile   = "../docs/constraints.md"
	schemaFile = "../docs/constraints.schema.json"
)

// A block is a fenced code block of a Markdown file.
type block struct {
	line int // the line of its opening fence
	text string
}

// yamlBlocks returns the ```yaml blocks of a Markdown text.
func yamlBlocks(doc string) []block { return fenced(doc, "yaml") }

// fenced returns the blocks of a Markdown text fenced as ```lang.
func fenced(doc, lang string) []block {
	var blocks []block
	var cur *block
	for i, line := range strings.Split(doc, "\n") {
		switch {
		case cur == nil && strings.TrimSpace(line) == "```"+lang:
			cur = &block{line: i + 1}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	return blocks
}

// TestDocsExamples checks that every yaml block of docs/constraints.md is
// a constraints file Parse reads, and that the rules each spells back.
func TestDocsExamples(t *testing.T) {
	doc, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	blocks := yamlBlocks(string(doc))
	if len(blocks) < 3 {
		t.Fatalf("found %d yaml blocks in %s; the doc should show the format and examples", len(blocks), docsFile)
	}
	for _, b := range blocks {
		set, err := Parse("constraints.md", []byte(b.text))
		if err != nil {
			t.Errorf("%s: the yaml block at line %d: %v", docsFile, b.line, err)
			continue
		}
		for _, r := range set.Rules {
			roundTrip(t, r)
		}
	}
}

// TestSchemaMatchesParser checks that docs/constraints.schema.json is JSON
// naming exactly the sections and rule keys the parser accepts.
func TestSchemaMatchesParser(t *testing.T) {
	data, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatalf("%s is not valid JSON: %v", schemaFile, err)
	}
	if got := schema["$schema"]; got != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %v, want draft 2020-12", got)
	}
	defs, _ := schema["$defs"].(map[string]any)
	// deref follows a local $ref into $defs.
	deref := func(v any) map[string]any {
		m, _ := v.(map[string]any)
		for range 8 {
			ref, ok := m["$ref"].(string)
			if !ok {
				break
			}
			name, ok := strings.CutPrefix(ref, "#/$defs/")
			if !ok {
				t.Fatalf("$ref %q is not local to $defs", ref)
			}
			if m, ok = defs[name].(map[string]any); !ok {
				t.Fatalf("$ref %q names no definition", ref)
			}
		}
		return m
	}
	// keys returns the property names of an object schema, checking that
	// it refuses other keys.
	keys := func(where string, m map[string]any) []string {
		if m["type"] != "object" {
			t.Errorf("%s: type %v, want object", where, m["type"])
		}
		if m["additionalProperties"] != false {
			t.Errorf("%s: additionalProperties must be false: the parser refuses unknown keys", where)
		}
		props, _ := m["properties"].(map[string]any)
		var ks []string
		for k := range props {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	sorted := func(s []string) []string {
		s = slices.Clone(s)
		slices.Sort(s)
		return s
	}
	if got, want := keys("top level", schema), sorted(topKeys); !reflect.DeepEqual(got, want) {
		t.Errorf("top-level properties %v, want %v", got, want)
	}
	props, _ := schema["properties"].(map[string]any)
	for _, kind := range Kinds {
		sec := deref(props[string(kind)])
		if sec == nil {
			t.Errorf("no schema for section %s", kind)
			continue
		}
		want, hasKeys := ruleKeys[kind]
		var rule map[string]any
		switch kind {
		case Limit:
			rule = sec
		default:
			if sec["type"] != "array" {
				t.Errorf("section %s: type %v, want array", kind, sec["type"])
			}
			rule = deref(sec["items"])
		}
		if !hasKeys {
			// separate: each rule is a list of groups.
			if rule["type"] != "array" || rule["minItems"] != 2.0 {
				t.Errorf("section %s: a rule must be an array of at least 2 groups, found %v", kind, rule)
			}
			continue
		}
		if got := keys(string(kind), rule); !reflect.DeepEqual(got, sorted(want)) {
			t.Errorf("section %s: rule properties %v, want %v", kind, got, sorted(want))
		}
	}
}

// textBlocks returns the ```text blocks of a Markdown text.
func textBlocks(doc string) []block { return fenced(doc, "text") }

// shellWords splits a command line as sh does for the quoting the docs
// use: single quotes, backslash-newline, plain words.
func shellWords(s string) []string {
	s = strings.ReplaceAll(s, "\\\n", " ")
	var words []string
	var cur strings.Builder
	in, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quoted && c == '\'':
			quoted = false
		case quoted:
			cur.WriteByte(c)
		case c == '\'':
			quoted, in = true, true
		case c == ' ' || c == '\n' || c == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// flagRules reads the rule flags of a command line.
func flagRules(t *testing.T, words []string) []Rule {
	var rules []Rule
	for i := 0; i+1 < len(words); i++ {
		kind, ok := strings.CutPrefix(words[i], "--")
		if !ok || !slices.Contains(Kinds, Kind(kind)) {
			continue
		}
		r, err := ParseFlag(Kind(kind), words[i+1])
		if err != nil {
			t.Errorf("%s: %v", docsFile, err)
			continue
		}
		rules = append(rules, r)
		i++
	}
	return rules
}

// TestDocsFlags checks the doc's flag spellings: the one-line spellings
// are canonical, every example flag reads, and the worked example's flags
// are its file's rules.
func TestDocsFlags(t *testing.T) {
	data, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	lines, commands := 0, 0
	for _, b := range textBlocks(doc) {
		if strings.HasPrefix(b.text, "opplace ") {
			commands++
			rules := flagRules(t, shellWords(b.text))
			// The yaml block just before holds the same rules.
			var file *block
			for _, y := range yamlBlocks(doc) {
				if y.line < b.line {
					file = &y
				}
			}
			set, err := Parse("f.yaml", []byte(file.text))
			if err != nil {
				t.Fatal(err)
			}
			if len(set.Rules) != len(rules) {
				t.Fatalf("the command at line %d gives %d rules, the yaml block before it %d", b.line, len(rules), len(set.Rules))
			}
			for i, r := range rules {
				if got, want := r.String(), set.Rules[i].String(); got != want {
					t.Errorf("the command at line %d: rule %d is %q, the yaml block's %q", b.line, i, got, want)
				}
			}
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(b.text), "\n") {
			kind, value, _ := strings.Cut(line, " ")
			if !slices.Contains(Kinds, Kind(kind)) {
				continue
			}
			lines++
			r, err := ParseFlag(Kind(kind), value)
			if err != nil {
				t.Errorf("%s: one-line spelling %q: %v", docsFile, line, err)
			} else if r.String() != line {
				t.Errorf("%s: one-line spelling %q is not canonical: %q", docsFile, line, r.String())
			}
		}
	}
	if lines < 8 || commands < 1 {
		t.Errorf("found %d one-line spellings and %d commands in %s", lines, commands, docsFile)
	}
	// Every `--kind value` in the text that is not a placeholder reads.
	examples := regexp.MustCompile("`(--[a-z]+ [^`]+)`").FindAllStringSubmatch(doc, -1)
	placeholder := regexp.MustCompile(`[A-Z]{4,}|^N$`)
	n := 0
	for _, m := range examples {
		words := shellWords(m[1])
		if len(words) != 2 || placeholder.MatchString(words[1]) {
			continue
		}
		n++
		if len(flagRules(t, words)) != 1 {
			t.Errorf("%s: %q is no rule flag", docsFile, m[1])
		}
	}
	if n < 10 {
		t.Errorf("found %d flag examples in %s", n, docsFile)
	}
}
