package costed_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/costed"
)

// FuzzDecode checks that no input panics and that whatever decodes is a
// graph every op of which has a time somewhere.
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(exampleDir, "*.json"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"maxSizePerFPGA": 1, "nodes": [{"id": 1, "cpuLatency": 1, "fpgaLatency": 1, "size": 0}, {"id": 2, "cpuLatency": 1, "supportedOnFpga": 0, "size": 3}], "edges": [{"sourceId": 1, "destId": 2, "size": 1}]}`))
	f.Add([]byte(doc(opA+`, `+opB, `{"from": "a", "to": "b", "bytes": 3, "transfer_ms": 1}`)))
	f.Add([]byte(doc(opA+`, {"name": "b", "device": "gpu1", "times_ms": {"T4": 2}}`, `{"from": "a", "to": "b", "tensor": "h"}, {"from": "a", "to": "b", "tensor": "c", "bytes": 3}`)))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := costed.Decode(data, "f.json")
		// The v1 scanner is opplace's own: it must agree with
		// encoding/json on what is JSON.
		var ce *costed.Error
		if valid := json.Valid(data); !valid && err == nil {
			t.Fatalf("decoded invalid JSON %q", data)
		} else if valid && errors.As(err, &ce) && strings.HasPrefix(ce.Msg, "invalid JSON") {
			t.Fatalf("refused valid JSON %q: %v", data, err)
		}
		if err != nil {
			return
		}
		if len(m.Graph.Ops) == 0 {
			t.Fatal("decoded a graph without ops")
		}
		if _, err := m.Graph.TopoOrder(m.Graph.BuildAdjacency()); err != nil {
			t.Fatalf("decoded a cyclic graph: %v", err)
		}
	})
}
