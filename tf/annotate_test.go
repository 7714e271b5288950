package tf_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/internal/tfdevice"
	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/tf"
)

// plan runs the pipeline and returns the placement of every op.
func plan(t *testing.T, model, clusterFile string) (map[string]string, *cluster.Cluster) {
	t.Helper()
	res, err := pipeline.Run(context.Background(), pipeline.Options{ModelPath: model, ClusterPath: clusterFile,
		Import: onnx.Options{Batch: 1}, Mode: pipeline.ModeInfer, Strategy: "m-etf"})
	if err != nil {
		t.Fatal(err)
	}
	placement := map[string]string{}
	for _, op := range res.Plan.Ops {
		placement[op.Name] = op.Device
	}
	return placement, res.Cluster
}

// Import, plan, annotate, re-import with --respect-devices: the same
// graph comes back with every op pinned where the plan put it, in the
// same file form; annotating twice gives the same bytes.
func TestAnnotateRoundTripTF(t *testing.T) {
	clusterFile := filepath.Join("..", "testdata", "clusters", "8xA100-2host.yaml")
	for _, name := range []string{"emotion.json", "emotion.pb", "emotion.pbtxt", "blazeface.pb", "movenet-lightning.json"} {
		src := filepath.Join("..", "testdata", "tf", name)
		placement, c := plan(t, src, clusterFile)
		devs := map[string]int{}
		for _, d := range placement {
			devs[d]++
		}
		dst := filepath.Join(t.TempDir(), "annotated-"+name)
		if err := emitModel(src, dst, placement, c); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		dst2 := dst + ".again"
		if err := emitModel(src, dst2, placement, c); err != nil {
			t.Fatal(err)
		}
		a, _ := os.ReadFile(dst)
		b, _ := os.ReadFile(dst2)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: annotating twice gives different bytes", name)
		}
		orig, err := tf.Load(src, tf.Options{Import: onnx.Options{Batch: 1}})
		if err != nil {
			t.Fatal(err)
		}
		pins, err := tfdevice.NewPinResolver(c, "")
		if err != nil {
			t.Fatal(err)
		}
		back, err := tf.Load(dst, tf.Options{Import: onnx.Options{Batch: 1}, Pins: pins})
		if err != nil {
			t.Fatalf("%s re-import: %v", name, err)
		}
		if back.Kind != orig.Kind {
			t.Errorf("%s: annotated kind %v, want %v", name, back.Kind, orig.Kind)
		}
		if len(back.Graph.Ops) != len(orig.Graph.Ops) || len(back.Graph.Tensors) != len(orig.Graph.Tensors) {
			t.Fatalf("%s: %d ops, %d tensors after the round trip, want %d, %d", name,
				len(back.Graph.Ops), len(back.Graph.Tensors), len(orig.Graph.Ops), len(orig.Graph.Tensors))
		}
		for i, op := range back.Graph.Ops {
			o := orig.Graph.Ops[i]
			if op.Name != o.Name || op.Type != o.Type || op.Work != o.Work {
				t.Fatalf("%s: op %d is %s/%s, want %s/%s", name, i, op.Name, op.Type, o.Name, o.Type)
			}
			if op.Device != placement[op.Name] {
				t.Errorf("%s: op %s pinned to %q, planned on %q", name, op.Name, op.Device, placement[op.Name])
			}
		}
		for i, tn := range back.Graph.Tensors {
			if o := orig.Graph.Tensors[i]; tn.Name != o.Name || tn.ShapeString() != o.ShapeString() {
				t.Fatalf("%s: tensor %s %s, want %s %s", name, tn.Name, tn.ShapeString(), o.Name, o.ShapeString())
			}
		}
		if strings.HasSuffix(name, ".json") {
			var x, y map[string]json.RawMessage
			raw, _ := os.ReadFile(src)
			if json.Unmarshal(raw, &x) != nil || json.Unmarshal(a, &y) != nil {
				t.Fatal("annotated JSON does not parse")
			}
			for k := range x {
				if k == "modelTopology" {
					continue
				}
				var u, v any
				json.Unmarshal(x[k], &u)
				json.Unmarshal(y[k], &v)
				if ju, _ := json.Marshal(u); string(ju) != mustJSON(v) {
					t.Errorf("%s: field %s changed", name, k)
				}
			}
		}
	}
}

// emitModel writes what plan --emit-model writes.
func emitModel(src, dst string, placement map[string]string, c *cluster.Cluster) error {
	data, err := pipeline.AnnotateModel(pipeline.Annotation{Placement: placement, Cluster: c, From: src, To: dst})
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// ONNX models get one metadata_props entry per node; the ONNX checker
// (python3-onnx, when installed) accepts the file and onnx.load keeps
// the entries.
func TestAnnotateRoundTripONNX(t *testing.T) {
	src := filepath.Join("..", "testdata", "models", "mobilenet_v2.onnx")
	placement, c := plan(t, src, filepath.Join("..", "testdata", "clusters", "hetero.yaml"))
	// Beside the model, where its (absent) external data file stays
	// reachable under the name the model gives it.
	dir := t.TempDir()
	if data, err := os.ReadFile(src); err != nil || os.WriteFile(filepath.Join(dir, "mobilenet_v2.onnx"), data, 0o644) != nil {
		t.Fatal(err)
	}
	src = filepath.Join(dir, "mobilenet_v2.onnx")
	dst := filepath.Join(dir, "mobilenet_v2.placed.onnx")
	if err := emitModel(src, dst, placement, c); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	devices, clusterName, err := onnx.Devices(data)
	if err != nil {
		t.Fatal(err)
	}
	if clusterName != c.Name || len(devices) != len(placement) {
		t.Fatalf("read back cluster %q and %d devices, want %q and %d", clusterName, len(devices), c.Name, len(placement))
	}
	for op, d := range placement {
		if devices[op] != d {
			t.Errorf("op %s: annotated %q, planned %q", op, devices[op], d)
		}
	}
	m, err := onnx.Decode(data, dst, onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Graph.Ops) != len(placement) {
		t.Errorf("re-import has %d ops, want %d", len(m.Graph.Ops), len(placement))
	}
	again, _ := onnx.Annotate(data, placement, onnx.AnnotateOptions{Cluster: c.Name})
	if !bytes.Equal(again, data) {
		t.Errorf("annotating an annotated model again changes it")
	}
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import onnx").Run(); err != nil {
		t.Skip("python3-onnx not installed; skipping onnx.checker")
	}
	out, err := exec.Command(py, "-c", `import sys, onnx
m = onnx.load(sys.argv[1], load_external_data=False)
# The test model's weights live in a deliberately absent external file,
# which the checker insists on; give them inline zeros instead.
for t in m.graph.initializer:
    if t.data_location == onnx.TensorProto.EXTERNAL:
        n = 1
        for d in t.dims:
            n *= d
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT
        t.raw_data = bytes(n * onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[t.data_type].itemsize)
onnx.checker.check_model(m)
p = {e.key: e.value for e in m.metadata_props}
print(sum(k.startswith("opplace.device:") for k in p), p["opplace.cluster"])`, dst).CombinedOutput()
	if err != nil {
		t.Fatalf("onnx checker: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != itoa(len(placement))+" "+c.Name {
		t.Errorf("python read back %q, want %d entries and cluster %s", got, len(placement), c.Name)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
