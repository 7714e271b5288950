package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/opplace/opplace/internal/printable"
)

// controlNames renames the ops of the tiny costed graph to names that
// carry what a terminal, browser or trace viewer acts on: BEL, CR,
// U+202E RIGHT-TO-LEFT OVERRIDE, NEL, a zero-width space and an ANSI
// colour escape.
var controlNames = map[string]string{"a": "emb\abell", "b": "mm\rcr", "c": "mm\u202eevil", "d": "add\u0085\u200b\x1b[31m"}

// writeControlModel writes the tiny costed graph with controlNames into
// dir.
func writeControlModel(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile("../../testdata/costed/tiny.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for _, op := range m["ops"].([]any) {
		op := op.(map[string]any)
		op["name"] = controlNames[op["name"].(string)]
	}
	for _, e := range m["edges"].([]any) {
		e := e.(map[string]any)
		e["from"], e["to"] = controlNames[e["from"].(string)], controlNames[e["to"].(string)]
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "control.json")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// unsafeRunes lists the characters of s a reader would not see (newlines
// and tabs are a document's own).
func unsafeRunes(s string) []string {
	var bad []string
	for i, r := range s {
		if r == utf8.RuneError && !strings.HasPrefix(s[i:], "\ufffd") || !printable.Safe(r) && r != '\n' && r != '\t' {
			bad = append(bad, printable.String(string(r)))
		}
	}
	return bad
}

// jsonStrings is every string a JSON document holds, keys included, as
// a viewer decodes them.
func jsonStrings(t *testing.T, data []byte) []string {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case []any:
			for _, x := range v {
				walk(x)
			}
		case map[string]any:
			for k, x := range v {
				out = append(out, k)
				walk(x)
			}
		}
	}
	walk(v)
	return out
}

// TestControlCharactersInNames: names from a model reach every output a
// person reads (table, HTML report, DOT, trace, inspect, errors) with
// their control and bidi characters escaped, while the plan file keeps
// them as they are.
func TestControlCharactersInNames(t *testing.T) {
	dir := t.TempDir()
	model := writeControlModel(t, dir)
	cl := filepath.Join(clusterDir, "hetero.yaml")
	planFile, dotFile, traceFile, reportFile := filepath.Join(dir, "plan.json"), filepath.Join(dir, "ops.dot"), filepath.Join(dir, "trace.json"), filepath.Join(dir, "report.html")
	texts := map[string]string{}
	code, stdout, stderr := invoke(t, "plan", model, "--cluster", cl, "--out", planFile, "--dot", dotFile, "--dot-detail", "op", "--trace", traceFile, "-o", "table")
	if code != 0 {
		t.Fatalf("plan: exit %d: %s", code, stderr)
	}
	texts["plan table"], texts["plan stderr"] = stdout, stderr
	if code, _, stderr := invoke(t, "report", planFile, "--out", reportFile); code != 0 {
		t.Fatalf("report: exit %d: %s", code, stderr)
	}
	code, stdout, stderr = invoke(t, "inspect", model)
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, stderr)
	}
	texts["inspect"] = stdout
	code, _, stderr = invoke(t, "plan", model, "--cluster", cl, "--pin", "name:x\u202ey\a=gpu0", "--out", filepath.Join(dir, "no.json"))
	if code != 2 || !strings.Contains(stderr, `x\u202ey\a`) {
		t.Errorf("plan with a control character in a rule: exit %d, stderr %q; want 2 and the rule escaped", code, stderr)
	}
	texts["error"] = stderr
	for name, path := range map[string]string{"DOT": dotFile, "report": reportFile, "trace": traceFile} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		texts[name] = string(data)
	}
	// The trace viewer decodes JSON's \u0007 back into a BEL.
	texts["trace, decoded"] = strings.Join(jsonStrings(t, []byte(texts["trace"])), "\n")
	for name, s := range texts {
		if bad := unsafeRunes(s); len(bad) > 0 {
			t.Errorf("%s shows %d raw control or format characters: %q", name, len(bad), bad)
		}
	}
	for _, want := range []string{`emb\abell`, `mm\u202eevil`} {
		for _, name := range []string{"DOT", "report", "trace, decoded", "inspect"} {
			w := want
			if name == "DOT" { // a DOT string doubles the backslash
				w = strings.ReplaceAll(want, `\`, `\\`)
			}
			if !strings.Contains(texts[name], w) {
				t.Errorf("%s does not show %s", name, w)
			}
		}
	}
	// The plan file keeps the names: it is data, read back by report,
	// export and --placement.
	data, err := os.ReadFile(planFile)
	if err != nil {
		t.Fatal(err)
	}
	got := jsonStrings(t, data)
	for _, n := range controlNames {
		if !slices.Contains(got, n) {
			t.Errorf("the plan file lost op name %q", n)
		}
	}
}
