package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/export"
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
		{"unknown target", []string{opCuts, "--to", "onnx"}, []string{`unknown export target "onnx"`, "deepspeed deepspeed-config hostfile rank-map tf-device-map torch-pipelining"}},
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

// TestExportDocExample runs the example of docs/export.md and checks the
// page shows what export writes: the whole torch-pipelining file, and the
// deepspeed document up to where the page cuts it short.
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
