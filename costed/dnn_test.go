package costed_test

import (
	"bytes"
	"context"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/costed"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/pipeline"
)

// peersDir holds the published dnn-partitioning inputs (outside the
// repository; tests that need them skip without).
const peersDir = "../../shared/peers/dnn-partitioning"

var update = flag.Bool("update", false, "rewrite testdata/costed/bert24_layers_training.json from the peers' file")

func peerFiles(t *testing.T) []string {
	files, _ := filepath.Glob(filepath.Join(peersDir, "*.json"))
	if len(files) == 0 {
		t.Skipf("no dnn-partitioning inputs in %s", peersDir)
	}
	return files
}

// TestDNNMapping checks the mapping on a hand-written file: CPU latency to
// types named like CPU, FPGA latency to the rest unless the node is not
// supported there, milliseconds, sizes as parameters, colour classes as
// colocation groups, backward nodes, and the largest outgoing edge as the
// output.
func TestDNNMapping(t *testing.T) {
	in := `{"maxSizePerFPGA": 1e9, "maxFPGAs": 2, "maxCPUs": 1,
	"nodes": [
	  {"id": 7, "name": "fwd", "cpuLatency": 10, "fpgaLatency": 1, "supportedOnFpga": 1, "isBackwardNode": 0, "colorClass": 3, "size": 100.4, "layerId": 1},
	  {"id": 2, "name": "cpuonly", "cpuLatency": 4, "fpgaLatency": 0.5, "supportedOnFpga": 0, "isBackwardNode": 0, "size": 0},
	  {"id": 9, "name": "bwd", "cpuLatency": 20, "fpgaLatency": 2, "supportedOnFpga": 1, "isBackwardNode": 1, "colorClass": 3, "size": 100}],
	"edges": [
	  {"sourceId": 7, "destId": 2, "size": 50, "cost": 1},
	  {"sourceId": 7, "destId": 9, "size": 80, "cost": 1},
	  {"sourceId": 2, "destId": 9, "size": 8, "cost": 1}]}`
	m, err := costed.Decode([]byte(in), "peer.json")
	if err != nil {
		t.Fatal(err)
	}
	if m.Format != "dnn-partitioning" || len(m.Warnings) != 1 {
		t.Errorf("format %q, warnings %q", m.Format, m.Warnings)
	}
	c := parseCluster(t, twoTypes) // V100-16GB, MyGPU, CPU
	inf := math.Inf(1)
	g := m.Graph
	for _, tc := range []struct {
		op       string
		gpu, cpu float64
	}{{"fwd", 0.001, 0.010}, {"cpuonly", inf, 0.004}, {"bwd", 0.002, 0.020}} {
		id, _ := g.OpByName(tc.op)
		for d, want := range []float64{tc.gpu, tc.gpu, tc.cpu} {
			if got := m.Costs.OpTime(g, id, c.Devices[d].Type); got != want {
				t.Errorf("%s on %s: %v s, want %v", tc.op, c.Devices[d].Type.Name, got, want)
			}
		}
	}
	fwd, _ := g.OpByName("fwd")
	bwd, _ := g.OpByName("bwd")
	if g.Ops[fwd].Colocate == "" || g.Ops[fwd].Colocate != g.Ops[bwd].Colocate || g.Ops[bwd].Phase != graph.Backward || g.Ops[fwd].Phase != graph.Forward {
		t.Errorf("fwd %q %s, bwd %q %s: want one colocation group, forward and backward",
			g.Ops[fwd].Colocate, g.Ops[fwd].Phase, g.Ops[bwd].Colocate, g.Ops[bwd].Phase)
	}
	for name, want := range map[string]int64{
		"fwd/params":   100, // 100.4 rounded
		"fwd":          80,  // the largest outgoing edge; fwd->bwd reads it
		"fwd->cpuonly": 50,
		"cpuonly":      8,
		"bwd/params":   100,
	} {
		id, ok := g.TensorByName(name)
		if !ok || g.Tensors[id].Bytes() != want {
			t.Errorf("tensor %q: found %v, %d bytes; want %d", name, ok, g.Tensors[id].Bytes(), want)
		}
	}
}

