package costed_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/costed"
	"github.com/opplace/opplace/graph"
)

const exampleDir = "../testdata/costed"

func load(t *testing.T, name string) *costed.Model {
	t.Helper()
	m, err := costed.Load(exampleDir + "/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func parseCluster(t *testing.T, yaml string) *cluster.Cluster {
	t.Helper()
	c, err := cluster.Parse([]byte(yaml), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tensorNames lists the names of ids.
func tensorNames(g *graph.Graph, ids []graph.TensorID) []string {
	var names []string
	for _, id := range ids {
		names = append(names, g.Tensors[id].Name)
	}
	return names
}

func TestBuildTiny(t *testing.T) {
	m := load(t, "tiny.json")
	g := m.Graph
	if m.Format != "costed" || g.Name != "tiny" {
		t.Errorf("format %q, name %q; want costed, tiny", m.Format, g.Name)
	}
	// Every tensor with its exact size and kind.
	want := map[string]struct {
		bytes int64
		kind  graph.TensorKind
	}{
		"a": {1000, graph.Activation}, "a/params": {18253611008, graph.Parameter},
		"b": {2000, graph.Activation}, "c": {3000, graph.Activation}, "d": {10, graph.Activation},
		"c->d": {64, graph.Activation}, // the edge's own bytes differ from c's output
	}
	if len(g.Tensors) != len(want) {
		t.Errorf("%d tensors %v, want %d", len(g.Tensors), tensorNames(g, allTensors(g)), len(want))
	}
	for i := range g.Tensors {
		tn := &g.Tensors[i]
		w, ok := want[tn.Name]
		if !ok || tn.Bytes() != w.bytes || tn.Kind != w.kind {
			t.Errorf("tensor %q: %d bytes, %s; want %+v", tn.Name, tn.Bytes(), tn.Kind, w)
		}
	}
	for _, tc := range []struct {
		op          string
		inputs, out []string
		temp        int64
	}{
		{"a", []string{"a/params"}, []string{"a"}, 0},
		{"b", []string{"a"}, []string{"b"}, 500},
		{"c", []string{"a"}, []string{"c", "c->d"}, 0},
		{"d", []string{"b", "c->d"}, []string{"d"}, 0},
	} {
		id, _ := g.OpByName(tc.op)
		op := g.Op(id)
		if in := tensorNames(g, op.Inputs); !slices.Equal(in, tc.inputs) {
			t.Errorf("op %s reads %v, want %v", tc.op, in, tc.inputs)
		}
		if out := tensorNames(g, op.Outputs); !slices.Equal(out, tc.out) {
			t.Errorf("op %s writes %v, want %v", tc.op, out, tc.out)
		}
		if op.Work.TempBytes != tc.temp || op.Type == "" || op.Phase != graph.Forward {
			t.Errorf("op %s: temp %d type %q phase %s; want temp %d", tc.op, op.Work.TempBytes, op.Type, op.Phase, tc.temp)
		}
	}
	if out := tensorNames(g, g.Outputs); !slices.Equal(out, []string{"d"}) {
		t.Errorf("graph outputs %v, want [d]", out)
	}
}

func allTensors(g *graph.Graph) []graph.TensorID {
	ids := make([]graph.TensorID, len(g.Tensors))
	for i := range ids {
		ids[i] = graph.TensorID(i)
	}
	return ids
}

func TestBuildPhasesAndColocation(t *testing.T) {
	g := load(t, "mlp_train.json").Graph
	if len(g.Ops) != 10 {
		t.Fatalf("%d ops, want 10", len(g.Ops))
	}
	count := map[graph.Phase]int{}
	for i := range g.Ops {
		count[g.Ops[i].Phase]++
	}
	if count[graph.Forward] != 5 || count[graph.Backward] != 4 || count[graph.Update] != 1 {
		t.Errorf("phases %v, want 5 forward, 4 backward, 1 update", count)
	}
	groups := graph.ColocationGroups(g).Groups()
	var together [][]string
	for _, grp := range groups {
		if len(grp) > 1 {
			var names []string
			for _, op := range grp {
				names = append(names, g.Ops[op].Name)
			}
			together = append(together, names)
		}
	}
	want := [][]string{{"fc1", "fc1_grad"}, {"fc2", "fc2_grad"}, {"head", "head_grad"}}
	if !slices.EqualFunc(together, want, slices.Equal) {
		t.Errorf("colocation groups %v, want %v", together, want)
	}
}

const twoTypes = `
device_types:
  - {name: MyGPU, peak_flops: {float32: 10T}, memory_bandwidth: 1TB/s, memory: 16GiB}
devices:
  - {name: g0, type: v100-16gb}
  - {name: g1, type: MyGPU}
  - {name: c0, type: CPU}
`

func TestOpTime(t *testing.T) {
	m, err := costed.Decode([]byte(doc(
		`{"name": "a", "times_ms": {"V100-16GB": 1.5, "cpu": 20, "TPUv4": 0.1}}, {"name": "b", "times_ms": {"MYGPU": 2, "V100-16GB": null}}`, "")), "g.json")
	if err != nil {
		t.Fatal(err)
	}
	c := parseCluster(t, twoTypes)
	inf := math.Inf(1)
	for _, tc := range []struct {
		op   graph.OpID
		dev  int
		want float64
	}{
		{0, 0, 0.0015}, // preset spelled in another case in the cluster
		{0, 1, inf},    // no time for MyGPU: cannot run there
		{0, 2, 0.020},  // "cpu" matches the CPU preset
		{1, 0, inf},    // null is no time
		{1, 1, 0.002},  // custom type, case-insensitive
		{1, 2, inf},
	} {
		if got := m.Costs.OpTime(m.Graph, tc.op, c.Devices[tc.dev].Type); got != tc.want {
			t.Errorf("op %d on %s: %v s, want %v", tc.op, c.Devices[tc.dev].Name, got, tc.want)
		}
	}
	if err := m.Costs.CheckCluster(m.Graph, c); err != nil {
		t.Errorf("CheckCluster: %v", err)
	}
}

func TestCheckCluster(t *testing.T) {
	m, err := costed.Decode([]byte(doc(opA+`, {"name": "b", "times_ms": {"TPUv4": 1, "h100-80gb": 2}}`, "")), "g.json")
	if err != nil {
		t.Fatal(err)
	}
	err = m.Costs.CheckCluster(m.Graph, parseCluster(t, twoTypes))
	want := `g.json: op "b" has no time for any device type of cluster "c" (V100-16GB, MyGPU, CPU); it has times for TPUv4, h100-80gb: add a time for one of the cluster's types`
	if err == nil || err.Error() != want {
		t.Errorf("CheckCluster:\n got: %v\nwant: %s", err, want)
	}
}

func TestTransferTime(t *testing.T) {
	m := load(t, "mlp_train.json")
	g := m.Graph
	c := parseCluster(t, twoTypes)
	d0, d1 := &c.Devices[0], &c.Devices[1]
	override, _ := g.TensorByName("fc1_grad->sgd")
	if got := m.Costs.TransferTime(g, override, d0, d1, 0.123); got != 0.0055 {
		t.Errorf("fc1_grad->sgd between devices: %v s, want the file's 5.5 ms", got)
	}
	if got := m.Costs.TransferTime(g, override, d0, d0, 0); got != 0 {
		t.Errorf("fc1_grad->sgd within a device: %v s, want 0", got)
	}
	own, _ := g.TensorByName("fc2_grad->sgd")
	if got := m.Costs.TransferTime(g, own, d0, d1, 0.123); got != 0.123 {
		t.Errorf("fc2_grad->sgd (bytes but no transfer_ms): %v s, want the link model's 0.123", got)
	}
	if tn := &g.Tensors[own]; tn.Bytes() != 67108864 {
		t.Errorf("fc2_grad->sgd has %d bytes, want 67108864", tn.Bytes())
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	b := int64(64)
	ms := 0.25
	f := &costed.File{Format: costed.FormatV1, Name: "rt", Ops: []costed.Op{
		{Name: "x<y>", Type: "MatMul", TimesMS: costed.Times{{Type: "T4", MS: 1}, {Type: "CPU", MS: 3.5}}, ParamBytes: 10, OutputBytes: 20, TempBytes: 30, Colocate: "g", Phase: "backward"},
		{Name: "z", TimesMS: costed.Times{{Type: "T4", MS: 0}}, Device: "gpu1"},
	}, Edges: []costed.Edge{{From: "x<y>", To: "z", Bytes: &b, TransferMS: &ms}, {From: "x<y>", To: "z", Tensor: "c"}}}
	var sb strings.Builder
	if err := f.Encode(&sb); err != nil {
		t.Fatal(err)
	}
	want := `{
  "format": "opplace-costed-graph/v1",
  "name": "rt",
  "ops": [
    {"name":"x<y>","type":"MatMul","phase":"backward","colocate":"g","times_ms":{"CPU":3.5,"T4":1},"param_bytes":10,"output_bytes":20,"temp_bytes":30},
    {"name":"z","device":"gpu1","times_ms":{"T4":0}}
  ],
  "edges": [
    {"from":"x<y>","to":"z","bytes":64,"transfer_ms":0.25},
    {"from":"x<y>","to":"z","tensor":"c"}
  ]
}
`
	if sb.String() != want {
		t.Errorf("Encode:\n%s\nwant:\n%s", sb.String(), want)
	}
	back, err := costed.Parse([]byte(sb.String()), "rt.json")
	if err != nil {
		t.Fatal(err)
	}
	var again strings.Builder
	back.Encode(&again)
	if again.String() != want {
		t.Errorf("Parse(Encode(f)) encodes differently:\n%s", again.String())
	}
}
