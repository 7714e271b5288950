package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/opplace/opplace/export"
	"github.com/opplace/opplace/internal/runtimetest"
	"github.com/opplace/opplace/plan"
)

// exportPlan plans model on cluster with args into a file of dir and
// returns its path and the plan.
func exportPlan(t *testing.T, dir, model, cluster string, args ...string) (string, *plan.Plan) {
	t.Helper()
	path := filepath.Join(dir, strings.TrimSuffix(model, ".onnx")+".json")
	args = append([]string{"plan", filepath.Join(modelDir, model), "--cluster", filepath.Join(clusterDir, cluster), "--out", path, "-o", "json"}, args...)
	if code, _, stderr := invoke(t, args...); code != 0 {
		t.Fatalf("plan: exit %d: %s", code, stderr)
	}
	p, err := plan.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, p
}

// modelModules is the fully qualified name of every module the model's op
// names enter (every module path prefix of an op name), by opplace
// inspect.
func modelModules(t *testing.T, model string, dims ...string) map[string]bool {
	t.Helper()
	code, stdout, stderr := invoke(t, append([]string{"inspect", filepath.Join(modelDir, model), "-o", "json"}, dims...)...)
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, stderr)
	}
	var doc struct {
		Ops []struct{ Name string } `json:"ops"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatal(err)
	}
	mods := map[string]bool{}
	for _, op := range doc.Ops {
		parts := strings.Split(op.Name, "/")
		for i := 2; i < len(parts); i++ { // "", then one module per component
			mods[export.FQN(strings.Join(parts[:i], "/")+"/")] = true
		}
	}
	return mods
}

// python3 runs a Python one-liner on stdin, or skips the test when
// python3 is not on PATH.
func python3(t *testing.T, script string, stdin []byte) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not on PATH")
	}
	cmd := exec.Command(py, "-c", script)
	cmd.Stdin = strings.NewReader(string(stdin))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 %s: %v\n%s\n--- input:\n%s", script, err, out, stdin)
	}
	return string(out)
}

var splitKey = regexp.MustCompile(`(?m)^    "([^"]+)": SplitPoint\.BEGINNING,`)

// lmBlock is the number of the block an op of gen_models.py's LM is in.
var lmBlock = regexp.MustCompile(`^/blocks/blocks\.([0-9]+)/`)

// megatronSplits says whether Megatron-LM's arguments args place counts[s]
// transformer layers on stage s: an even split by default, the first and
// last stages' layers and the rest evenly, or a layout.
func megatronSplits(args map[string]string, counts []int) bool {
	n := len(counts)
	if layout, ok := args["--pipeline-model-parallel-layout"]; ok {
		stages := strings.Split(strings.Trim(layout, "EL"), "|")
		got := make([]int, len(stages))
		for i, st := range stages {
			got[i] = len(st)
		}
		return slices.Equal(got, counts)
	}
	total := 0
	for _, c := range counts {
		total += c
	}
	want := make([]int, n)
	rest, middle := total, n
	first, err1 := strconv.Atoi(args["--decoder-first-pipeline-num-layers"])
	last, err2 := strconv.Atoi(args["--decoder-last-pipeline-num-layers"])
	if err1 == nil {
		want[0], rest, middle = first, rest-first, middle-1
	}
	if err2 == nil {
		want[n-1], rest, middle = last, rest-last, middle-1
	}
	for i := range want {
		if (i > 0 || err1 != nil) && (i < n-1 || err2 != nil) {
			want[i] = rest / middle
		}
	}
	return slices.Equal(want, counts)
}

