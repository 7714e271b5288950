package tf_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/internal/importopt"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/tf"
)

// Bad input is an error naming the file and the problem, wrapped so the
// CLI exits 2; it never panics.
func TestBadInput(t *testing.T) {
	pb, err := os.ReadFile(filepath.Join("..", "testdata", "tf", "emotion.pb"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content, want string
	}{
		{"truncated.pb", string(pb[:len(pb)/2]), "not a TensorFlow GraphDef (protobuf decoding failed"},
		{"layers.json", `{"format": "layers-model", "modelTopology": {"class_name": "Sequential"}}`, "is a TensorFlow.js layers model, not a graph model"},
		{"other.json", `{"hello": "world"}`, "is JSON but not a TensorFlow.js graph model: it has no modelTopology"},
		{"badtopo.json", `{"format": "graph-model", "modelTopology": {"node": 3}}`, "modelTopology is not a GraphDef in protobuf JSON"},
		{"empty.json", `{"format": "graph-model", "modelTopology": {"node": []}}`, "the graph has no nodes"},
		{"missing.pbtxt", "node { name: \"a\" op: \"Relu\" input: \"nowhere\" }\n", `node "a" (Relu): input "nowhere" names no node of the graph`},
		{"cycle.pbtxt", "node { name: \"a\" op: \"Relu\" input: \"b\" }\nnode { name: \"b\" op: \"Relu\" input: \"a\" }\n", `the graph has a cycle through node "a" (Relu)`},
		{"dup.pbtxt", "node { name: \"a\" op: \"NoOp\" }\nnode { name: \"a\" op: \"NoOp\" }\n", `node "a" is defined twice`},
		{"badtext.pbtxt", "node { name: \"a\" op: \"Relu\" input: }\n", "not a text GraphDef"},
		{"shape.pbtxt", "node { name: \"x\" op: \"Placeholder\" attr { key: \"dtype\" value { type: DT_FLOAT } } attr { key: \"shape\" value { shape { dim { size: 2 } dim { size: 3 } } } } }\n" +
			"node { name: \"w\" op: \"Const\" attr { key: \"dtype\" value { type: DT_FLOAT } } attr { key: \"value\" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 4 } dim { size: 5 } } } } } }\n" +
			"node { name: \"m\" op: \"MatMul\" input: \"x\" input: \"w\" }\n", `node "m" (MatMul): inner dimensions of [2,3] and [4,5] differ`},
		{"badref.pbtxt", "node { name: \"x\" op: \"Placeholder\" attr { key: \"dtype\" value { type: DT_FLOAT } } attr { key: \"shape\" value { shape { dim { size: 2 } } } } }\n" +
			"node { name: \"a\" op: \"Relu\" input: \"x:3\" }\n", `reads output 3 of "x" (Placeholder), which has 1`},
	} {
		path := filepath.Join(dir, tc.name)
		if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := pipeline.LoadModel(path, importopt.Options{Batch: 1})
		var ie *pipeline.InputError
		if err == nil || !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %v, want an InputError naming the file and containing %q", tc.name, err, tc.want)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error spans lines: %q", tc.name, err)
		}
	}
}

func TestSniff(t *testing.T) {
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b[:min(len(b), 512)]
	}
	for path, want := range map[string]tf.Kind{
		"../testdata/tf/emotion.json":          tf.JSGraphModel,
		"../testdata/tf/emotion.pb":            tf.GraphDef,
		"../testdata/tf/emotion.pbtxt":         tf.TextGraphDef,
		"../testdata/models/mobilenet_v2.onnx": tf.Unknown,
		"../testdata/models/bert_base.onnx":    tf.Unknown,
		"../testdata/clusters/4xV100.yaml":     tf.Unknown,
	} {
		if got := tf.Sniff(read(path)); got != want {
			t.Errorf("%s: %v, want %v", path, got, want)
		}
	}
	for _, m := range []string{"resnet50", "gpt2_small", "inception_v3"} {
		mm, err := pipeline.LoadModel(filepath.Join("..", "testdata", "models", m+".onnx"), importopt.Options{Dims: map[string]int64{"batch": 2}})
		if err != nil || mm.Format != "onnx" {
			t.Errorf("%s: format %v, %v; want onnx", m, mm, err)
		}
	}
}

// FuzzDecode: arbitrary bytes never panic the importer.
func FuzzDecode(f *testing.F) {
	for _, p := range []string{"emotion.pb", "emotion.pbtxt", "emotion.json"} {
		b, err := os.ReadFile(filepath.Join("..", "testdata", "tf", p))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tf.Decode(data, "fuzz", tf.Options{Import: importopt.Options{Batch: 1}})
	})
}
