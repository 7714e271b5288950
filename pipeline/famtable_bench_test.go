package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/strategy"
)

// famModelMACs are the MACs of each shared model at its facts.json
// batch (/work/shared/models/facts.json; the same figures as
// onnx/models_test.go), the model FLOPs of the table's MFU.
var famModelMACs = map[string]int64{
	"resnet50": 130853896192, "inception_v3": 182822915072, "vgg16": 495048458240,
	"mobilenet_v2": 19249553408, "bert_base": 226784968704, "gpt2_small": 1166593228800,
	"transformer": 92610232320, "gnmt": 255684771840, "gpt2_xl": 7013407129600,
}

// famBatch is each shared model's batch, as its row names it.
var famBatch = map[string]int64{
	"resnet50": 32, "inception_v3": 32, "vgg16": 32, "mobilenet_v2": 64, "bert_base": 16,
	"gpt2_small": 8, "transformer": 64, "gnmt": 64, "gpt2_xl": 4,
}

// famDevices are the table's device presets, each with its half-precision
// amp and the eight-device server it is planned on.
var famDevices = []struct {
	preset string
	amp    string
	half   graph.DType
	server string // YAML links of the 8-device host
	what   string
}{
	{"V100-16GB", "amp-fp16", graph.Float16,
		"links:\n  - {between: [gpu0, gpu1, gpu2, gpu3, gpu4, gpu5, gpu6, gpu7], kind: nvlink, bandwidth: 25GB/s, latency: 2us}\n",
		"DGX-1-like: NVLink 2.0, one brick (25 GB/s) between every pair (an idealised hybrid cube-mesh)"},
	{"A100-80GB", "amp-bf16", graph.BFloat16,
		"links:\n  - {between: [gpu0, gpu1, gpu2, gpu3, gpu4, gpu5, gpu6, gpu7], preset: nvswitch-a100}\n",
		"HGX A100 8-GPU: NVSwitch, 300 GB/s (preset nvswitch-a100)"},
	{"H100-80GB", "amp-bf16", graph.BFloat16,
		"links:\n  - {between: [gpu0, gpu1, gpu2, gpu3, gpu4, gpu5, gpu6, gpu7], preset: nvswitch-h100}\n",
		"HGX H100 8-GPU: NVSwitch, 450 GB/s (preset nvswitch-h100)"},
	{"T4", "amp-fp16", graph.Float16, "",
		"8 T4 on one host's PCIe 3.0 x16 (16 GB/s, shared; preset pcie3), no NVLink"},
}