// TestExportRealPlans plans GPT-2 small and BERT-base as pipelines on four
// V100s and exports every target.
func TestExportRealPlans(t *testing.T) {
	lmModule := regexp.MustCompile(`^(tok|blocks\.([0-9]|1[01])|ln|head)$`) // gen_models.py's LM
	for _, m := range []struct {
		model string
		dims  []string
	}{
		{"gpt2_small.onnx", []string{"--dim", "batch=8"}},
		{"bert_base.onnx", []string{"--dim", "batch=16"}},
	} {
		t.Run(m.model, func(t *testing.T) {
			dir := t.TempDir()
			path, p := exportPlan(t, dir, m.model, "4xV100.yaml", append([]string{"--strategy", "pipeline"}, m.dims...)...)
			S := len(p.Stages)
			if S < 2 {
				t.Fatalf("the pipeline plan has %d stages", S)
			}
			mods := modelModules(t, m.model, m.dims...)
			stageFQN := func(s int) string { return export.FQN(p.Stages[s].FirstModule) }
			for _, target := range export.Names() {
				t.Run(target, func(t *testing.T) {
					out := filepath.Join(dir, target+".out")
					if target == "torch" {
						// Pipelines are torch-pipelining's.
						code, _, stderr := invoke(t, "export", path, "--to", target, "--out", out)
						if code != exitInvalid || !strings.Contains(stderr, "the torch-pipelining target") {
							t.Errorf("exit %d, stderr %q", code, stderr)
						}
						return
					}
					code, stdout, stderr := invoke(t, "export", path, "--to", target, "--out", out)
					if code != 0 || stdout != "" || stderr != "" {
						t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
					}
					data, err := os.ReadFile(out)
					if err != nil {
						t.Fatal(err)
					}
					// Without --out the same bytes go to stdout.
					if code, stdout, _ := invoke(t, "export", path, "--to", target); code != 0 || stdout != string(data) {
						t.Errorf("stdout differs from --out (exit %d)", code)
					}
					switch target {
					case "torch-pipelining":
						keys := splitKey.FindAllStringSubmatch(string(data), -1)
						if len(keys) != S-1 {
							t.Fatalf("%d split points for %d stages:\n%s", len(keys), S, data)
						}
						for i, k := range keys {
							if !mods[k[1]] || !lmModule.MatchString(k[1]) {
								t.Errorf("split point %q is no module of %s", k[1], m.model)
							}
							if k[1] != stageFQN(i+1) {
								t.Errorf("split point %d is %q, stage %d starts with %s", i, k[1], i+1, p.Stages[i+1].FirstModule)
							}
						}
						for _, want := range []string{"from torch.distributed.pipelining import SplitPoint\n", "n_microbatches = ", `schedule = "1F1B"`, "# model:    ", "# step:     "} {
							if !strings.Contains(string(data), want) {
								t.Errorf("no %q in\n%s", want, data)
							}
						}
						python3(t, "import ast,sys; ast.parse(sys.stdin.read())", data)
					case "deepspeed":
						var spec struct {
							NumStages int      `json:"num_stages"`
							Method    string   `json:"partition_method"`
							Parts     []int    `json:"parts"`
							Layers    []string `json:"layers"`
							Stages    []struct {
								FirstModule string   `json:"first_module"`
								LastModule  string   `json:"last_module"`
								Devices     []string `json:"devices"`
							} `json:"stages"`
						}
						if err := json.Unmarshal(data, &spec); err != nil {
							t.Fatal(err)
						}
						if spec.NumStages != S || len(spec.Parts) != S+1 || spec.Parts[0] != 0 || spec.Parts[S] != len(spec.Layers) || len(spec.Stages) != S {
							t.Fatalf("%d stages, parts %v, %d layers", spec.NumStages, spec.Parts, len(spec.Layers))
						}
						for i := 1; i <= S; i++ {
							if spec.Parts[i] <= spec.Parts[i-1] {
								t.Errorf("parts %v do not increase", spec.Parts)
							}
						}
						for _, l := range spec.Layers {
							if !mods[l] || !lmModule.MatchString(l) {
								t.Errorf("layer %q is no module of %s", l, m.model)
							}
						}
						if spec.Layers[0] != "tok" || spec.Layers[len(spec.Layers)-1] != "head" || len(spec.Layers) != 15 {
							t.Errorf("layers %v", spec.Layers)
						}
						for s, st := range spec.Stages {
							if st.FirstModule != spec.Layers[spec.Parts[s]] || st.LastModule != spec.Layers[spec.Parts[s+1]-1] ||
								s > 0 && st.FirstModule != stageFQN(s) || !slices.Equal(st.Devices, p.Stages[s].Devices) {
								t.Errorf("stage %d: %+v, parts %v", s, st, spec.Parts)
							}
						}
						if spec.Method != "uniform" && spec.Method != "parameters" {
							t.Errorf("partition_method %q", spec.Method)
						}
						python3(t, "import json,sys; json.load(sys.stdin)", data)
					case "megatron":
						world := 0
						for _, st := range p.Stages {
							world += len(st.Devices)
						}
						args := runtimetest.Megatron(t, "../../testdata/runtimes", data, world)
						if args["--pipeline-model-parallel-size"] != fmt.Sprint(S) || args["--num-layers"] != "12" || args["--global-batch-size"] != fmt.Sprint(p.Batch) {
							t.Errorf("arguments %v for %d stages of %s", args, S, m.model)
						}
						// The stages' blocks, as the plan cuts them.
						var counts []int
						for _, st := range p.Stages {
							lo, hi := -1, -1
							for _, op := range st.Ops {
								if b := lmBlock.FindStringSubmatch(op); b != nil {
									n, _ := strconv.Atoi(b[1])
									if lo < 0 || n < lo {
										lo = n
									}
									hi = max(hi, n)
								}
							}
							if lo < 0 {
								counts = append(counts, 0)
							} else {
								counts = append(counts, hi-lo+1)
							}
						}
						if !megatronSplits(args, counts) {
							t.Errorf("the stages hold %v blocks; Megatron-LM is told\n%s", counts, data)
						}
					case "tf-device-map":
						var devs map[string]string
						if err := json.Unmarshal(data, &devs); err != nil {
							t.Fatal(err)
						}
						if len(devs) != len(p.Ops) {
							t.Errorf("%d ops mapped, the plan has %d", len(devs), len(p.Ops))
						}
						for _, op := range p.Ops {
							want := "/job:worker/replica:0/task:0/device:GPU:" + strings.TrimPrefix(op.Device, "gpu")
							if devs[op.Name] != want {
								t.Fatalf("op %s on %s maps to %q, want %q", op.Name, op.Device, devs[op.Name], want)
							}
						}
					}
				})
			}
		})
	}
}

