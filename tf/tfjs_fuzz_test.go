package tf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/opplace/opplace/internal/importopt"
	graphpb "github.com/wamuir/graft/tensorflow/core/framework/graph_go_proto"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
)

// FuzzDecodeJS drives the TF.js reader with well-formed model.json
// documents, which byte mutations of FuzzDecode's seeds seldom produce:
// the graph is a text GraphDef (a bundled model's when the bytes do not
// parse), the weights manifest gives one weight a fuzzed name, dtype and
// shape, and the signature a fuzzed input and output shape. Import must
// not panic and must fail only with an *InputError.
func FuzzDecodeJS(f *testing.F) {
	seed, err := os.ReadFile(filepath.Join("..", "testdata", "tf", "emotion.pbtxt"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed, "unknown_26", "float32", int64(3), int64(3), int64(-1), int64(48))
	f.Add([]byte(whileLoop(5)), "w", "int32", int64(8), int64(8), int64(4), int64(8))
	f.Add([]byte(mapFn()), "w", "float32", int64(3), int64(5), int64(-1), int64(6))
	f.Add([]byte(tfCond("")), "w", "float32", int64(8), int64(8), int64(4), int64(8))
	jsFallback = &graphpb.GraphDef{}
	if err := (prototext.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(seed, jsFallback); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, graph []byte, weight, dtype string, d0, d1, in0, out0 int64) {
		runJS(t, graph, weight, dtype, d0, d1, in0, out0)
	})
}

var jsFallback *graphpb.GraphDef

// runJS is one FuzzDecodeJS execution.
func runJS(t *testing.T, graph []byte, weight, dtype string, d0, d1, in0, out0 int64) {
	fallback := jsFallback
	gd := &graphpb.GraphDef{}
	if (prototext.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(graph, gd) != nil || len(gd.GetNode()) == 0 {
		gd = fallback
	}
	topo, err := protojson.Marshal(gd)
	if err != nil {
		return
	}
	dim := func(d int64) map[string]any { return map[string]any{"size": d} }
	first, last := gd.GetNode()[0].GetName(), gd.GetNode()[len(gd.GetNode())-1].GetName()
	doc, err := json.Marshal(map[string]any{
		"format":        "graph-model",
		"modelTopology": json.RawMessage(topo),
		"weightsManifest": []any{map[string]any{"paths": []string{"absent.bin"},
			"weights": []any{map[string]any{"name": weight, "shape": []int64{d0, d1}, "dtype": dtype}}}},
		"signature": map[string]any{
			"inputs":  map[string]any{first + ":0": map[string]any{"name": first + ":0", "tensorShape": map[string]any{"dim": []any{dim(in0), dim(d1)}}}},
			"outputs": map[string]any{last + ":0": map[string]any{"name": last + ":0", "tensorShape": map[string]any{"dim": []any{dim(out0)}}}},
		},
	})
	if err != nil {
		return
	}
	_, err = Decode(doc, "model.json", Options{Import: importopt.Options{Batch: 1}})
	if err != nil {
		if _, ok := err.(*InputError); !ok {
			t.Fatalf("error %T is not an *InputError: %v", err, err)
		}
	}
}
