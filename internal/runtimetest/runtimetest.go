// Package runtimetest checks launch artefacts of package export against
// the runtimes' own definitions, kept as test data with their source and
// version in testdata/runtimes: Megatron-LM's arguments and constraints,
// PyTorch's sharding strategies, parallel styles and torchrun arguments.
// Package export's tests and the command's tests share it.
package runtimetest

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
)

// Styles maps the names a torch artefact's tp_plan gives the
// torch.distributed.tensor.parallel styles to their classes.
var Styles = map[string]string{"colwise": "ColwiseParallel", "rowwise": "RowwiseParallel"}

// megatronDefinitions are Megatron-LM's arguments and constraints, kept
// as test data with their source.
type megatronDefinitions struct {
	Source      string              `json:"source"`
	Arguments   map[string]string   `json:"arguments"`
	Choices     map[string][]string `json:"choices"`
	LayoutChars map[string]string   `json:"layout_chars"`
}

// safeToken is what a word of the arguments may hold, so that $(grep -v
// '^#' FILE) splits it into the same words and expands no pattern.
var safeToken = regexp.MustCompile(`^[A-Za-z0-9_.|-]+$`)

// Megatron checks a megatron artefact against Megatron-LM's
// definitions: every argument known, of its type, once; and Megatron-LM's
// constraints for a world of world ranks: world size = tensor x pipeline
// x data, the global batch divisible by micro-batch x data, the layers
// divisible by the pipeline stages (or an uneven split or layout Megatron
// accepts). It returns the arguments, flags mapped to "".
func Megatron(t testing.TB, dir string, doc []byte, world int) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "megatron-lm.json"))
	if err != nil {
		t.Fatal(err)
	}
	var defs megatronDefinitions
	if err := json.Unmarshal(raw, &defs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(doc), "\n"), "\n")
	if !strings.HasPrefix(lines[0], "# Megatron-LM arguments") {
		t.Errorf("no header:\n%s", doc)
	}
	args := map[string]string{}
	header := true
	for _, line := range lines {
		if strings.HasPrefix(line, "#") {
			if !header {
				t.Errorf("comment %q after the arguments", line)
			}
			continue
		}
		header = false
		f := strings.Fields(line)
		if len(f) == 0 || len(f) > 2 {
			t.Errorf("line %q is not one --flag [value]", line)
			continue
		}
		for _, w := range f {
			if !safeToken.MatchString(w) {
				t.Errorf("word %q would not pass through $(grep -v '^#' FILE) as itself", w)
			}
		}
		kind, ok := defs.Arguments[f[0]]
		if !ok {
			t.Errorf("%s: no such Megatron-LM argument", f[0])
			continue
		}
		if _, dup := args[f[0]]; dup {
			t.Errorf("%s given twice", f[0])
		}
		v := ""
		if len(f) == 2 {
			v = f[1]
		}
		args[f[0]] = v
		switch kind {
		case "flag":
			if v != "" {
				t.Errorf("%s takes no value, got %q", f[0], v)
			}
		case "int":
			if n, err := strconv.Atoi(v); err != nil || n <= 0 {
				t.Errorf("%s %q: Megatron-LM takes a positive int here", f[0], v)
			}
		case "choice":
			if !slices.Contains(defs.Choices[f[0]], v) {
				t.Errorf("%s %q: not among %v", f[0], v, defs.Choices[f[0]])
			}
		case "str":
			if v == "" {
				t.Errorf("%s needs a value", f[0])
			}
		}
	}
	num := func(flag string, def int) int {
		if v, ok := args[flag]; ok {
			n, _ := strconv.Atoi(v)
			return n
		}
		return def
	}
	tp, pp := num("--tensor-model-parallel-size", 1), num("--pipeline-model-parallel-size", 1)
	if world%(tp*pp) != 0 {
		t.Fatalf("world size %d is not divisible by tensor %d x pipeline %d", world, tp, pp)
	}
	dp := world / (tp * pp)
	mbs, gbs := num("--micro-batch-size", 0), num("--global-batch-size", 0)
	if mbs <= 0 || gbs%(mbs*dp) != 0 {
		t.Errorf("global batch %d is not divisible by micro-batch %d x data-parallel %d", gbs, mbs, dp)
	}
	layers := num("--num-layers", 0)
	first, hasFirst := args["--decoder-first-pipeline-num-layers"]
	last, hasLast := args["--decoder-last-pipeline-num-layers"]
	layout, hasLayout := args["--pipeline-model-parallel-layout"]
	switch {
	case hasLayout:
		if hasFirst || hasLast {
			t.Error("a layout with --decoder-first/last-pipeline-num-layers")
		}
		stages := strings.Split(layout, "|")
		if len(stages)%pp != 0 || len(stages) != pp {
			t.Errorf("layout %q has %d stages for pipeline size %d (no virtual stages)", layout, len(stages), pp)
		}
		for _, c := range strings.ReplaceAll(layout, "|", "") {
			if _, ok := defs.LayoutChars[string(c)]; !ok {
				t.Errorf("layout %q: %q is no layer character", layout, c)
			}
		}
		if !strings.HasPrefix(layout, "E") || !strings.HasSuffix(layout, "L") || strings.Count(layout, "E") != 1 || strings.Count(layout, "L") != 1 {
			t.Errorf("layout %q: the embedding must come first and the loss last, once each", layout)
		}
		if strings.Count(layout, "t") != layers {
			t.Errorf("layout %q has %d decoder layers, --num-layers %d", layout, strings.Count(layout, "t"), layers)
		}
	case hasFirst || hasLast:
		rest, stages := layers, pp
		for _, v := range []string{first, last} {
			if v != "" {
				n, _ := strconv.Atoi(v)
				rest -= n
				stages--
			}
		}
		if stages > 0 && rest%stages != 0 || rest < 0 {
			t.Errorf("%d layers left for %d middle stages", rest, stages)
		}
	case layers > 0 && layers%pp != 0:
		t.Errorf("--num-layers %d is not divisible by the pipeline size %d", layers, pp)
	}
	_, bf := args["--bf16"]
	_, fp := args["--fp16"]
	if bf && fp {
		t.Error("--bf16 and --fp16")
	}
	if _, ok := args["--use-megatron-fsdp"]; ok {
		if args["--ckpt-format"] != "fsdp_dtensor" {
			t.Error("Megatron-FSDP without --ckpt-format fsdp_dtensor")
		}
		if _, ok := args["--use-distributed-optimizer"]; ok {
			t.Error("Megatron-FSDP with the distributed optimizer")
		}
	}
	if g, ok := args["--recompute-granularity"]; ok && g == "full" && args["--recompute-method"] == "" {
		t.Error("full recomputation without a method")
	}
	if _, ok := args["--sequence-parallel"]; ok {
		t.Error("--sequence-parallel written, but opplace does not model it")
	}
	return args
}