func TestDNNErrors(t *testing.T) {
	node := func(id int, extra string) string {
		return `{"id": ` + string(rune('0'+id)) + `, "cpuLatency": 1, "fpgaLatency": 1, "size": 0` + extra + `}`
	}
	for _, tc := range []struct{ name, in, want string }{
		{"no nodes", `{"maxSizePerFPGA": 1, "nodes": []}`, `p.json: nodes: no nodes; a dnn-partitioning graph lists at least one`},
		{"no id", `{"maxSizePerFPGA": 1, "nodes": [{"cpuLatency": 1}]}`, `p.json: nodes[0].id: missing; every node needs an id`},
		{"dup id", `{"maxSizePerFPGA": 1, "nodes": [` + node(1, "") + `, ` + node(1, "") + `]}`, `p.json: nodes[1].id: 1 is already the id of nodes[0]`},
		{"name twice", `{"maxSizePerFPGA": 1, "nodes": [` + node(1, "") + `,` + "\n" + `{"id": 2, "name": "a", "cpuLatency": 1, "name": "b"}]}`,
			`p.json: nodes[1].name: key "name" is given twice in one object, the second time on line 2: JSON readers keep either value, so the file means two things; keep one`},
		{"nodes twice", `{"maxSizePerFPGA": 1, "nodes": [` + node(1, "") + `], "nodes": [` + node(2, "") + `]}`,
			`p.json: nodes: key "nodes" is given twice in one object, the second time on line 1: JSON readers keep either value, so the file means two things; keep one`},
		{"negative latency", `{"maxSizePerFPGA": 1, "nodes": [` + `{"id": 1, "cpuLatency": 1, "fpgaLatency": -2, "size": 0}` + `]}`, `p.json: nodes[0].fpgaLatency: negative time -2`},
		{"no cpu latency", `{"maxSizePerFPGA": 1, "nodes": [{"id": 1, "fpgaLatency": 1}]}`, `p.json: nodes[0].cpuLatency: missing`},
		{"bad flag", `{"maxSizePerFPGA": 1, "nodes": [` + node(1, `, "supportedOnFpga": 2`) + `]}`, `p.json: nodes[0]: expected 0 or 1, got 2`},
		{"negative size", `{"maxSizePerFPGA": 1, "nodes": [` + `{"id": 1, "cpuLatency": 1, "fpgaLatency": 1, "size": -1}` + `]}`, `p.json: nodes[0].size: negative byte count -1`},
		{"unknown node", `{"maxSizePerFPGA": 1, "nodes": [` + node(1, "") + `], "edges": [{"sourceId": 1, "destId": 5, "size": 1}]}`, `p.json: edges[0].destId: no node has id 5`},
		{"self loop", `{"maxSizePerFPGA": 1, "nodes": [` + node(1, "") + `], "edges": [{"sourceId": 1, "destId": 1, "size": 1}]}`, `p.json: edges[0]: sourceId and destId are both 1: a node cannot feed itself`},
		{"cycle", `{"maxSizePerFPGA": 1, "nodes": [` + node(1, "") + `, ` + node(2, "") + `], "edges": [{"sourceId": 1, "destId": 2, "size": 1}, {"sourceId": 2, "destId": 1, "size": 1}]}`,
			`p.json: the graph has a cycle: node2 -> node1 -> node2; an operator graph must be acyclic (check the inputs of these nodes)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := costed.Decode([]byte(tc.in), "p.json")
			if err == nil || err.Error() != tc.want {
				t.Errorf("error\n got: %v\nwant: %s", err, tc.want)
			}
		})
	}
}

// TestPeers imports every published dnn-partitioning input and plans it
// on the heterogeneous example cluster (GPUs and a CPU).
func TestPeers(t *testing.T) {
	if testing.Short() {
		t.Skip("plans 24 published graphs")
	}
	for _, path := range peerFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			m, err := costed.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if m.Format != "dnn-partitioning" {
				t.Errorf("read as %q", m.Format)
			}
			if _, err := m.Graph.TopoOrder(m.Graph.BuildAdjacency()); err != nil {
				t.Fatal(err)
			}
			res, err := pipeline.Run(context.Background(), pipeline.Options{
				ModelPath: path, ClusterPath: filepath.Join(clusterDir, "hetero.yaml"),
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Plan.Ops) != len(m.Graph.Ops) || !res.Plan.Fits {
				t.Errorf("plan has %d ops (want %d), fits %v", len(res.Plan.Ops), len(m.Graph.Ops), res.Plan.Fits)
			}
		})
	}
}

// The converted example: a published BERT-24 training graph at layer
// granularity, with the CPU latency given to the CPU types and the
// accelerator latency to the GPU types of the example clusters.
const (
	convertedSource = "throughput-inputs_LayerGraphs_bert24_training.json"
	convertedName   = "bert24_layers_training.json"
)

var (
	convertedCPUs  = []string{"CPU", "Workstation-CPU"}
	convertedAccel = []string{"A100-40GB-PCIe", "A100-80GB", "T4", "V100-16GB"}
)

// TestConvertedExample checks testdata/costed/bert24_layers_training.json
// is what ConvertDNN makes of the published file (go test -update
// rewrites it), and that both plan to the same step.
func TestConvertedExample(t *testing.T) {
	src := filepath.Join(peersDir, convertedSource)
	data, err := os.ReadFile(src)
	if err != nil {
		t.Skipf("no %s: %v", src, err)
	}
	f, err := costed.ConvertDNN(data, convertedName, convertedCPUs, convertedAccel)
	if err != nil {
		t.Fatal(err)
	}
	f.Name = "bert24_layers_training"
	var buf bytes.Buffer
	if err := f.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(exampleDir, convertedName)
	if *update {
		if err := os.WriteFile(dst, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, buf.Bytes()) {
		t.Fatalf("%s is not what the converter makes of %s; run go test ./costed -run TestConvertedExample -update", dst, src)
	}
	var steps []float64
	for _, path := range []string{src, dst} {
		res, err := pipeline.Run(context.Background(), pipeline.Options{
			ModelPath: path, ClusterPath: filepath.Join(clusterDir, "hetero.yaml"), Strategy: "single",
		})
		if err != nil {
			t.Fatal(err)
		}
		steps = append(steps, res.Plan.PredictedStepMS)
	}
	if steps[0] != steps[1] || steps[0] <= 0 {
		t.Errorf("steps %v ms: the original and the converted graph should plan alike", steps)
	}
	if !strings.Contains(string(have), `"phase":"backward"`) || !strings.Contains(string(have), `"colocate"`) {
		t.Errorf("%s has no backward ops or colocation groups", dst)
	}
}

// BenchmarkDecodeDNN imports the largest published graph (BERT-L12
// training, 2012 operators, 2751 edges).
func BenchmarkDecodeDNN(b *testing.B) {
	data, err := os.ReadFile(filepath.Join(peersDir, "throughput-inputs_OperatorGraphs_bert_L-12_training.json"))
	if err != nil {
		b.Skip(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := costed.Decode(data, "bert.json"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeV1 imports the converted BERT-24 example.
func BenchmarkDecodeV1(b *testing.B) {
	data, err := os.ReadFile(filepath.Join(exampleDir, convertedName))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := costed.Decode(data, "bert24.json"); err != nil {
			b.Fatal(err)
		}
	}
}