// TestExportLaunchTargets plans GPT-2 small with the tensor and dp
// strategies on 8xA100-2host and 4xV100 and checks the megatron and torch
// artefacts against Megatron-LM's and PyTorch's definitions
// (testdata/runtimes) and the torch tensor-parallel plan's modules
// against the model: each an nn.Linear of gen_models.py's LM (Block's
// qkv, proj, fc1, fc2; LM's head) that the model's op names enter.
func TestExportLaunchTargets(t *testing.T) {
	lmLinear := regexp.MustCompile(`^(blocks\.([0-9]|1[01])\.(qkv|proj|fc1|fc2)|head)$`)
	mods := modelModules(t, "gpt2_small.onnx", "--dim", "batch=8")
	for _, cluster := range []string{"8xA100-2host.yaml", "4xV100.yaml"} {
		for _, strategy := range []string{"tensor", "dp"} {
			t.Run(strings.TrimSuffix(cluster, ".yaml")+"/"+strategy, func(t *testing.T) {
				path, p := exportPlan(t, t.TempDir(), "gpt2_small.onnx", cluster, "--dim", "batch=8", "--strategy", strategy)
				st := p.Stages[0]
				if len(p.Stages) != 1 || strategy == "tensor" && st.TensorParallel < 2 {
					t.Fatalf("%d stages, tensor degree %d", len(p.Stages), st.TensorParallel)
				}
				tp := max(st.TensorParallel, 1)
				code, args, stderr := invoke(t, "export", path, "--to", "megatron")
				if code != 0 {
					t.Fatalf("megatron: exit %d: %s", code, stderr)
				}
				got := runtimetest.Megatron(t, "../../testdata/runtimes", []byte(args), len(st.Devices))
				if got["--tensor-model-parallel-size"] != fmt.Sprint(tp) || got["--micro-batch-size"] != fmt.Sprint(st.MicroBatchSize) || got["--global-batch-size"] != "8" {
					t.Errorf("megatron arguments %v for tensor %d, micro-batch %d", got, tp, st.MicroBatchSize)
				}
				code, py, stderr := invoke(t, "export", path, "--to", "torch")
				if code != 0 {
					t.Fatalf("torch: exit %d: %s", code, stderr)
				}
				python3(t, "import ast,sys; ast.parse(sys.stdin.read())", []byte(py))
				vars := runtimetest.TorchVars(t, []byte(py))
				runtimetest.Torch(t, "../../testdata/runtimes", vars)
				plan, _ := vars["tp_plan"].(map[string]any)
				for name := range plan {
					if !mods[name] || !lmLinear.MatchString(name) {
						t.Errorf("tp_plan names %q, no nn.Linear of gpt2_small", name)
					}
				}
				if strategy == "tensor" && len(plan) == 0 {
					t.Errorf("a tensor-parallel plan with an empty tp_plan:\n%s", py)
				}
			})
		}
	}
}