// famCluster is n devices of a preset on one host: one device alone, or
// the 8-device server of famDevices.
func famCluster(b *testing.B, preset, links string, n int) *cluster.Cluster {
	b.Helper()
	y := fmt.Sprintf("name: %dx%s\nhosts:\n  - {name: node0, intra: {preset: pcie3}}\ndevices:\n  - {name: \"gpu{i}\", count: %d, type: %s, host: node0}\n", n, preset, n, preset)
	if n > 1 {
		y += links
	}
	c, err := cluster.Parse([]byte(y), fmt.Sprintf("%dx%s.yaml", n, preset))
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// famCell is one plan of the table.
type famCell struct {
	fits     bool
	why      string
	step     float64 // seconds
	mfu      float64
	used     int
	strategy string
	family   string
	shape    string
	bestOf   map[string]float64 // per family, the best fitting step (s)
	elapsed  time.Duration
}

// famPlan plans one case with auto and scores it.
func famPlan(b *testing.B, model, mode, precision string, c *cluster.Cluster, peak float64) famCell {
	b.Helper()
	ctx := context.Background()
	dims, _ := famDims(model)
	o := opts(model, "", dims)
	o.ClusterPath, o.Cluster = "", c
	o.Mode, o.Precision = mode, precision
	begin := time.Now()
	prob, cfg, err := pipeline.Prepare(ctx, o)
	if err != nil {
		b.Errorf("%s %s %s on %s: %v", model, mode, precision, c.Name, err)
		return famCell{why: "error: " + firstClause(err.Error())}
	}
	outs, best, err := strategy.Search(ctx, prob, cfg, nil)
	cell := famCell{elapsed: time.Since(begin), bestOf: map[string]float64{}}
	for _, out := range outs {
		if out.Sim != nil && out.Fits {
			if v, ok := cell.bestOf[out.Family]; !ok || out.Sim.Step < v {
				cell.bestOf[out.Family] = out.Sim.Step
			}
		}
	}
	var inf *placer.InfeasibleError
	if errors.As(err, &inf) {
		cell.why = "does not fit"
		return cell
	}
	if err != nil {
		b.Errorf("%s %s %s on %s: %v", model, mode, precision, c.Name, err)
		cell.why = "error: " + firstClause(err.Error())
		return cell
	}
	w := outs[best]
	flops := 2 * float64(famModelMACs[model])
	if mode == pipeline.ModeTrain {
		flops *= 3
	}
	cell.fits, cell.step, cell.strategy, cell.family = true, w.Sim.Step, w.Strategy, w.Family
	cell.mfu = flops / (w.Sim.Step * float64(len(c.Devices)) * peak)
	for _, busy := range w.Sim.Busy {
		if busy > 0 {
			cell.used++
		}
	}
	cell.shape = degrees(w)
	return cell
}

func famDims(model string) (map[string]int64, bool) {
	for _, m := range sharedModels {
		if m.name == model {
			return m.dims, m.dims != nil
		}
	}
	return nil, false
}

func (c famCell) stepCell() string {
	if !c.fits {
		return c.why
	}
	return fmt.Sprintf("%.1f", c.step*1e3)
}

func (c famCell) mfuCell() string {
	if !c.fits {
		return ""
	}
	return fmt.Sprintf("%.0f%%", 100*c.mfu)
}

// planCell says auto's plan in a few words: its strategy, and its
// tensor degree × stages × replicas with the micro-batches.
func (c famCell) planCell() string {
	if !c.fits {
		return ""
	}
	return fmt.Sprintf("**%s** (`%s`, %s; %d devices busy)", c.family, c.strategy, c.shape, c.used)
}

// BenchmarkFamilyTable is docs/performance-table.md (issue 18): every
// shared model, training and inference, on one device and on an 8-device
// server of V100-16GB, A100-80GB, H100-80GB and T4, in fp32 and amp
// (amp-bf16 on A100 and H100, amp-fp16 on V100 and T4, which refuse
// amp-bf16): auto's predicted step, the implied model-FLOPs utilisation
// and, on the server, which strategy family auto picks. A second table
// gives the best step of every family on the server for GPT-2 XL and
// BERT-base, fp32 against amp.
//
//	go test -run '^$' -bench FamilyTable -benchtime 1x -timeout 60m -v ./pipeline/
//
// OPPLACE_FAMTABLE_MODELS (comma-separated) limits the models.
func BenchmarkFamilyTable(b *testing.B) {
	modelsWanted := famWanted()
	var rows, famRows []string
	var total time.Duration
	for _, m := range sharedModels {
		if modelsWanted != nil && !modelsWanted[m.name] {
			continue
		}
		for _, mode := range []string{pipeline.ModeTrain, pipeline.ModeInfer} {
			for _, dev := range famDevices {
				// amp-bf16 on a part without bfloat16 tensor cores is an
				// input error (exit 2); check it once per model and mode.
				if dev.amp == "amp-fp16" {
					o := opts(m.name, "", m.dims)
					o.ClusterPath, o.Cluster = "", famCluster(b, dev.preset, dev.server, 1)
					o.Mode, o.Precision = mode, "amp-bf16"
					var ie *pipeline.InputError
					if _, _, err := pipeline.Prepare(context.Background(), o); !errors.As(err, &ie) {
						b.Errorf("%s amp-bf16 on %s: %v, want an input error", m.name, dev.preset, err)
					}
				}
				pt, _ := cluster.Preset(dev.preset)
				for _, prec := range []string{"fp32", dev.amp} {
					peak := pt.PeakFLOPS[graph.Float32]
					if prec != "fp32" {
						peak = pt.PeakFLOPS[dev.half]
					}
					var one, eight famCell
					b.Run(fmt.Sprintf("%s/%s/%s/%s", m.name, mode, dev.preset, prec), func(b *testing.B) {
						for i := 0; i < b.N; i++ {
							one = famPlan(b, m.name, mode, prec, famCluster(b, dev.preset, dev.server, 1), peak)
							eight = famPlan(b, m.name, mode, prec, famCluster(b, dev.preset, dev.server, 8), peak)
						}
						b.ReportMetric((one.elapsed + eight.elapsed).Seconds(), "plan_s")
					})
					total += one.elapsed + eight.elapsed
					rows = append(rows, fmt.Sprintf("| %s (%d) | %s | %s | %s | %s | %s | %s | %s | %s |",
						m.name, famBatch[m.name], mode, dev.preset, prec,
						one.stepCell(), one.mfuCell(), eight.stepCell(), eight.mfuCell(), eight.planCell()))
					if m.name == "gpt2_xl" || m.name == "bert_base" {
						cells := []string{m.name, mode, dev.preset, prec}
						for _, f := range []string{strategy.FamilyDataParallel, strategy.FamilyPipeline, strategy.FamilyTensor, strategy.FamilyHybrid, strategy.FamilyPlacement} {
							if s, ok := eight.bestOf[f]; ok {
								cells = append(cells, fmt.Sprintf("%.1f", s*1e3))
							} else {
								cells = append(cells, "—")
							}
						}
						w := "does not fit"
						if eight.fits {
							w = eight.family
						}
						famRows = append(famRows, "| "+strings.Join(append(cells, w), " | ")+" |")
					}
				}
			}
		}
	}
	b.Logf("\n| model (batch) | mode | device | precision | 1 device: step (ms) | MFU | 8 devices: step (ms) | MFU | auto's plan on 8 devices |\n|---|---|---|---|---|---|---|---|---|\n%s",
		strings.Join(rows, "\n"))
	b.Logf("\n| model | mode | device | precision | data-parallel | pipeline | tensor | hybrid | placement | auto picks |\n|---|---|---|---|---|---|---|---|---|---|\n%s",
		strings.Join(famRows, "\n"))
	b.Logf("planning time, all cases: %.0f s", total.Seconds())
}

// famWanted is the set of models OPPLACE_FAMTABLE_MODELS names, nil for all.
func famWanted() map[string]bool {
	v := strings.TrimSpace(os.Getenv("OPPLACE_FAMTABLE_MODELS"))
	if v == "" {
		return nil
	}
	set := map[string]bool{}
	for _, n := range strings.Split(v, ",") {
		set[strings.TrimSpace(n)] = true
	}
	return set
}
