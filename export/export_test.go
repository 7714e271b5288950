package export

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/plan"
)

// TestFQN checks the rule on module paths of the shared models, against
// their modules' names in PyTorch (gen_models.py's LM and UnrolledLSTM,
// torchvision's resnet50, inception_v3 and mobilenet_v2, torch.nn's
// Transformer).
func TestFQN(t *testing.T) {
	for _, tc := range []struct{ path, fqn string }{
		{"/", ""},
		{"/tok/", "tok"},                          // gpt2_small, bert_base: LM.tok
		{"/blocks/blocks.6/", "blocks.6"},         // LM.blocks, an nn.Sequential
		{"/blocks/blocks.6/qkv/", "blocks.6.qkv"}, // Block.qkv
		{"/layer1/layer1.0/", "layer1.0"},         // resnet50
		{"/layer1/layer1.0/downsample/downsample.0/", "layer1.0.downsample.0"},
		{"/layer3/layer3.4/conv1/", "layer3.4.conv1"},
		{"/Mixed_5b/branch5x5_1/conv/", "Mixed_5b.branch5x5_1.conv"}, // inception_v3
		{"/features/features.0/features.0.0/", "features.0.0"},       // mobilenet_v2
		{"/features/features.1/conv/conv.0/conv.0.0/", "features.1.conv.0.0"},
		{"/features/features.2/conv/conv.1/", "features.2.conv.1"},
		{"/encoder/layers.0/", "encoder.layers.0"}, // nn.Transformer: a ModuleList, never called
		{"/encoder/layers.0/self_attn/", "encoder.layers.0.self_attn"},
		{"/decoder/norm/", "decoder.norm"},
		{"/enc.0/", "enc.0"},                          // gnmt: UnrolledLSTM.enc, a ModuleList at the root
		{"/classifier/classifier.6/", "classifier.6"}, // vgg16
		{"/0/0.1/", "0.1"},           // an nn.Sequential model of nn.Sequentials
		{"/attn/attn/", "attn.attn"}, // a module named as its parent
	} {
		if got := FQN(tc.path); got != tc.fqn {
			t.Errorf("FQN(%q) = %q, want %q", tc.path, got, tc.fqn)
		}
	}
}

