package onnx

import (
	"path/filepath"
	"testing"

	"github.com/opplace/opplace/graph"
)

// modelCase holds the reference facts of one shared model
// (/work/shared/models/facts.json).
type modelCase struct {
	name   string
	opts   Options
	nodes  int
	params int64
	macs   int64
}

var modelCases = []modelCase{
	{"resnet50", Options{}, 169, 25507944, 130853896192},
	{"inception_v3", Options{}, 316, 23802088, 182822915072},
	{"vgg16", Options{}, 48, 138350184, 495048458240},
	{"mobilenet_v2", Options{}, 209, 3475008, 19249553408},
	{"bert_base", Options{Dims: map[string]int64{"batch": 16}}, 1086, 131999232, 226784968704},
	{"gpt2_small", Options{Dims: map[string]int64{"batch": 8}}, 1183, 163000320, 1166593228800},
	{"transformer", Options{}, 1793, 44047872, 92610232320},
	{"gnmt", Options{}, 4857, 132742400, 255684771840},
	{"gpt2_xl", Options{Dims: map[string]int64{"batch": 4}}, 4519, 1638022400, 7013407129600},
}

func modelPath(name string) string { return filepath.Join("..", "testdata", "models", name+".onnx") }

// totals sums a graph's parameters (elements of parameter tensors) and
// MACs, and counts outputs of unknown shape.
func totals(g *graph.Graph) (params, macs int64, unshaped []string) {
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if t.Kind == graph.Parameter {
			params += t.Elements()
		}
	}
	for i := range g.Ops {
		macs += g.Ops[i].Work.MACs
		for _, o := range g.Ops[i].Outputs {
			if !g.Tensors[o].ShapeKnown {
				unshaped = append(unshaped, g.Ops[i].Name)
			}
		}
	}
	return
}

func TestModels(t *testing.T) {
	for _, tc := range modelCases {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.nodes > 2000 {
				t.Skip("large model in -short mode")
			}
			m, err := Load(modelPath(tc.name), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			g := m.Graph
			if len(g.Ops) != tc.nodes {
				t.Errorf("ops = %d, want %d", len(g.Ops), tc.nodes)
			}
			params, macs, unshaped := totals(g)
			if len(unshaped) > 0 {
				t.Errorf("%d op outputs unshaped, first %v", len(unshaped), unshaped[:min(5, len(unshaped))])
			}
			if params != tc.params {
				t.Errorf("params = %d, want %d", params, tc.params)
			}
			if macs != tc.macs {
				t.Errorf("MACs = %d, want %d (ratio %.6f)", macs, tc.macs, float64(macs)/float64(tc.macs))
			}
			if m.Opset != 17 {
				t.Errorf("opset = %d, want 17", m.Opset)
			}
			if len(m.Warnings) != 0 {
				t.Errorf("warnings: %v", m.Warnings)
			}
			for i := range g.Ops {
				if w := g.Ops[i].Work; w.Estimated || w.FLOPs < 0 {
					t.Errorf("op %s: work %+v", g.Ops[i].Name, w)
				}
			}
		})
	}
}
