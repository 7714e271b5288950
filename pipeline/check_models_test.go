package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/pipeline"
)

// TestCheckImportedModels runs graph.Check on every model the tests and
// benchmarks read, as imported: the shared ONNX exports, the held-out
// and training exports, the TensorFlow and costed graphs, and the shared
// LLMs when ../shared is present.
func TestCheckImportedModels(t *testing.T) {
	dims := map[string]map[string]int64{}
	for _, m := range sharedModels {
		dims[m.name+".onnx"] = m.dims
	}
	var files []string
	for _, pattern := range []string{
		models + "/*.onnx", models + "/heldout/*.onnx", models + "/train/*.onnx",
		"../testdata/tf/*.json", "../testdata/tf/*.pb", "../testdata/tf/*.pbtxt",
		"../testdata/costed/*.json", "../../shared/models/llm/*.onnx",
	} {
		found, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, found...)
	}
	if len(files) < 30 {
		t.Fatalf("found %d models: %v", len(files), files)
	}
	for _, path := range files {
		t.Run(path, func(t *testing.T) {
			opts := pipeline.ImportOptions{Dims: dims[filepath.Base(path)]}
			switch {
			case filepath.Base(filepath.Dir(path)) == "tf":
				opts.Batch = 1 // the TensorFlow graphs leave the batch open
			case opts.Dims == nil:
				opts.Dims = map[string]int64{"batch": 2} // binds the LLMs' batch
			}
			m, err := pipeline.LoadModel(path, opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := graph.Check(m.Graph); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestCheckStagesSharedModels runs the stages before placement on each
// shared model's training step (fused, then costed and bounded on
// 4xV100) with the check between stages on, as tests run them: every
// stage that writes the graph leaves one that holds graph.Check.
func TestCheckStagesSharedModels(t *testing.T) {
	if !pipeline.CheckStages {
		t.Fatalf("the check between stages is off in a test binary (%s=%q)", pipeline.CheckEnv, os.Getenv(pipeline.CheckEnv))
	}
	for _, m := range sharedModels {
		t.Run(m.name, func(t *testing.T) {
			if _, _, err := pipeline.Prepare(context.Background(), opts(m.name, "4xV100", m.dims)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// BenchmarkCheck is graph.Check alone on the largest graphs a plan
// meets: gpt2_xl (batch 4) as imported, its training step, the step
// fused, and the generated costed training graph of 10^5 ops (10^6 with
// OPPLACE_BENCH_1M=1) as imported. Stages that write the graph run it
// once each when the check between stages is on (docs/architecture.md).
//
//	go test -run '^$' -bench Check -benchtime 20x ./pipeline/
func BenchmarkCheck(b *testing.B) {
	ctx := context.Background()
	type input struct {
		name string
		g    *graph.Graph
	}
	var inputs []input
	xl := opts("gpt2_xl", "8xA100-2host", map[string]int64{"batch": 4})
	m, err := pipeline.LoadModel(xl.ModelPath, xl.Import)
	if err != nil {
		b.Fatal(err)
	}
	inputs = append(inputs, input{"gpt2_xl-import", m.Graph})
	for _, fusion := range []string{pipeline.FusionNone, pipeline.FusionHybrid} {
		o := xl
		o.Fusion = fusion
		prob, _, err := pipeline.Prepare(ctx, o)
		if err != nil {
			b.Fatal(err)
		}
		inputs = append(inputs, input{"gpt2_xl-train-fusion-" + fusion, prob.Graph})
	}
	dir := b.TempDir()
	for _, n := range scaleSizes()[1:] {
		m, err := pipeline.LoadModel(synthFile(b, dir, n), pipeline.ImportOptions{})
		if err != nil {
			b.Fatal(err)
		}
		inputs = append(inputs, input{fmt.Sprintf("costed-%d", n), m.Graph})
	}
	for _, in := range inputs {
		b.Run(in.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := graph.Check(in.g); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(in.g.Ops)), "ops")
		})
	}
}
