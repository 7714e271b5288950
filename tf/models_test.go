package tf_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/internal/importopt"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/tf"
)

// manifestParams counts the float32 weights a TF.js manifest lists,
// independently of the importer.
func manifestParams(t *testing.T, path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		WeightsManifest []struct {
			Weights []struct {
				Shape []int64
				Dtype string
			}
		}
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, g := range m.WeightsManifest {
		for _, w := range g.Weights {
			if w.Dtype != "float32" {
				continue
			}
			e := int64(1)
			for _, d := range w.Shape {
				e *= d
			}
			n += e
		}
	}
	return n
}

// The real TF.js models, without their weight files: every op output is
// shaped (movenet's decoder reshapes to targets only the weight file
// holds; deduction and the reshape assumption recover them), and
// parameters match the manifest.
func TestModels(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ops     int
		unknown int // op outputs left unshaped
	}{
		{"blazeface", 144, 0},
		{"emotion", 21, 0},
		{"facemesh", 120, 0},
		{"iris", 142, 0},
		{"movenet-lightning", 150, 0},
	} {
		path := filepath.Join("..", "testdata", "tf", tc.name+".json")
		m, err := tf.Load(path, tf.Options{Import: importopt.Options{Batch: 1}})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if m.Kind != tf.JSGraphModel {
			t.Errorf("%s: kind %v", tc.name, m.Kind)
		}
		if got := len(m.Graph.Ops); got != tc.ops {
			t.Errorf("%s: %d ops, want %d", tc.name, got, tc.ops)
		}
		unknown := 0
		for _, op := range m.Graph.Ops {
			for _, o := range op.Outputs {
				if !m.Graph.Tensors[o].ShapeKnown {
					unknown++
				}
			}
		}
		if unknown != tc.unknown {
			t.Errorf("%s: %d unshaped op outputs, want %d", tc.name, unknown, tc.unknown)
		}
		if want := manifestParams(t, path); m.Params != want {
			t.Errorf("%s: %d params, the manifest lists %d", tc.name, m.Params, want)
		}
	}
}