// TestExportErrors: plans a target cannot express, unknown targets and
// unreadable plans are exit 2 with one line saying what to do, and leave
// no file.
func TestExportErrors(t *testing.T) {
	dir := t.TempDir()
	opCuts, _ := exportPlan(t, dir, "gpt2_small.onnx", "4xV100.yaml", "--dim", "batch=8", "--strategy", "pipeline", "--op-cuts")
	single, _ := exportPlan(t, dir, "bert_base.onnx", "4xV100.yaml", "--dim", "batch=16", "--strategy", "single", "--mode", "infer")
	corrupt := filepath.Join(dir, "corrupt.json")
	data, _ := os.ReadFile(opCuts)
	os.WriteFile(corrupt, data[:len(data)/2], 0o644)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"single stage", []string{single, "--to", "torch-pipelining"}, []string{single + ": the plan has one stage", "--strategy pipeline"}},
		{"single stage, deepspeed", []string{single, "--to", "deepspeed"}, []string{single + ": the plan has one stage"}},
		{"op cuts", []string{opCuts, "--to", "torch-pipelining"}, []string{opCuts + ": stage 1 starts inside module blocks.", "plan without --op-cuts"}},
		{"op cuts, deepspeed", []string{opCuts, "--to", "deepspeed"}, []string{"starts inside module", "plan without --op-cuts"}},
		{"unknown target", []string{opCuts, "--to", "onnx"}, []string{`unknown export target "onnx"`, "deepspeed deepspeed-config hostfile megatron rank-map tf-device-map torch torch-pipelining"}},
		{"no target", []string{opCuts}, []string{"--to TARGET is required"}},
		{"corrupt plan", []string{corrupt, "--to", "deepspeed"}, []string{corrupt + ": not a valid JSON plan"}},
		{"missing plan", []string{filepath.Join(dir, "none.json"), "--to", "tf-device-map"}, []string{"none.json: cannot read the plan"}},
		{"the plan as output", []string{opCuts, "--to", "tf-device-map", "--out", opCuts}, []string{"writing it would destroy the input"}},
		{"bad template", []string{opCuts, "--to", "tf-device-map", "--device-template", "/gpu"}, []string{"--device-template"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, "out")
			args := append([]string{"export"}, tc.args...)
			if !slices.Contains(args, "--out") {
				args = append(args, "--out", out)
			}
			code, stdout, stderr := invoke(t, args...)
			if code != exitInvalid || stdout != "" || strings.Count(stderr, "\n") != 1 {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
			if _, err := os.Stat(out); err == nil {
				t.Error("a refused export wrote its file")
			}
		})
	}
	// A single-stage plan and one cut between ops export to TensorFlow.
	for _, path := range []string{single, opCuts} {
		if code, _, stderr := invoke(t, "export", path, "--to", "tf-device-map", "--out", filepath.Join(dir, "map.json")); code != 0 {
			t.Errorf("tf-device-map of %s: exit %d: %s", path, code, stderr)
		}
	}
}