// TestRepeatedCall tells a module's repeated calls (resnet's relu_1)
// from modules whose own name ends in _<n> (inception's branch5x5_1).
func TestRepeatedCall(t *testing.T) {
	p := &plan.Plan{}
	for _, n := range []string{"/layer1/layer1.0/relu/Relu", "/layer1/layer1.0/relu_1/Relu", "/layer1/layer1.0/relu_2/Relu",
		"/Mixed_5b/branch5x5_1/conv/Conv", "/Mixed_5b/branch5x5_2/conv/Conv", "/emb/Gather", "/emb_1/Gather", "/head/MatMul"} {
		p.Ops = append(p.Ops, plan.Op{Name: n})
	}
	idx := newModuleIndex(p)
	for _, tc := range []struct {
		path string
		want string // part of the reason; "" for none
	}{
		{"/layer1/layer1.0/relu_1/", "repeated call of module layer1.0.relu"},
		{"/layer1/layer1.0/relu/", "called 3 times"},
		{"/emb/", "called 2 times"},
		{"/emb_1/", "repeated call of module emb"},
		{"/Mixed_5b/branch5x5_1/", ""},
		{"/Mixed_5b/branch5x5_2/", ""},
		{"/layer1/layer1.0/", ""},
		{"/head/", ""},
	} {
		got := idx.repeatedCall(tc.path)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("repeatedCall(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

// TestUniformParts checks both DeepSpeed versions of partition_uniform.
func TestUniformParts(t *testing.T) {
	for _, tc := range []struct {
		n, s            int
		older, residual []int
	}{
		{12, 4, []int{0, 3, 6, 9, 12}, []int{0, 3, 6, 9, 12}},
		{14, 4, []int{0, 3, 6, 9, 14}, []int{0, 4, 8, 11, 14}},
		{3, 4, []int{0, 1, 2, 3, 3}, []int{0, 1, 2, 3, 3}},
	} {
		if got := uniformParts(tc.n, tc.s, false); !slices.Equal(got, tc.older) {
			t.Errorf("uniformParts(%d, %d, older) = %v, want %v", tc.n, tc.s, got, tc.older)
		}
		if got := uniformParts(tc.n, tc.s, true); !slices.Equal(got, tc.residual) {
			t.Errorf("uniformParts(%d, %d, residual) = %v, want %v", tc.n, tc.s, got, tc.residual)
		}
	}
}

func TestPyString(t *testing.T) {
	for in, want := range map[string]string{
		"blocks.4":  `"blocks.4"`,
		`a"b\c`:     `"a\"b\\c"`,
		"x\ny\x00":  `"x\ny\x00"`,
		"\xff":      `"\xff"`,
		"ünïcode":   `"ünïcode"`,
		"\u2028end": `"\U00002028end"`,
	} {
		if got := pyString(in); got != want {
			t.Errorf("pyString(%q) = %s, want %s", in, got, want)
		}
	}
}

// stagePlan is a small pipeline plan: four blocks of an LM, two stages,
// cut where cut says (the index of stage 1's first op in ops).
func stagePlan(ops []string, cut int) *plan.Plan {
	p := &plan.Plan{Model: "lm.onnx", Cluster: "two", Strategy: "pipeline:exact", Mode: "train", Schedule: "gpipe", MicroBatches: 4,
		Devices: []plan.Device{{Name: "gpu0", Type: "V100", Host: "h0"}, {Name: "gpu1", Type: "V100", Host: "h0"}, {Name: "cpu", Type: "Xeon-CPU", Host: "h1"}}}
	p.Stages = []plan.Stage{{Index: 0, Devices: []string{"gpu0"}, Replicas: 1}, {Index: 1, Devices: []string{"gpu1"}, Replicas: 1}}
	for i, n := range ops {
		s := 0
		if i >= cut {
			s = 1
		}
		st := &p.Stages[s]
		st.Ops = append(st.Ops, n)
		dev := st.Devices[0]
		p.Ops = append(p.Ops, plan.Op{Name: n, Type: "MatMul", Phase: "forward", Device: dev, Stage: &s})
		// The module at the cut level: a block, or a top-level module.
		path := modulePath(n)
		if parts := strings.SplitAfter(path, "/"); strings.HasPrefix(path, "/blocks/") {
			path = strings.Join(parts[:3], "")
		} else if len(parts) > 2 {
			path = strings.Join(parts[:2], "")
		}
		if st.FirstOp == "" {
			st.FirstOp, st.FirstModule = n, path
		}
		st.LastOp, st.LastModule, st.ModulePrefix = n, path, "/"
	}
	return p
}

var lmOps = []string{"/tok/Gather", "/blocks/blocks.0/qkv/MatMul", "/blocks/blocks.0/fc2/MatMul", "/blocks/blocks.1/qkv/MatMul",
	"/blocks/blocks.1/fc2/MatMul", "/blocks/blocks.2/qkv/MatMul", "/blocks/blocks.2/fc2/MatMul", "/head/MatMul"}

// TestExportSmallPlan exports a plan cut between blocks.1 and blocks.2.
func TestExportSmallPlan(t *testing.T) {
	p := stagePlan(lmOps, 5)
	p.Stages[0].LastModule, p.Stages[1].FirstModule = "/blocks/blocks.1/", "/blocks/blocks.2/"
	py, err := Render("torch-pipelining", p, Options{Source: "p.json"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"from torch.distributed.pipelining import SplitPoint\n", "n_microbatches = 4\n", `schedule = "GPipe"`,
		"ScheduleGPipe", "split_spec = {\n    \"blocks.2\": SplitPoint.BEGINNING,", "# plan:     p.json"} {
		if !strings.Contains(string(py), want) {
			t.Errorf("torch-pipelining artefact lacks %q:\n%s", want, py)
		}
	}
	parsePython(t, py)
	ds, err := Render("deepspeed", p, Options{Source: "p.json"})
	if err != nil {
		t.Fatal(err)
	}
	var spec deepSpeedSpec
	if err := json.Unmarshal(ds, &spec); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(spec.Layers, []string{"tok", "blocks.0", "blocks.1", "blocks.2", "head"}) || !slices.Equal(spec.Parts, []int{0, 3, 5}) ||
		spec.NumStages != 2 || spec.PartitionMethod != "parameters" || spec.Stages[1].FirstModule != "blocks.2" || spec.Stages[1].LastModule != "head" ||
		spec.ActivationCheckpointInterval != 0 || strings.Contains(string(ds), "checkpoint") || strings.Contains(string(ds), "recompute") {
		t.Errorf("deepspeed artefact:\n%s", ds)
	}
	// Stages that recompute activations checkpoint every layer.
	p.Stages[1].Recompute = true
	if ds, _ = Render("deepspeed", p, Options{}); json.Unmarshal(ds, &spec) != nil || spec.ActivationCheckpointInterval != 0 || !spec.Stages[1].Recompute {
		t.Errorf("one stage recomputing:\n%s", ds)
	}
	p.Stages[0].Recompute = true
	spec = deepSpeedSpec{}
	if ds, _ = Render("deepspeed", p, Options{}); json.Unmarshal(ds, &spec) != nil || spec.ActivationCheckpointInterval != 1 {
		t.Errorf("every stage recomputing:\n%s", ds)
	}
	p.Stages[0].Recompute, p.Stages[1].Recompute = false, false
	// The batch: DeepSpeed's train_batch_size and, when the stages agree,
	// train_micro_batch_size_per_gpu; each stage's size in any case.
	if spec.TrainBatchSize != 0 || spec.TrainMicroBatchSizePerGPU != 0 {
		t.Errorf("batch unknown, yet:\n%s", ds)
	}
	p.Batch, p.Stages[0].MicroBatchSize, p.Stages[1].MicroBatchSize = 32, 8, 8
	spec = deepSpeedSpec{}
	if ds, _ = Render("deepspeed", p, Options{}); json.Unmarshal(ds, &spec) != nil || spec.TrainBatchSize != 32 || spec.TrainMicroBatchSizePerGPU != 8 || spec.Stages[1].MicroBatchSize != 8 {
		t.Errorf("batch 32 in 4 micro-batches of 8:\n%s", ds)
	}
	p.Stages[1].MicroBatchSize = 4
	spec = deepSpeedSpec{}
	if ds, _ = Render("deepspeed", p, Options{}); json.Unmarshal(ds, &spec) != nil || spec.TrainMicroBatchSizePerGPU != 0 || spec.Stages[1].MicroBatchSize != 4 {
		t.Errorf("stages of different micro-batch sizes:\n%s", ds)
	}
	p.Batch, p.Stages[0].MicroBatchSize, p.Stages[1].MicroBatchSize = 0, 0, 0
	tfm, err := Render("tf-device-map", p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	if err := json.Unmarshal(tfm, &m); err != nil {
		t.Fatal(err)
	}
	if len(m) != len(lmOps) || m["/tok/Gather"] != "/job:worker/replica:0/task:0/device:GPU:0" || m["/head/MatMul"] != "/job:worker/replica:0/task:0/device:GPU:1" {
		t.Errorf("tf-device-map:\n%s", tfm)
	}
	// The CPU on the second host is task 1's CPU 0.
	strs, err := DeviceStrings(p, "")
	if err != nil || strs["cpu"] != "/job:worker/replica:0/task:1/device:CPU:0" {
		t.Errorf("device strings %v, %v", strs, err)
	}
}

// TestExportErrors checks that every plan a target cannot express is an
// *Error naming the plan file and saying what to do.
func TestExportErrors(t *testing.T) {
	inside := stagePlan(lmOps, 4) // blocks.1 is cut in two
	noModules := stagePlan([]string{"Gather_0", "MatMul_1", "MatMul_2"}, 1)
	for i := range noModules.Stages {
		noModules.Stages[i].ModulePrefix, noModules.Stages[i].FirstModule, noModules.Stages[i].LastModule = "", "", ""
	}
	rootStart := stagePlan([]string{"/tok/Gather", "/blocks/blocks.0/MatMul", "/Add", "/head/MatMul"}, 2)
	rootStart.Stages[1].FirstModule = ""
	single := stagePlan(lmOps, 0)
	single.Stages = single.Stages[1:]
	single.Stages[0].Index = 0
	repeated := stagePlan([]string{"/emb/Gather", "/blocks/blocks.0/MatMul", "/emb_1/Gather", "/head/MatMul"}, 2)
	for _, target := range []string{"torch-pipelining", "deepspeed"} {
		for _, tc := range []struct {
			name string
			p    *plan.Plan
			kind Kind
			want []string
		}{
			{"single stage", single, OneStage, []string{"p.json: the plan has one stage", "plan with a pipeline strategy"}},
			{"op cuts", inside, OpCuts, []string{"p.json: stage 1 starts inside module blocks.1 (/blocks/blocks.1/)", "replan with stages cut at module boundaries"}},
			{"no module paths", noModules, NoModules, []string{"p.json: stage 0 (first op Gather_0) has no module prefix", "export to tf-device-map"}},
			{"stage starts at a root op", rootStart, OpCuts, []string{"p.json: stage 1 starts at op /Add, which is in no module", "replan with stages cut at module boundaries"}},
			{"repeated call", repeated, Invalid, []string{"module emb is called 2 times"}},
		} {
			t.Run(target+"/"+tc.name, func(t *testing.T) {
				_, err := Render(target, tc.p, Options{Source: "p.json"})
				var e *Error
				if !errors.As(err, &e) || e.Kind != tc.kind {
					t.Fatalf("got %#v, want an *Error of kind %d", err, tc.kind)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				if !strings.Contains(err.Error(), target) && tc.name != "single stage" {
					t.Errorf("error %q does not name the target", err)
				}
			})
		}
	}
	// tf-device-map takes a single-stage plan and one cut between ops.
	for _, p := range []*plan.Plan{single, inside, noModules} {
		if _, err := Render("tf-device-map", p, Options{}); err != nil {
			t.Errorf("tf-device-map: %v", err)
		}
	}
	if _, err := Render("tf-device-map", single, Options{DeviceTemplate: "/device:GPU:0"}); err == nil {
		t.Error("a template without {index} or {name} was taken")
	}
	// A tensor-parallel plan has no device per op.
	split := stagePlan(lmOps, 0)
	split.TensorParallel = 2
	if _, err := Render("tf-device-map", split, Options{Source: "p.json"}); err == nil || !strings.Contains(err.Error(), "tensor-parallel groups of 2") {
		t.Errorf("tf-device-map of a tensor-parallel plan: %v", err)
	}
}

// TestUnknownTargetAndBadFiles: an unknown target lists the targets, an
// unreadable or corrupt plan file is an *Error naming it.
func TestUnknownTargetAndBadFiles(t *testing.T) {
	_, err := New("onnx-runtime")
	var e *Error
	if !errors.As(err, &e) || !strings.Contains(err.Error(), "deepspeed deepspeed-config hostfile megatron rank-map tf-device-map torch torch-pipelining") {
		t.Errorf("unknown target: %v", err)
	}
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.json")
	os.WriteFile(corrupt, []byte(`{"model": "m.onnx", "devices": [`), 0o644)
	truncated := filepath.Join(dir, "truncated.yaml")
	os.WriteFile(truncated, []byte("model: m.onnx\ndevices:\n  - {name: gpu0, type: V100-16GB\n"), 0o644)
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.json"), "missing.json: cannot read the plan"},
		{corrupt, "corrupt.json: not a valid JSON plan"},
		{truncated, "truncated.yaml: not a valid plan"},
		{dir, "cannot read the plan"},
	} {
		_, err := File("deepspeed", tc.path, Options{})
		if !errors.As(err, &e) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an *Error with %q", tc.path, err, tc.want)
		}
	}
}

// parsePython parses src with python3's ast module, or skips the check
// when python3 is not on PATH.
func parsePython(t *testing.T, src []byte) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Log("python3 not on PATH: the artefact is not parsed")
		return
	}
	cmd := exec.Command(py, "-c", "import ast,sys; ast.parse(sys.stdin.read())")
	cmd.Stdin = strings.NewReader(string(src))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("python3 cannot parse the artefact: %v\n%s\n%s", err, out, src)
	}
}
