package costed_test

import (
	"os"
	"path/filepath"
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
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := costed.Decode(data, "f.json")
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
