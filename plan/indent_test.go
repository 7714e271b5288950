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
