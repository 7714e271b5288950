package pipeline_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/opplace/opplace/export"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/train"
)

// precisionModels are every ONNX model of testdata/models (with its
// held-out and train sets) and of the shared set (../shared/models and
// its LLMs), each file once.
// llmSize reads the size in billions a shared LLM's file name ends in.
var llmSize = regexp.MustCompile(`_([0-9.]+)b\.onnx$`)

func precisionModels(t *testing.T) []string {
	var paths []string
	for _, pattern := range []string{"*.onnx", "heldout/*.onnx", "train/*.onnx"} {
		m, _ := filepath.Glob(filepath.Join(models, pattern))
		paths = append(paths, m...)
	}
	shared, _ := filepath.Glob(filepath.Join("..", "..", "shared", "models", "*.onnx"))
	paths = append(paths, shared...)
	// The decoder LLMs that fit 8 A100-80GB at batch 2 (their names end
	// in their size: up to 20B); the larger are written by the same
	// generator (module paths alike).
	llms, _ := filepath.Glob(filepath.Join("..", "..", "shared", "models", "llm", "*.onnx"))
	for _, p := range llms {
		m := llmSize.FindStringSubmatch(filepath.Base(p))
		if m == nil {
			continue
		}
		if size, err := strconv.ParseFloat(m[1], 64); err == nil && size <= 20 {
			paths = append(paths, p)
		}
	}
	seen := map[[32]byte]bool{}
	var out []string
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if h := sha256.Sum256(data); !seen[h] {
			seen[h] = true
			out = append(out, p)
		}
	}
	if len(out) < 18 {
		t.Fatalf("found %d models", len(out))
	}
	return out
}

// modulePaths is every module path the model file's op names enter
// ("/blocks/", "/blocks/blocks.5/", "/blocks/blocks.5/fc2/" for
// "/blocks/blocks.5/fc2/MatMul").
func modulePaths(t *testing.T, path string) map[string]bool {
	m, err := pipeline.LoadModel(path, pipeline.ImportOptions{Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]bool{}
	for _, op := range m.Graph.Ops {
		for i := 1; i < len(op.Name); i++ {
			if op.Name[i] == '/' {
				paths[op.Name[:i+1]] = true
			}
		}
	}
	return paths
}

// splitSpec reads the module names of a torch-pipelining artefact's
// split_spec.
var splitSpec = regexp.MustCompile(`(?m)^    "([^"]*)": SplitPoint\.BEGINNING,`)

// TestPrecisionModuleCuts plans every model under every precision with a
// pipeline strategy and checks that the stages are cut at modules the
// model has, named as its forward ops name them, and that the pipeline
// runtimes' exports name only those modules: under mixed precision the
// casts autocast inserts once read as modules of their own ("/locks.5.fc2.weight/",
// from a weight's cast named "blocks.5.fc2.weight/autocast_bfloat16"),
// which deepspeed listed as layers and torch-pipelining refused as
// cutting inside blocks.
func TestPrecisionModuleCuts(t *testing.T) {
	precisions := append([]train.Precision{train.PrecisionDefault}, train.Precisions...)
	for _, path := range precisionModels(t) {
		name := strings.TrimSuffix(filepath.Base(path), ".onnx")
		t.Run(name, func(t *testing.T) {
			modules := modulePaths(t, path)
			fqns := map[string]bool{}
			for m := range modules {
				fqns[export.FQN(m)] = true
			}
			baseRefused := map[string]bool{}
			for _, prec := range precisions {
				o := pipeline.Options{ModelPath: path, ClusterPath: filepath.Join(clusters, "8xA100-2host.yaml"),
					Import: pipeline.ImportOptions{Batch: 2}, Strategy: "pipeline:gpipe", Precision: string(prec)}
				res, err := pipeline.Run(context.Background(), o)
				if err != nil {
					t.Fatalf("%s: %v", prec, err)
				}
				p := res.Plan
				for _, st := range p.Stages {
					for _, m := range []string{st.ModulePrefix, st.FirstModule, st.LastModule} {
						if m != "" && m != "/" && !modules[m] {
							t.Errorf("%s: stage %d names module %q, which no op of the model is in", prec, st.Index, m)
						}
					}
				}
				// The casts autocast adds once made module-aligned plans
				// refuse as cut inside a module: a plan whose stages are
				// cut between modules (no note says otherwise) and named
				// by module paths must export.
				aligned := true
				for _, n := range p.Notes {
					aligned = aligned && !strings.Contains(n, "stages cut between ops")
				}
				for _, st := range p.Stages {
					aligned = aligned && st.ModulePrefix != "" && (st.Index == 0 || st.FirstModule != "")
				}
				// A model whose own-precision plan is refused so too
				// (GNMT's unrolled cells, gpt_mini's shape ops) is a
				// limitation of its module structure, not of precision.
				for _, target := range []string{"deepspeed", "torch-pipelining"} {
					kind := checkExport(t, p, target, modules, fqns)
					refused := kind == export.OpCuts && aligned
					if prec == train.PrecisionDefault {
						baseRefused[target] = refused
					} else if refused && !baseRefused[target] {
						t.Errorf("%s: export --to %s refuses a plan cut between modules, which it exports at the file's precision", prec, target)
					}
				}
				t.Logf("%s: %d stages, %.3f ms", prec, len(p.Stages), p.PredictedStepMS)
			}
		})
	}
}

// checkExport renders p for target and checks the modules it names;
// it returns the refusal's kind, or -1 when it exports.
func checkExport(t *testing.T, p *plan.Plan, target string, modules, fqns map[string]bool) export.Kind {
	t.Helper()
	out, err := export.Render(target, p, export.Options{Source: "p.json"})
	var ee *export.Error
	if errors.As(err, &ee) {
		t.Logf("export --to %s: %v (notes %q)", target, err, p.Notes)
		return ee.Kind
	}
	if err != nil {
		t.Fatalf("export --to %s: %v", target, err)
	}
	switch target {
	case "deepspeed":
		var spec struct {
			Layers     []string `json:"layers"`
			LayerPaths []string `json:"layer_paths"`
			Stages     []struct {
				FirstModule string `json:"first_module"`
				LastModule  string `json:"last_module"`
			} `json:"stages"`
		}
		if err := json.Unmarshal(out, &spec); err != nil {
			t.Fatal(err)
		}
		for i, l := range spec.LayerPaths {
			if !modules[l] || spec.Layers[i] != export.FQN(l) {
				t.Errorf("deepspeed layer %d: %q at %q, not a module of the model", i, spec.Layers[i], l)
			}
		}
		for i, st := range spec.Stages {
			if !fqns[st.FirstModule] || !fqns[st.LastModule] {
				t.Errorf("deepspeed stage %d: modules %q .. %q, not both in the model", i, st.FirstModule, st.LastModule)
			}
		}
	case "torch-pipelining":
		splits := splitSpec.FindAllStringSubmatch(string(out), -1)
		if len(splits) != len(p.Stages)-1 {
			t.Errorf("torch-pipelining: %d split points for %d stages", len(splits), len(p.Stages))
		}
		for _, s := range splits {
			if !fqns[s[1]] {
				t.Errorf("torch-pipelining splits at %q, not a module of the model", s[1])
			}
		}
	}
	return -1
}
