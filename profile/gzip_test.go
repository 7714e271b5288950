package profile

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"
)

// TestGzippedTrace reads a trace as torch.profiler writes it to a .gz
// path, and refuses a truncated one with a message, not a panic.
func TestGzippedTrace(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write([]byte(`{"traceEvents": [{"name": "x", "ph": "X", "ts": 1, "dur": 2}]}`)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	ev, err := decodeEvents(buf.Bytes())
	if err != nil || len(ev) != 1 || ev[0].Name != "x" {
		t.Fatalf("gzipped trace: %v, %+v", err, ev)
	}
	if _, err := decodeEvents(buf.Bytes()[:buf.Len()/2]); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("truncated gzip: %v, want a gzip error", err)
	}
}
