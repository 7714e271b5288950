package tf

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/internal/importopt"
	graphpb "github.com/wamuir/graft/tensorflow/core/framework/graph_go_proto"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

var update = flag.Bool("update", false, "rewrite the .pb/.pbtxt fixtures in testdata/tf from the TF.js models")

// fixtures are the TF.js models also stored as binary and text GraphDefs.
var fixtures = []string{"blazeface", "emotion"}

// exportGraphDef converts a TF.js model to a frozen GraphDef the way a
// user's exporter would, filling in the values of the shape-feeding
// constants the TF.js file lacks with the ones its import settled on:
// Reshape targets are the inferred output shapes, Pad amounts the growth
// of each axis (all after), reduction axes the dropped axes, and guessed
// axes their guesses. Float weights keep only their shapes.
func exportGraphDef(t *testing.T, path string) *graphpb.GraphDef {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	gd, meta, err := decodeJS(data, "")
	if err != nil {
		t.Fatal(err)
	}
	c := newConverter(path, Options{Import: importopt.Options{Batch: 1}}, meta)
	if _, err := c.convert(gd); err != nil {
		t.Fatal(err)
	}
	for i := range c.nodes {
		for k, r := range c.nodes[i].ins {
			src := c.nodes[r.node].def
			v := c.vals[r.node][0]
			if src.GetOp() != "Const" || !isIntType(v.dtype) || v.hasInts() && !isGuessed(c, src.GetName()) {
				continue
			}
			var vals []int64
			in, out := c.vals[c.nodes[i].ins[0].node][c.nodes[i].ins[0].out], c.vals[i][0]
			switch op := c.nodes[i].def.GetOp(); {
			case isGuessed(c, src.GetName()):
				vals = []int64{c.guesses[src.GetName()]}
			case op == "Reshape" && k == 1:
				vals = out.shape
			case (op == "Pad" || op == "MirrorPad") && k == 1:
				for a := range in.shape {
					vals = append(vals, 0, out.shape[a]-in.shape[a])
				}
			case op == "Mean" && k == 1:
				j := 0
				for a, d := range in.shape {
					if j < len(out.shape) && out.shape[j] == d {
						j++
						continue
					}
					vals = append(vals, int64(a))
				}
			default:
				continue
			}
			tp := src.GetAttr()["value"].GetTensor()
			tp.IntVal = nil
			for _, x := range vals {
				tp.IntVal = append(tp.IntVal, int32(x))
			}
		}
	}
	return gd
}

func isGuessed(c *converter, name string) bool { _, ok := c.guesses[name]; return ok }

// TestFixtures checks the binary and text GraphDefs against the TF.js
// models they were exported from: same ops, edges, shapes and work, and
// no recovered or guessed shapes (the GraphDefs carry every value).
func TestFixtures(t *testing.T) {
	for _, name := range fixtures {
		js := filepath.Join("..", "testdata", "tf", name+".json")
		if *update {
			gd := exportGraphDef(t, js)
			bin, err := proto.MarshalOptions{Deterministic: true}.Marshal(gd)
			if err != nil {
				t.Fatal(err)
			}
			txt, err := prototext.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(gd)
			if err != nil {
				t.Fatal(err)
			}
			header := "# " + name + ": exported from " + name + ".json by `go test ./tf -run TestFixtures -update`\n"
			if err := os.WriteFile(strings.TrimSuffix(js, ".json")+".pb", bin, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(strings.TrimSuffix(js, ".json")+".pbtxt", append([]byte(header), txt...), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ref, err := Load(js, Options{Import: importopt.Options{Batch: 1}})
		if err != nil {
			t.Fatal(err)
		}
		for _, ext := range []string{".pb", ".pbtxt"} {
			path := strings.TrimSuffix(js, ".json") + ext
			m, err := Load(path, Options{Import: importopt.Options{Batch: 1}})
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			want := map[string]Kind{".pb": GraphDef, ".pbtxt": TextGraphDef}[ext]
			if m.Kind != want {
				t.Errorf("%s: kind %v, want %v", path, m.Kind, want)
			}
			for _, w := range m.Warnings {
				if strings.Contains(w, "recovered") || strings.Contains(w, "axis constants") || strings.Contains(w, "unknown shapes") ||
					strings.Contains(w, "assumed") {
					t.Errorf("%s: %s", path, w)
				}
			}
			sameGraph(t, path, ref, m)
		}
	}
}

// sameGraph checks two imports of one model agree op by op.
func sameGraph(t *testing.T, label string, a, b *Model) {
	t.Helper()
	ga, gb := a.Graph, b.Graph
	if len(ga.Ops) != len(gb.Ops) || len(ga.Tensors) != len(gb.Tensors) {
		t.Fatalf("%s: %d ops %d tensors, want %d ops %d tensors", label, len(gb.Ops), len(gb.Tensors), len(ga.Ops), len(ga.Tensors))
	}
	if a.Params != b.Params {
		t.Errorf("%s: params %d, want %d", label, b.Params, a.Params)
	}
	for i := range ga.Ops {
		oa, ob := &ga.Ops[i], &gb.Ops[i]
		if oa.Name != ob.Name || oa.Type != ob.Type || oa.Work != ob.Work || len(oa.Inputs) != len(ob.Inputs) {
			t.Fatalf("%s: op %d is %s %s %+v, want %s %s %+v", label, i, ob.Name, ob.Type, ob.Work, oa.Name, oa.Type, oa.Work)
		}
		for k := range oa.Inputs {
			if ga.Tensors[oa.Inputs[k]].Name != gb.Tensors[ob.Inputs[k]].Name {
				t.Fatalf("%s: op %s input %d differs", label, oa.Name, k)
			}
		}
	}
	for i := range ga.Tensors {
		ta, tb := &ga.Tensors[i], &gb.Tensors[i]
		if ta.Name != tb.Name || ta.ShapeKnown != tb.ShapeKnown || !slices.Equal(ta.Shape, tb.Shape) || ta.DType != tb.DType || ta.Kind != tb.Kind {
			t.Fatalf("%s: tensor %s %s %v, want %s %s %v", label, tb.Name, tb.ShapeString(), tb.DType, ta.Name, ta.ShapeString(), ta.DType)
		}
	}
}
