package tf

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	graphpb "github.com/wamuir/graft/tensorflow/core/framework/graph_go_proto"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
)

// reshapeJS is a TF.js graph model whose Reshape takes its target shape
// from the int32 weight "shape", stored in the manifest's paths.
func reshapeJS(t *testing.T, paths ...string) []byte {
	t.Helper()
	gd := &graphpb.GraphDef{}
	const text = `
node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "shape" value { shape { dim { size: 2 } dim { size: 6 } } } } }
node { name: "shape" op: "Const" attr { key: "dtype" value { type: DT_INT32 } }
  attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { dim { size: 2 } } } } } }
node { name: "y" op: "Reshape" input: "x" input: "shape" attr { key: "T" value { type: DT_FLOAT } } }`
	if err := prototext.Unmarshal([]byte(text), gd); err != nil {
		t.Fatal(err)
	}
	topo, err := protojson.Marshal(gd)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := json.Marshal(map[string]any{
		"format":        "graph-model",
		"modelTopology": json.RawMessage(topo),
		"weightsManifest": []any{map[string]any{"paths": paths,
			"weights": []any{map[string]any{"name": "shape", "shape": []int64{2}, "dtype": "int32"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// shape34 is the weight file of reshapeJS's target shape [3, 4].
func shape34() []byte {
	return binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 3), 4)
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// reshaped is the shape of reshapeJS's output and the import's warnings.
func reshaped(t *testing.T, path string) ([]int64, []string, error) {
	t.Helper()
	m, err := Load(path, Options{})
	if err != nil {
		return nil, nil, err
	}
	id, ok := m.Graph.TensorByName("y")
	if !ok {
		t.Fatal("no tensor y")
	}
	return m.Graph.Tensor(id).Shape, m.Warnings, nil
}

func TestJSWeightFiles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		bin     []byte // nil: no weight file
		path    string
		shape   []int64 // nil: the import fails with err
		warning string
		err     string
	}{
		{name: "exact", bin: shape34(), path: "w.bin", shape: []int64{3, 4}},
		{name: "missing", path: "w.bin", warning: "weight file w.bin not found next to the model"},
		{name: "longer", bin: append(shape34(), 0, 0, 0, 0), path: "w.bin", shape: []int64{3, 4},
			warning: "weight file w.bin holds 12 bytes, 4 more than the manifest declares"},
		{name: "shorter", bin: shape34()[:4], path: "w.bin",
			err: `model.json: weightsManifest[0]: weight file w.bin holds 4 bytes, but the manifest declares 8 bytes for its weights: the file is truncated`},
		{name: "outside", path: "../../../../dev/zero",
			err: `model.json: weightsManifest[0].paths[0] "../../../../dev/zero" leads out of the model's directory`},
		{name: "absolute", path: "/dev/zero", err: `weightsManifest[0].paths[0] "/dev/zero" is an absolute path`},
		{name: "in a subdirectory", bin: shape34(), path: "sub/../w.bin", shape: []int64{3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			model := filepath.Join(dir, "model.json")
			write(t, model, reshapeJS(t, tc.path))
			if tc.bin != nil {
				write(t, filepath.Join(dir, "w.bin"), tc.bin)
				os.Mkdir(filepath.Join(dir, "sub"), 0o755)
			}
			shape, warnings, err := reshaped(t, model)
			if tc.err != "" {
				var ie *InputError
				if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an *InputError with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.shape != nil && !slices.Equal(shape, tc.shape) {
				t.Errorf("y has shape %v, want %v (warnings %q)", shape, tc.shape, warnings)
			}
			found := tc.warning == ""
			for _, w := range warnings {
				found = found || strings.Contains(w, tc.warning)
				if tc.warning == "" && strings.Contains(w, "weight file") {
					t.Errorf("unexpected warning %q", w)
				}
			}
			if !found {
				t.Errorf("no warning with %q in %q", tc.warning, warnings)
			}
		})
	}
}

// TestJSWeightsNotADevice refuses a weight path inside the model's
// directory that names a device, not a file: nothing is read from it.
func TestJSWeightsNotADevice(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	dir := t.TempDir()
	model := filepath.Join(dir, "model.json")
	write(t, model, reshapeJS(t, "zero.bin"))
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "zero.bin")); err != nil {
		t.Skip(err)
	}
	_, _, err := reshaped(t, model)
	if err == nil || !strings.Contains(err.Error(), `weightsManifest[0].paths[0] "zero.bin" is not a regular file`) {
		t.Errorf("got %v, want a refusal of zero.bin", err)
	}
}

// TestJSThroughLink reads the weight files beside the file a symbolic
// link to model.json names, not beside the link.
func TestJSThroughLink(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	model := filepath.Join(dir, "model.json")
	write(t, model, reshapeJS(t, "w.bin"))
	write(t, filepath.Join(dir, "w.bin"), shape34())
	link := filepath.Join(other, "link.json")
	if err := os.Symlink(model, link); err != nil {
		t.Skip(err)
	}
	shape, warnings, err := reshaped(t, link)
	if err != nil || !slices.Equal(shape, []int64{3, 4}) || len(warnings) != 0 {
		t.Errorf("through a link: shape %v, warnings %q, %v; want [3 4] and no warning", shape, warnings, err)
	}
}

// TestJSDecodeWarnsUnread: a model decoded from bytes names the weight
// files it did not read.
func TestJSDecodeWarnsUnread(t *testing.T) {
	m, err := Decode(reshapeJS(t, "w.bin"), "/dev/stdin", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(m.Warnings, func(w string) bool { return strings.Contains(w, "weight file w.bin not read") }) {
		t.Errorf("warnings %q name no unread weight file", m.Warnings)
	}
}
