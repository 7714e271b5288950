package yamlfile

import (
	"strings"
	"testing"
)

func TestParserErrors(t *testing.T) {
	p := &Parser{File: "f.yaml", What: "test file", Empty: "give a key", ManyDocuments: "use one", SyntaxHint: "quote it"}
	tests := []struct {
		data string
		keys []string
		want string
	}{
		{"", nil, "f.yaml: file is empty; give a key"},
		{"# only a comment\n", nil, "f.yaml: file holds no YAML document (only comments?); give a key"},
		{"a: 1\n---\nb: 2\n", nil, "f.yaml:2: file holds more than one YAML document; use one"},
		{"a: [1\n", nil, "not valid YAML: "},
		{"a: [1\n", nil, "(quote it)"},
		{"~\n", nil, "f.yaml:1: file is empty; give a key"},
		{"alpha: 1\nbeta: 2\n", []string{"alpha"}, `f.yaml:2: unknown field "beta" (known: alpha)`},
		{"alpha: 1\nalpha: 2\n", []string{"alpha"}, "f.yaml:2: alpha: given twice (first at line 1); keep one"},
		{"- 1\n", []string{"alpha"}, "f.yaml:1: expected a mapping with keys alpha, found a list"},
	}
	for _, tc := range tests {
		root, err := p.Decode([]byte(tc.data))
		if err == nil {
			_, err = p.Mapping(root, "", nil, tc.keys...)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.data, err, tc.want)
		}
	}
	root, err := p.Decode([]byte("base: &b {alpha: 1}\nuse: *b\n"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := p.Mapping(root, "", nil, "base", "use")
	if err != nil {
		t.Fatal(err)
	}
	inner, err := p.Mapping(m.Get("use"), m.Field("use"), nil, "alpha")
	if err != nil || inner.Get("alpha").Value != "1" || inner.Field("alpha") != "use.alpha" {
		t.Errorf("an alias resolves to its mapping: %v %+v", err, inner)
	}
}

func TestErrorWithoutFile(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{What: "cluster file", Line: 2, Msg: "bad"}, "cluster file:2: bad"},
		{Error{Field: "x", Msg: "bad"}, "file: x: bad"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.e, got, tc.want)
		}
	}
	if d := EditDistance("memroy", "memory"); d != 2 {
		t.Errorf("EditDistance(memroy, memory) = %d, want 2", d)
	}
}