// TestExportDocExample runs the examples of docs/export.md and checks the
// page shows what export writes: the whole torch-pipelining, megatron and
// deepspeed-config files, and the deepspeed, rank-map and torch documents
// but where the page cuts them short.
func TestExportDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/export.md")
	if err != nil {
		t.Fatal(err)
	}
	block := func(section, lang string) string {
		_, rest, ok := strings.Cut(string(doc), "\n## "+section+"\n")
		if !ok {
			t.Fatalf("docs/export.md has no %q section", section)
		}
		_, rest, ok = strings.Cut(rest, "```"+lang+"\n")
		if !ok {
			t.Fatalf("section %q has no %s block", section, lang)
		}
		body, _, _ := strings.Cut(rest, "```\n")
		return body
	}
	dir := t.TempDir()
	path, _ := exportPlan(t, dir, "gpt2_small.onnx", "4xV100.yaml", "--dim", "batch=8", "--strategy", "pipeline")
	shown := func(target string) string {
		code, stdout, stderr := invoke(t, "export", path, "--to", target)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		return strings.NewReplacer(path, "plan.json", "../../testdata/", "testdata/").Replace(stdout)
	}
	if got, want := shown("torch-pipelining"), block("torch-pipelining", "python"); got != want {
		t.Errorf("docs/export.md's torch-pipelining example is out of date; export writes:\n%s", got)
	}
	want, _, _ := strings.Cut(block("deepspeed", "json"), "    ...\n")
	if got := shown("deepspeed"); !strings.HasPrefix(got, want) {
		t.Errorf("docs/export.md's deepspeed example is out of date; export writes:\n%s", got)
	}
	// megatron: the pipeline plan, whole (its last stage holds no block:
	// a layout).
	if got, want := shown("megatron"), block("megatron", "text"); got != want {
		t.Errorf("docs/export.md's megatron example is out of date; export writes:\n%s", got)
	}
	// deepspeed-config: a data-parallel plan under ZeRO-2 and bf16, whole.
	path, _ = exportPlan(t, dir, "gpt2_small.onnx", "8xA100-2host.yaml", "--dim", "batch=32", "--strategy", "dp", "--precision", "amp-bf16", "--zero", "zero2")
	if got, want := shown("deepspeed-config"), block("deepspeed-config", "json"); got != want {
		t.Errorf("docs/export.md's deepspeed-config example is out of date; export writes:\n%s", got)
	}
	// rank-map: a tensor-parallel plan, the page leaving ranks 1-7 out.
	path, _ = exportPlan(t, dir, "gpt2_small.onnx", "8xA100-2host.yaml", "--dim", "batch=8", "--strategy", "tensor")
	head, tail, _ := strings.Cut(block("rank-map and hostfile", "json"), "    ...\n  ],\n")
	if got := shown("rank-map"); !strings.HasPrefix(got, head) || !strings.HasSuffix(got, tail) {
		t.Errorf("docs/export.md's rank-map example is out of date; export writes:\n%s", got)
	}
	// torch: the same tensor-parallel plan, the page leaving most of
	// tp_plan out.
	head, tail, _ = strings.Cut(block("torch", "python"), "    ...\n")
	if got := shown("torch"); !strings.HasPrefix(got, head) || !strings.HasSuffix(got, tail) {
		t.Errorf("docs/export.md's torch example is out of date; export writes:\n%s", got)
	}
}

// TestFQNRealModels checks export.FQN against torch.onnx's naming on every
// module path of the shared models: a module's component is the tail of
// its FQN (its last atom that is not a number and the numbers after it;
// the n-th call of a module called again adds _<n-1>), and its parent's
// FQN is a prefix of its own. That rules out naming a module by its last
// component (layers.0 for encoder.layers.0); that blocks.6, not
// blocks.blocks.6, is the module the names cannot say: TestFQN and
// TestExportRealPlans check it against the models' definitions.
func TestFQNRealModels(t *testing.T) {
	tail := func(fqn string) string {
		atoms := strings.Split(fqn, ".")
		i := len(atoms) - 1
		for i > 0 && strings.Trim(atoms[i], "0123456789") == "" {
			i--
		}
		return strings.Join(atoms[i:], ".")
	}
	repeat := regexp.MustCompile(`_[0-9]+$`)
	for _, m := range []struct {
		model string
		dims  []string
	}{
		{"gpt2_small.onnx", []string{"--dim", "batch=8"}}, {"bert_base.onnx", []string{"--dim", "batch=16"}},
		{"resnet50.onnx", nil}, {"inception_v3.onnx", nil}, {"mobilenet_v2.onnx", nil}, {"vgg16.onnx", nil},
		{"transformer.onnx", nil}, {"gnmt.onnx", nil},
	} {
		code, stdout, stderr := invoke(t, append([]string{"inspect", filepath.Join(modelDir, m.model), "-o", "json"}, m.dims...)...)
		if code != 0 {
			t.Fatalf("%s: inspect: exit %d: %s", m.model, code, stderr)
		}
		var doc struct {
			Ops []struct{ Name string } `json:"ops"`
		}
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
			t.Fatal(err)
		}
		paths := 0
		for _, op := range doc.Ops {
			parts := strings.Split(op.Name, "/")
			for i := 2; i < len(parts); i++ {
				path := strings.Join(parts[:i], "/") + "/"
				fqn, up := export.FQN(path), export.FQN(strings.Join(parts[:i-1], "/")+"/")
				c := parts[i-1]
				if r := repeat.FindString(c); r != "" && tail(fqn) != c {
					// The n-th call of a module: the suffix follows its tail.
					fqn, c = strings.TrimSuffix(fqn, r), strings.TrimSuffix(c, r)
				}
				if tail(fqn) != c || up != "" && !strings.HasPrefix(fqn, up+".") {
					t.Errorf("%s: %s is %q, whose tail is not %q or which is not in %q", m.model, path, fqn, c, up)
				}
				paths++
			}
		}
		if paths == 0 {
			t.Errorf("%s: no module paths", m.model)
		}
	}
}
