package profile_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/profile"
)

// TestAdvice: a profile says when it cannot price a plan as its user
// may expect: measured at another batch (only ops of the measured shapes
// keep their times), or on device types the cluster does not have (it
// changes nothing). The sample trace is BERT-base at batch 1 on a V100.
func TestAdvice(t *testing.T) {
	bert := func(batch int64) *graph.Graph {
		m, err := onnx.Load("../testdata/models/bert_base.onnx", onnx.Options{Dims: map[string]int64{"batch": batch}})
		if err != nil {
			t.Fatal(err)
		}
		return m.Graph
	}
	v100, _ := cluster.Preset("V100-16GB")
	res, err := profile.Import(filepath.Join(samples, "bert_base_b1_pytorch_v100.json"), bert(1),
		profile.DeviceType{Name: "V100-16GB", PeakFLOPS: 15.7e12, MemoryBandwidth: 900e9, LaunchOverhead: 5e-6})
	if err != nil {
		t.Fatal(err)
	}
	if res.Profile.Batch != 1 {
		t.Fatalf("the imported profile records batch %d, want 1", res.Profile.Batch)
	}
	onV100 := oneDevice(v100)
	a100, _ := cluster.Preset("A100-40GB")
	tests := []struct {
		name    string
		batch   int64
		cluster *cluster.Cluster
		want    []string // fragments of the one warning; nil for none
	}{
		{"same batch, measured type", 1, onV100, nil},
		{"batch 32", 32, onV100, []string{"measured at batch 1 and this plan is at batch 32", "169 of 485 ops have the measured shapes", "priced by the roofline"}},
		{"device type not in the cluster", 1, oneDevice(a100), []string{"measured device type(s) V100-16GB", "changes nothing"}},
		{"both", 32, oneDevice(a100), []string{"changes nothing"}},
		{"same batch, one op measured at other shapes", 1, onV100, []string{"the profile measured 1 of this plan's ops at other shapes", "484 of 485 ops have the measured shapes"}},
	}
	// The same profile with the key (the shapes) of one measurement no
	// other op shares changed.
	other := *res.Profile
	other.Ops = slices.Clone(other.Ops)
	for i, ms := range other.Ops {
		if slices.IndexFunc(other.Ops, func(o profile.Measurement) bool { return o.Key == ms.Key && o.Name != ms.Name }) < 0 {
			other.Ops[i].Key = "0000000000000000"
			break
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := res.Profile
			if strings.Contains(tc.name, "other shapes") {
				p = &other
			}
			m := profile.NewModel(p, nil)
			got := m.Advice(bert(tc.batch), tc.cluster, tc.batch)
			if tc.want == nil {
				if len(got) != 0 {
					t.Errorf("advice %q, want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("advice %q, want one warning", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got[0], w) {
					t.Errorf("advice %q lacks %q", got[0], w)
				}
			}
		})
	}
}

// oneDevice is a cluster of one device of type dt.
func oneDevice(dt *cluster.DeviceType) *cluster.Cluster {
	c := &cluster.Cluster{Name: "one", Hosts: []cluster.Host{{Name: "h0", Intra: cluster.Link{Kind: "pcie", Bandwidth: 1e10}}},
		Devices: []cluster.Device{{Name: "d0", Type: dt, Memory: 16 << 30}}}
	return c
}

// TestImportChecksBatch: the profile labels a trace's times with the
// graph's shapes, so an ONNX Runtime trace run at batch 1 imported
// against ResNet-50 at its exported batch of 32 is refused, naming the
// node and the batch to bind, instead of labelling batch-1 times as
// batch-32 ones.
func TestImportChecksBatch(t *testing.T) {
	m, err := onnx.Load("../testdata/models/resnet50.onnx", onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = profile.Import(filepath.Join(samples, "resnet50_b1_onnxruntime_cpu.json"), m.Graph, testCPU)
	if err == nil || !strings.Contains(err.Error(), "the trace ran batch 1") || !strings.Contains(err.Error(), "resnet50_b1_onnxruntime_cpu.json: node ") {
		t.Errorf("error %v, want one naming the file, the node and the trace's batch", err)
	}
	if _, err := profile.Import(filepath.Join(samples, "resnet50_b1_onnxruntime_cpu.json"), loadResNetB1(t), testCPU); err != nil {
		t.Errorf("at batch 1: %v", err)
	}
}
