package onnx

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/opplace/opplace/internal/progress"
)

// TestLoadProgress checks that loading a big model reports the bytes
// read and the decoding to the default reporter, and imports the same
// model as without one.
func TestLoadProgress(t *testing.T) {
	path := filepath.Join("..", "testdata", "models", "resnet50.onnx")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Load(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func(old int64) { bigModel = old }(bigModel)
	tests := []struct {
		name   string
		big    int64
		stages []string
	}{
		{"small file", st.Size() + 1, nil},
		{"big file", st.Size(), []string{"onnx: reading resnet50.onnx", "onnx: decoding resnet50.onnx"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bigModel = tt.big
			rec := &progress.Recorder{}
			restore := progress.SetDefault(rec)
			got, err := Load(path, Options{})
			restore()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Error("the model differs when loaded with progress")
			}
			if stages := rec.Stages(); !reflect.DeepEqual(stages, tt.stages) {
				t.Fatalf("stages %q, want %q", stages, tt.stages)
			}
			if tt.stages == nil {
				return
			}
			var read int64
			done := 0
			for _, e := range rec.Events() {
				switch {
				case e.Op == "start" && e.Stage == tt.stages[0] && (e.N != st.Size() || e.Unit != progress.Bytes):
					t.Errorf("start %+v, want %d bytes", e, st.Size())
				case e.Op == "add":
					read += e.N
				case e.Op == "done":
					done++
				}
			}
			if read != st.Size() || done != 2 {
				t.Errorf("%d bytes read, %d tasks done; want %d and 2", read, done, st.Size())
			}
		})
	}
}