// MoveNet's keypoint decoder, derived by hand from the graph: the center
// heatmap 1x48x48x1 is flattened to [1, 2304, 1] and arg-maxed over the
// 2304 positions; the regression head is gathered at that center
// ([1,34]) and reshaped to 17 (y, x) pairs; the keypoint heatmap
// 1x48x48x17 is flattened per keypoint to [1, 2304, 17] and arg-maxed to
// [1, 17]; the offsets gathered per keypoint (17x34) are reshaped to
// [17, 17, 2] and each keypoint's own pair picked (GatherNd -> 17x2);
// the output is [1, 1, 17, 3] (y, x, score).
func TestMoveNetDecoder(t *testing.T) {
	m, err := tf.Load(filepath.Join("..", "testdata", "tf", "movenet-lightning.json"), tf.Options{Import: importopt.Options{Batch: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for op, want := range map[string]string{
		"Reshape_2": "1x2304x1", "ArgMax": "1x1", "floordiv": "1x1", "Reshape_4": "1", "stack_2": "1x3",
		"GatherNd": "1x34", "Reshape_6": "17x2", "add_2": "1x17", "sub_5": "48x48x17", "truediv_3": "1x48x48x17",
		"Reshape_7": "1x2304x17", "ArgMax_1": "1x17", "Reshape_9": "17", "stack_3": "17x3", "concat": "17x4",
		"GatherNd_1": "17x34", "Reshape_11": "17x17x2", "GatherNd_2": "17x2", "GatherNd_3": "17",
		"stack_5": "1x17x2", "ExpandDims_4": "1x1x17x2", "ExpandDims_8": "1x1x17x1", "concat_1": "1x1x17x3",
	} {
		id, ok := m.Graph.OpByName("StatefulPartitionedCall/" + op)
		if !ok {
			t.Fatalf("no op %s", op)
		}
		if got := m.Graph.Tensor(m.Graph.Op(id).Outputs[0]).ShapeString(); got != want {
			t.Errorf("%s: %s, want %s", op, got, want)
		}
	}
}

// Hand-computed shapes and work of emotion's first layers (input
// 1x64x64x1, NHWC).
func TestEmotionByHand(t *testing.T) {
	m, err := tf.Load(filepath.Join("..", "testdata", "tf", "emotion.json"), tf.Options{Import: importopt.Options{Batch: 1}})
	if err != nil {
		t.Fatal(err)
	}
	g := m.Graph
	for _, tc := range []struct {
		op    string
		shape string
		macs  int64
		flops int64
	}{
		// 3x3 VALID stride 2: (64-3)/2+1 = 31; 31·31·32 outputs × 9 MACs;
		// BiasAdd and Relu fused: 2 FLOPs per output.
		{"StatefulPartitionedCall/model_1/block1_conv1_act/Relu", "1x31x31x32", 31 * 31 * 32 * 9, 2*31*31*32*9 + 2*31*31*32},
		// 3x3x32 VALID stride 1: 29.
		{"StatefulPartitionedCall/model_1/block1_conv2_act/Relu", "1x29x29x64", 29 * 29 * 64 * 9 * 32, 2*29*29*64*9*32 + 2*29*29*64},
		// Depthwise 3x3 SAME: one 9-tap filter per channel.
		{"StatefulPartitionedCall/model_1/separable_conv2d_1/separable_conv2d/depthwise", "1x29x29x64", 29 * 29 * 64 * 9, 2 * 29 * 29 * 64 * 9},
		// MaxPool 3x3 stride 2 SAME: ceil(29/2) = 15; 9 compares per output.
		{"StatefulPartitionedCall/model_1/max_pooling2d_1/MaxPool", "1x15x15x128", 0, 9 * 15 * 15 * 128},
		// Global average pooling of the 1x8x8x7 head (axes recovered from
		// the signature): one add per input element.
		{"StatefulPartitionedCall/model_1/global_average_pooling2d_1/Mean", "1x7", 0, 8 * 8 * 7},
	} {
		id, ok := g.OpByName(tc.op)
		if !ok {
			t.Fatalf("no op %s", tc.op)
		}
		op := g.Op(id)
		if got := g.Tensor(op.Outputs[0]).ShapeString(); got != tc.shape {
			t.Errorf("%s: shape %s, want %s", tc.op, got, tc.shape)
		}
		if op.Work.MACs != tc.macs || op.Work.FLOPs != tc.flops || op.Work.Estimated {
			t.Errorf("%s: work %+v, want %d MACs %d FLOPs", tc.op, op.Work, tc.macs, tc.flops)
		}
	}
}

// maxPlanDevices leaves out of TestModelsPlan the bundled clusters of
// datacenter scale (selene-1536xA100.yaml): a plan there takes about ten
// seconds (blazeface: 11 s, the list placers' cost per op and device), for
// every model and mode more than this test is given.
const maxPlanDevices = 64

// Every model plans on every bundled cluster of at most maxPlanDevices
// devices, for inference and training.
func TestModelsPlan(t *testing.T) {
	models, _ := filepath.Glob(filepath.Join("..", "testdata", "tf", "*"))
	all, _ := filepath.Glob(filepath.Join("..", "testdata", "clusters", "*.yaml"))
	var clusters []string
	for _, c := range all {
		cl, err := cluster.Load(c)
		if err != nil {
			t.Fatal(err)
		}
		if len(cl.Devices) <= maxPlanDevices {
			clusters = append(clusters, c)
		}
	}
	if len(models) < 9 || len(clusters) < 3 {
		t.Fatalf("found %d models and %d clusters", len(models), len(clusters))
	}
	for _, m := range models {
		for _, c := range clusters {
			for _, mode := range []string{pipeline.ModeInfer, pipeline.ModeTrain} {
				if testing.Short() && mode == pipeline.ModeTrain {
					continue
				}
				res, err := pipeline.Run(context.Background(), pipeline.Options{ModelPath: m, ClusterPath: c,
					Import: importopt.Options{Batch: 1}, Mode: mode})
				if err != nil {
					t.Errorf("%s on %s (%s): %v", filepath.Base(m), filepath.Base(c), mode, err)
					continue
				}
				if !res.Plan.Fits || res.Plan.PredictedStepMS <= 0 {
					t.Errorf("%s on %s (%s): fits %v, step %v ms", filepath.Base(m), filepath.Base(c), mode, res.Plan.Fits, res.Plan.PredictedStepMS)
				}
			}
		}
	}
}
