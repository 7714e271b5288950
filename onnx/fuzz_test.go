package onnx

import (
	"errors"
	"os"
	"testing"
	"time"
)

// FuzzDecode checks that no input makes Decode panic and that every
// failure is an *InputError. Run it with
//
//	go test ./onnx -run '^$' -fuzz FuzzDecode -fuzztime 1m
func FuzzDecode(f *testing.F) {
	for _, tc := range shapeCases() {
		f.Add(tc.model.bytes(f))
	}
	for _, name := range []string{"vgg16", "resnet50"} {
		if data, err := os.ReadFile(modelPath(name)); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st := time.Now()
		m, err := Decode(data, "fuzz.onnx", Options{Dims: map[string]int64{"batch": 2}, Batch: 2})
		if time.Since(st) > 5*time.Second {
			t.Fatalf("SLOW %v", time.Since(st))
		}
		checkImport(t, m, err)
	})
}

// checkImport fails t unless err is an *InputError, or the model has
// valid shapes and non-negative work.
func checkImport(t *testing.T, m *Model, err error) {
	t.Helper()
	if err != nil {
		var ie *InputError
		if !errors.As(err, &ie) {
			t.Fatalf("error is not an *InputError: %v", err)
		}
		return
	}
	g := m.Graph
	for i := range g.Tensors {
		tt := &g.Tensors[i]
		if tt.ShapeKnown && checkShape(tt.Shape) != nil {
			t.Fatalf("tensor %q has shape %v", tt.Name, tt.Shape)
		}
	}
	for i := range g.Ops {
		if w := g.Ops[i].Work; w.FLOPs < 0 || w.MACs < 0 {
			t.Fatalf("op %q has negative work %+v", g.Ops[i].Name, w)
		}
	}
}