// torchDefinitions are PyTorch's names the torch target writes, kept as
// test data with their source.
type torchDefinitions struct {
	ShardingStrategies []string          `json:"sharding_strategies"`
	ParallelStyles     []string          `json:"parallel_styles"`
	TorchrunArguments  map[string]string `json:"torchrun_arguments"`
	AutocastDtypes     []string          `json:"autocast_dtypes"`
}

// TorchVars runs a torch artefact in python3 (it imports nothing) and
// returns its variables; nil, the check skipped, when python3 is not on
// PATH.
func TorchVars(t testing.TB, src []byte) map[string]any {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Log("python3 not on PATH: the artefact is not run")
		return nil
	}
	cmd := exec.Command(py, "-c", "import json,sys; g={}; exec(sys.stdin.read(), g); print(json.dumps({k: v for k, v in g.items() if not k.startswith('__')}))")
	cmd.Stdin = strings.NewReader(string(src))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 cannot run the artefact: %v\n%s", err, src)
	}
	var vars map[string]any
	if err := json.Unmarshal(out, &vars); err != nil {
		t.Fatal(err)
	}
	return vars
}

// Torch checks a torch artefact's variables against PyTorch's
// definitions and against each other: the world is data x tensor ranks,
// the hosts' processes add up to it, the batch is micro-batch x
// accumulation x data, the torchrun commands take torchrun's arguments,
// the FSDP strategy and parallel styles are torch's.
func Torch(t testing.TB, dir string, vars map[string]any) {
	t.Helper()
	if vars == nil {
		return
	}
	raw, err := os.ReadFile(filepath.Join(dir, "torch.json"))
	if err != nil {
		t.Fatal(err)
	}
	var defs torchDefinitions
	if err := json.Unmarshal(raw, &defs); err != nil {
		t.Fatal(err)
	}
	n := func(k string) int { f, _ := vars[k].(float64); return int(f) }
	world, dp, tp := n("world_size"), n("data_parallel_size"), n("tensor_parallel_size")
	if world != dp*tp || world == 0 {
		t.Errorf("world_size %d != data %d x tensor %d", world, dp, tp)
	}
	if n("global_batch_size") != n("micro_batch_size")*n("gradient_accumulation_steps")*dp {
		t.Errorf("global_batch_size %d != %d x %d x %d", n("global_batch_size"), n("micro_batch_size"), n("gradient_accumulation_steps"), dp)
	}
	procs := 0
	hosts, _ := vars["hosts"].([]any)
	cmds, _ := vars["torchrun"].(map[string]any)
	for i, h := range hosts {
		host := h.(map[string]any)
		procs += int(host["nproc_per_node"].(float64))
		cmd, _ := cmds[host["host"].(string)].(string)
		f := strings.Fields(cmd)
		if len(f) > 0 && strings.HasPrefix(f[0], "CUDA_VISIBLE_DEVICES=") {
			f = f[1:]
		}
		if len(f) < 2 || f[0] != "torchrun" || f[len(f)-1] != "train.py" {
			t.Errorf("torchrun command %q", cmd)
			continue
		}
		for j := 1; j < len(f)-1; j += 2 {
			if _, ok := defs.TorchrunArguments[f[j]]; !ok {
				t.Errorf("%q: %s is no torchrun argument", cmd, f[j])
			}
		}
		want := fmt.Sprintf("--node-rank %d --nproc-per-node %d", i, int(host["nproc_per_node"].(float64)))
		if !strings.Contains(cmd, want) {
			t.Errorf("%q lacks %q", cmd, want)
		}
	}
	if procs != world {
		t.Errorf("the hosts run %d processes, world_size %d", procs, world)
	}
	mesh, _ := vars["mesh"].([]any)
	seen := map[int]bool{}
	for _, row := range mesh {
		if len(row.([]any)) != tp {
			t.Errorf("mesh row %v is no tensor-parallel group of %d", row, tp)
		}
		for _, r := range row.([]any) {
			seen[int(r.(float64))] = true
		}
	}
	if len(mesh) != dp || len(seen) != world {
		t.Errorf("mesh %v is not %d x %d ranks", mesh, dp, tp)
	}
	if s, ok := vars["fsdp_sharding_strategy"].(string); ok && !slices.Contains(defs.ShardingStrategies, s) {
		t.Errorf("fsdp_sharding_strategy %q is no torch ShardingStrategy", s)
	}
	if s, ok := vars["autocast_dtype"].(string); ok && !slices.Contains(defs.AutocastDtypes, s) {
		t.Errorf("autocast_dtype %q", s)
	}
	plan, _ := vars["tp_plan"].(map[string]any)
	for name, style := range plan {
		class, ok := Styles[style.(string)]
		if !ok || !slices.Contains(defs.ParallelStyles, class) {
			t.Errorf("tp_plan[%q] = %q: no torch parallel style", name, style)
		}
	}
	if (len(plan) > 0) != (tp > 1) {
		t.Errorf("tp_plan of %d modules with tensor_parallel_size %d", len(plan), tp)
	}
}
