package costed

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"testing/iotest"
)

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const testOpA = `{"name": "a", "times_ms": {"V100-16GB": 1}}`

func testDoc(ops, edges string) string {
	s := `{"format": "opplace-costed-graph/v1", "ops": [` + ops + `]`
	if edges != "" {
		s += `, "edges": [` + edges + `]`
	}
	return s + "}"
}

// TestOneByteReads reads every example through a reader that returns one
// byte at a time, so every token straddles the scanner's window: the
// graph must be the one read at once, and an error must be the same.
func TestOneByteReads(t *testing.T) {
	inputs := []string{
		testDoc(testOpA+`, {"name": "b\u00e9", "type": "MatMul", "times_ms": {"V100-16GB": 1.5e-3, "T4": null}, "param_bytes": 1e3}`,
			`{"from": "a", "to": "b\u00e9", "bytes": 12, "transfer_ms": 0.25}`),
		"{\"format\": \"opplace-costed-graph/v1\",\n \"ops\": [}]}",
		testDoc(testOpA, `{"from": "a", "to": "a"}`),
	}
	for _, name := range []string{"tiny.json", "mlp_train.json", "bert24_layers_training.json"} {
		b, err := Parse(mustRead(t, "../testdata/costed/"+name), name)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		b.Encode(&buf)
		inputs = append(inputs, buf.String())
	}
	for _, in := range inputs {
		whole, err1 := Decode([]byte(in), "g.json")
		bytewise, err2 := decodeV1(iotest.OneByteReader(strings.NewReader(in)), "g.json")
		if (err1 == nil) != (err2 == nil) || err1 != nil && err1.Error() != err2.Error() {
			t.Errorf("%.60q: errors differ: %v / %v", in, err1, err2)
			continue
		}
		if err1 != nil {
			continue
		}
		if len(whole.Graph.Ops) != len(bytewise.Graph.Ops) || len(whole.Graph.Tensors) != len(bytewise.Graph.Tensors) {
			t.Errorf("%.60q: graphs differ", in)
		}
		for i := range whole.Graph.Ops {
			if whole.Graph.Ops[i].Name != bytewise.Graph.Ops[i].Name {
				t.Errorf("%.60q: op %d is %q, read byte by byte %q", in, i, whole.Graph.Ops[i].Name, bytewise.Graph.Ops[i].Name)
			}
		}
	}
}
