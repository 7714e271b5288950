package plan

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestIndentAsEncodingJSON: indent lays out the encoder's compact JSON
// byte for byte as json.Indent does, punctuation and escapes inside
// strings, empty objects and arrays, and nesting included.
func TestIndentAsEncodingJSON(t *testing.T) {
	values := []any{
		map[string]any{},
		[]any{},
		map[string]any{"a": []any{}, "b": map[string]any{}, "c": []any{1, 2.5, "x"}},
		[]any{map[string]any{"k": "v, with {braces} [and] : colons"}, []any{[]any{}, []any{1}}},
		map[string]any{"quote": `say "hi" \ back\slash`, "ctrl": "tab\tnew\nline", "html": "<a href='x'>&</a>", "uni": "ünï\u2028"},
		map[string]any{"n": nil, "t": true, "f": false, "e": 1e-9, "big": 1e21, "neg": -0.5},
		sample(),
	}
	for _, prefix := range []string{"", "    "} {
		for _, v := range values {
			var compact bytes.Buffer
			enc := json.NewEncoder(&compact)
			if err := enc.Encode(v); err != nil {
				t.Fatal(err)
			}
			src := bytes.TrimSuffix(compact.Bytes(), []byte("\n"))
			var want bytes.Buffer
			if err := json.Indent(&want, src, prefix, "  "); err != nil {
				t.Fatal(err)
			}
			if got := indent(nil, src, prefix, "  "); !bytes.Equal(got, want.Bytes()) {
				t.Errorf("prefix %q: indent(%s)\ngot  %s\nwant %s", prefix, src, got, want.Bytes())
			}
		}
	}
}

func sample() *Plan {
	return &Plan{Model: "m.onnx", Cluster: "c", Strategy: "auto:m-etf", Devices: []Device{{Name: "gpu0", Memory: []MemorySample{{MS: 1, Bytes: 2}}}},
		Ops: []Op{{Name: "a/b\"c", Runs: []Run{{MicroBatch: 0, StartMS: 0, EndMS: 0.5}, {MicroBatch: 1, StartMS: 0.5, EndMS: 1}}}}}
}

// TestOpRunsAsEncodingJSON: an op's runs, rendered directly, come out as
// the encoder renders them, with the fields after them, names that need
// escaping, and floats in both of encoding/json's forms.
func TestOpRunsAsEncodingJSON(t *testing.T) {
	stage := 2
	floats := []float64{0, 1, -0.5, 0.096739, 1e-7, 3.5e-9, 1e21, 123456789.125, 1e20, 5e-324}
	var runs []Run
	for i, f := range floats {
		runs = append(runs, Run{MicroBatch: i, StartMS: f, EndMS: -f})
	}
	p := &Plan{Model: "m", Ops: []Op{
		{Name: "a", Runs: runs[:1]},
		{Name: `x/"<b>"&\n`, Type: "MatMul", Phase: "backward", Device: "g0", StartMS: 1e-7, EndMS: 2e21, Runs: runs, Stage: &stage, Shard: "column", Covers: []string{"q", "k"}},
		{Name: "plain", EndMS: 3},
		{Name: "c", Runs: runs[2:4], Covers: []string{"z"}},
	}}
	var got, want bytes.Buffer
	if err := writeJSON(&got, p); err != nil {
		t.Fatal(err)
	}
	enc := json.NewEncoder(&want)
	enc.SetIndent("", "  ")
	if err := enc.Encode(p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Errorf("got\n%s\nwant\n%s", got.Bytes(), want.Bytes())
	}
}
