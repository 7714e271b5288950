package export

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/internal/runtimetest"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/plan"
)

// TestFusesAttention: the exports read from a plan's runtime name what
// pipeline.Runtimes says of it.
func TestFusesAttention(t *testing.T) {
	for _, rt := range pipeline.Runtimes {
		if got := fusesAttention(rt.Name); got != rt.FusedAttention {
			t.Errorf("runtime %s: fusesAttention %v, pipeline.Runtimes %v", rt.Name, got, rt.FusedAttention)
		}
	}
	if fusesAttention("") || fusesAttention(pipeline.RuntimeAuto) {
		t.Error("the default runtime runs attention as the model writes it")
	}
}

// blockPlan is a training plan of an LM (tok, blocks.0 .., ln, head)
// whose stage s holds counts[s] blocks, each stage on replicas devices of
// four-GPU hosts: tok goes with stage 0, ln and head with the last.
func blockPlan(counts []int, replicas int) *plan.Plan {
	group := make([]int, len(counts))
	reps := make([]int, len(counts))
	for i := range counts {
		group[i], reps[i] = 1, replicas
	}
	p := launchPlan(int64(8*replicas), 8, reps, group, false)
	p.Ops = nil
	if len(counts) > 1 {
		p.Schedule = "1f1b"
	}
	next := 0
	for s, n := range counts {
		st := &p.Stages[s]
		var names []string
		if s == 0 {
			names = append(names, "/tok/Gather")
		}
		for range n {
			names = append(names, fmt.Sprintf("/blocks/blocks.%d/qkv/MatMul", next), fmt.Sprintf("/blocks/blocks.%d/Softmax", next), fmt.Sprintf("/blocks/blocks.%d/fc2/MatMul", next))
			next++
		}
		if s == len(counts)-1 {
			names = append(names, "/ln/LayerNormalization", "/head/MatMul")
		}
		for _, name := range names {
			stage := s
			typ := "MatMul"
			if strings.HasSuffix(name, "/Softmax") {
				typ = "Softmax"
			}
			op := plan.Op{Name: name, Type: typ, Phase: "forward", Device: st.Devices[0]}
			if len(counts) > 1 {
				op.Stage = &stage
			}
			p.Ops = append(p.Ops, op)
			st.Ops = append(st.Ops, name)
		}
		module := func(name string) string {
			if strings.HasPrefix(name, "/blocks/") {
				return strings.Join(strings.SplitAfter(name, "/")[:3], "")
			}
			return strings.Join(strings.SplitAfter(name, "/")[:2], "")
		}
		st.FirstOp, st.LastOp = names[0], names[len(names)-1]
		st.FirstModule, st.LastModule, st.ModulePrefix = module(st.FirstOp), module(st.LastOp), "/"
	}
	return p
}

func TestMegatron(t *testing.T) {
	for _, tc := range []struct {
		name  string
		p     *plan.Plan
		edit  func(p *plan.Plan)
		world int
		want  map[string]string // arguments and values ("" for a flag); "-" for absent
		say   []string          // in the header
	}{
		{"data parallel, zero1, bf16", launchPlan(64, 4, []int{8}, []int{1}, false), func(p *plan.Plan) {
			p.Precision, p.Stages[0].Sharding = "amp-bf16", "zero1"
			p.AllReduces = []plan.AllReduce{{Kind: "all-reduce", Bytes: 100 << 20}, {Kind: "all-reduce", Bytes: 100 << 20}, {Kind: "all-reduce", Bytes: 1 << 20}}
		}, 8, map[string]string{"--tensor-model-parallel-size": "1", "--pipeline-model-parallel-size": "1", "--micro-batch-size": "2", "--global-batch-size": "64",
			"--use-distributed-optimizer": "", "--bf16": "", "--ddp-bucket-size": fmt.Sprint(100 << 20 / 4), "--overlap-grad-reduce": "", "--fp16": "-", "--num-layers": "-"},
			[]string{"ranks:    8 = tensor 1 x pipeline 1 x data 8", "# step:     12.5 ms predicted", "# plan:     p.json (strategy auto:test", "optimizer state"}},
		{"data parallel, zero2, fp16", launchPlan(16, 1, []int{4}, []int{1}, false), func(p *plan.Plan) { p.Precision, p.Stages[0].Sharding = "amp-fp16", "zero2" },
			4, map[string]string{"--use-megatron-fsdp": "", "--data-parallel-sharding-strategy": "optim_grads", "--ckpt-format": "fsdp_dtensor", "--fp16": "", "--use-distributed-optimizer": "-"},
			[]string{"ZeRO-2:   Megatron-FSDP's optim_grads"}},
		{"data parallel, zero3, bf16", launchPlan(16, 2, []int{4}, []int{1}, false), func(p *plan.Plan) { p.Precision, p.Stages[0].Sharding = "amp-bf16", "zero3" },
			4, map[string]string{"--use-megatron-fsdp": "", "--data-parallel-sharding-strategy": "optim_grads_params", "--ckpt-format": "fsdp_dtensor", "--bf16": "",
				"--use-distributed-optimizer": "-", "--micro-batch-size": "2", "--global-batch-size": "16"},
			[]string{"ZeRO-3:   Megatron-FSDP's optim_grads_params"}},
		{"fused attention", launchPlan(16, 1, []int{4}, []int{1}, false), func(p *plan.Plan) { p.Runtime = "compile" },
			4, map[string]string{"--tensor-model-parallel-size": "1"}, []string{"runtime:  compile: the plan runs each attention core as one fused kernel"}},
		{"attention written out", launchPlan(16, 1, []int{4}, []int{1}, false), func(p *plan.Plan) { p.Runtime = "eager" },
			4, map[string]string{"--tensor-model-parallel-size": "1"}, []string{"runtime:  eager: the plan runs attention as the model writes it"}},
		{"tensor x data", launchPlan(16, 2, []int{2}, []int{4}, true), func(p *plan.Plan) {
			p.Ops = append(p.Ops, plan.Op{Name: "/blocks/blocks.0/fc1/MatMul", Type: "MatMul", Phase: "forward", Shard: "tokens"},
				plan.Op{Name: "blocks.0.fc1.weight/adam", Phase: "update"})
		}, 8, map[string]string{"--tensor-model-parallel-size": "4", "--pipeline-model-parallel-size": "1", "--micro-batch-size": "4", "--global-batch-size": "16"},
			[]string{"CUDA_DEVICE_MAX_CONNECTIONS=1", "1 by tokens", "blocks.0.fc1 by tokens", "not written: --sequence-parallel"}},
		{"even pipeline, recompute", blockPlan([]int{3, 3, 3, 3}, 2), func(p *plan.Plan) {
			for i := range p.Stages {
				p.Stages[i].Recompute = true
			}
		}, 8, map[string]string{"--pipeline-model-parallel-size": "4", "--num-layers": "12", "--recompute-granularity": "full", "--recompute-method": "uniform",
			"--recompute-num-layers": "1", "--pipeline-model-parallel-layout": "-", "--decoder-first-pipeline-num-layers": "-", "--micro-batch-size": "1", "--global-batch-size": "16"},
			[]string{"per stage 3, 3, 3, 3"}},
		{"first stage lighter", blockPlan([]int{2, 4, 4, 2}, 1), nil, 4,
			map[string]string{"--decoder-first-pipeline-num-layers": "2", "--decoder-last-pipeline-num-layers": "2", "--num-layers": "12"}, nil},
		{"two stages", blockPlan([]int{5, 7}, 1), nil, 2,
			map[string]string{"--decoder-first-pipeline-num-layers": "5", "--decoder-last-pipeline-num-layers": "-"}, nil},
		{"head alone", blockPlan([]int{4, 4, 4, 0}, 1), nil, 4,
			map[string]string{"--pipeline-model-parallel-layout": "Etttt|tttt|tttt|L", "--decoder-first-pipeline-num-layers": "-"}, []string{"L the output layer"}},
		{"uneven middle", blockPlan([]int{3, 2, 4, 3}, 1), nil, 4,
			map[string]string{"--pipeline-model-parallel-layout": "Ettt|tt|tttt|tttL"}, nil},
		{"stages cross hosts the other way", blockPlan([]int{2, 2}, 2), func(p *plan.Plan) {
			// Stage 0 on the even devices, stage 1 on the odd: Megatron's
			// default numbering puts a stage's replicas on consecutive ranks.
			p.Stages[0].Devices, p.Stages[1].Devices = []string{"n0gpu0", "n0gpu2"}, []string{"n0gpu1", "n0gpu3"}
		}, 4, map[string]string{"--use-tp-pp-dp-mapping": ""}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.edit != nil {
				tc.edit(tc.p)
			}
			doc, err := Render("megatron", tc.p, Options{Source: "p.json"})
			if err != nil {
				t.Fatal(err)
			}
			args := runtimetest.Megatron(t, "../testdata/runtimes", doc, tc.world)
			for flag, want := range tc.want {
				got, ok := args[flag]
				if want == "-" && ok || want != "-" && (!ok || got != want) {
					t.Errorf("%s: %q (present %v), want %q", flag, got, ok, want)
				}
			}
			for _, s := range tc.say {
				if !strings.Contains(string(doc), s) {
					t.Errorf("no %q in\n%s", s, doc)
				}
			}
			if t.Failed() {
				t.Logf("artefact:\n%s", doc)
			}
		})
	}
	// What Megatron-LM cannot run is refused, naming the field.
	for _, tc := range []struct {
		name string
		p    *plan.Plan
		edit func(p *plan.Plan)
		want string
	}{
		{"placement in a replica", launchPlan(16, 1, []int{2}, []int{2}, false), nil, "stages[0].replica_devices: a replica spans 2 devices placed op by op"},
		{"uneven replicas", launchPlan(16, 2, []int{2, 1}, []int{1, 1}, false), nil, "stages[1].replicas: 1 against stage 0's 2"},
		{"tensor degrees", launchPlan(16, 2, []int{1, 1}, []int{2, 4}, true), nil, "stages[1].tensor_parallel: 4 against stage 0's 2"},
		{"two device types", launchPlan(16, 2, []int{4}, []int{1}, false), func(p *plan.Plan) { p.Devices[1].Type = "V100-16GB" }, "devices: the plan runs on A100-80GB and V100-16GB"},
		{"batch unknown", launchPlan(16, 2, []int{4}, []int{1}, false), func(p *plan.Plan) { p.Batch = 0 }, "batch: the plan's batch is unknown"},
		{"inference", launchPlan(16, 2, []int{4}, []int{1}, false), func(p *plan.Plan) { p.Mode = "infer" }, `mode "infer"`},
		{"some stages recompute", blockPlan([]int{2, 2}, 1), func(p *plan.Plan) { p.Stages[1].Recompute = true }, "stages[1].recompute: only some stages recompute"},
		{"different ZeRO levels", blockPlan([]int{2, 2}, 2), func(p *plan.Plan) { p.Stages[1].Sharding = "zero1" }, "stages[1].sharding"},
		{"no blocks to split", launchPlan(16, 2, []int{1, 1}, []int{1, 1}, false), nil, "stages: the model has no repeated layers"},
		// ResNet-50's bottlenecks and GNMT's LSTM layers repeat too, but
		// hold no attention: Megatron-LM builds no such model.
		{"blocks without attention", blockPlan([]int{4}, 2), func(p *plan.Plan) {
			p.Ops = slices.DeleteFunc(p.Ops, func(o plan.Op) bool { return o.Type == "Softmax" })
			for i := range p.Stages {
				p.Stages[i].Ops = slices.DeleteFunc(p.Stages[i].Ops, func(n string) bool { return strings.HasSuffix(n, "/Softmax") })
			}
		}, "ops: the model's repeated layers (blocks.0 .. blocks.3) are no transformer layers: blocks.0 holds no attention"},
		{"a module before the blocks on stage 1", blockPlan([]int{0, 2}, 1), func(p *plan.Plan) {
			insertOp(p, 1, 1, "/drop/Add")
			p.Stages[1].FirstOp, p.Stages[1].FirstModule = "/drop/Add", "/drop/"
		}, "stages[1]: module drop comes before the first transformer layer but is not in stage 0"},
		{"a module between blocks", blockPlan([]int{2, 2}, 1), func(p *plan.Plan) { insertOp(p, 1, 10, "/mid/Add") }, "stages[1]: module mid sits between transformer layers"},
		{"cut inside a block", blockPlan([]int{2, 2, 2}, 1), func(p *plan.Plan) {
			// blocks.3's fc2 moved to stage 2: stage 2 starts at blocks.3.fc2.
			p.Stages[1].Ops = slices.DeleteFunc(p.Stages[1].Ops, func(n string) bool { return n == "/blocks/blocks.3/fc2/MatMul" })
			p.Stages[2].Ops = append([]string{"/blocks/blocks.3/fc2/MatMul"}, p.Stages[2].Ops...)
			p.Ops[8].Stage = ptr(2)
			p.Stages[1].LastModule, p.Stages[2].FirstModule, p.Stages[2].FirstOp = "/blocks/blocks.3/qkv/", "/blocks/blocks.3/fc2/", "/blocks/blocks.3/fc2/MatMul"
		}, "stages[1]: the stages are cut inside transformer layer blocks.3 (at blocks.3.qkv)"},
	} {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			if tc.edit != nil {
				tc.edit(tc.p)
			}
			_, err := Render("megatron", tc.p, Options{Source: "p.json"})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "p.json: ") || strings.Contains(err.Error(), "\n") {
				t.Errorf("%v, want one line naming p.json and saying %q", err, tc.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// insertOp inserts a forward op named name at index at of p's ops, in
// stage s, in the stage's op list where the ops around it are.
func insertOp(p *plan.Plan, s, at int, name string) {
	op := plan.Op{Name: name, Type: "Add", Phase: "forward", Device: p.Stages[s].Devices[0], Stage: ptr(s)}
	p.Ops = slices.Insert(p.Ops, at, op)
	k := 0
	for _, o := range p.Ops[:at] {
		if slices.Contains(p.Stages[s].Ops, o.Name) {
			k++
		}
	}
	p.Stages[s].Ops = slices.Insert(p.Stages[s].Ops, k, name)
}

func TestTorchLaunch(t *testing.T) {
	for _, names := range torchStyles {
		if runtimetest.Styles[names[0]] != names[1] {
			t.Errorf("tp_plan style %q is %s here, %s in runtimetest", names[0], names[1], runtimetest.Styles[names[0]])
		}
	}
	for _, tc := range []struct {
		name string
		p    *plan.Plan
		edit func(p *plan.Plan)
		want []string
	}{
		{"ddp", launchPlan(64, 4, []int{8}, []int{1}, false), func(p *plan.Plan) {
			p.AllReduces = []plan.AllReduce{{Kind: "all-reduce", Bytes: 25 << 20}, {Kind: "all-reduce", Bytes: 25 << 20}, {Kind: "all-reduce", Bytes: 3 << 20}}
		}, []string{`data_parallel = "ddp"`, "bucket_cap_mb = 25.00", "gradient_accumulation_steps = 4", "micro_batch_size = 2", "no_sync()",
			`"node1": "torchrun --nnodes 2 --node-rank 1 --nproc-per-node 4 --master-addr node0 --master-port 29500 train.py"`, "# plan:     p.json"}},
		{"zero1, fp16, recompute", launchPlan(16, 1, []int{4}, []int{1}, false), func(p *plan.Plan) {
			p.Precision, p.Stages[0].Sharding, p.Stages[0].Recompute = "amp-fp16", "zero1", true
			p.Ops = append(p.Ops, plan.Op{Name: "/enc/Gather", Phase: "forward", Type: "Gather"}, plan.Op{Name: "/dec/MatMul", Phase: "forward", Type: "MatMul"})
		}, []string{`data_parallel = "ddp+zero1"`, "zero_redundancy_optimizer = True", `autocast_dtype = "float16"`, "grad_scaler = True", `checkpoint_modules = ["enc", "dec"]`, "bucket_cap_mb = None"}},
		{"zero2, bf16", launchPlan(16, 1, []int{4}, []int{1}, false), func(p *plan.Plan) {
			p.Precision, p.Stages[0].Sharding = "amp-bf16", "zero2"
			p.Ops = append(p.Ops, plan.Op{Name: "/blocks/blocks.0/fc1/MatMul", Phase: "forward", Type: "MatMul"}, plan.Op{Name: "/blocks/blocks.1/fc1/MatMul", Phase: "forward", Type: "MatMul"})
		}, []string{`data_parallel = "fsdp"`, `fsdp_sharding_strategy = "SHARD_GRAD_OP"`, `fsdp_units = ["blocks.0", "blocks.1"]`, `autocast_dtype = "bfloat16"`,
			"torch_compile = False", "scaled_dot_product_attention = False"}},
		{"zero3, accumulating", launchPlan(16, 2, []int{4}, []int{1}, false), func(p *plan.Plan) {
			p.Precision, p.Stages[0].Sharding = "amp-bf16", "zero3"
			p.Ops = append(p.Ops, plan.Op{Name: "/blocks/blocks.0/fc1/MatMul", Phase: "forward", Type: "MatMul"}, plan.Op{Name: "/blocks/blocks.1/fc1/MatMul", Phase: "forward", Type: "MatMul"})
		}, []string{`data_parallel = "fsdp"`, `fsdp_sharding_strategy = "FULL_SHARD"`, `fsdp_units = ["blocks.0", "blocks.1"]`, "bucket_cap_mb = None",
			"ZeRO-3: FullyShardedDataParallel(sharding_strategy=ShardingStrategy.FULL_SHARD)", "gradients reduce-scattered after each, as the plan times them: no no_sync()"}},
		{"torch.compile", launchPlan(16, 1, []int{4}, []int{1}, false), func(p *plan.Plan) { p.Runtime = "compile" },
			[]string{"# runtime:  compile: torch.compile(model), attention through scaled_dot_product_attention", "torch_compile = True", "scaled_dot_product_attention = True"}},
		{"idle GPUs", launchPlan(8, 1, []int{2}, []int{1}, false), func(p *plan.Plan) { p.Stages[0].Devices = []string{"n0gpu1", "n0gpu3"} },
			[]string{`"cuda_visible_devices": "1,3"`, `"node0": "CUDA_VISIBLE_DEVICES=1,3 torchrun --nnodes 1`}},
		{"tensor x data", launchPlan(16, 1, []int{2}, []int{2}, true), func(p *plan.Plan) {
			p.Ops = append(p.Ops,
				plan.Op{Name: "/blocks/blocks.0/qkv/MatMul", Type: "MatMul", Phase: "forward", Shard: "column"},
				plan.Op{Name: "/blocks/blocks.0/MatMul", Type: "MatMul", Phase: "forward", Shard: "heads"},
				plan.Op{Name: "/blocks/blocks.0/proj/Gemm", Type: "Gemm", Phase: "forward", Shard: "row"},
				plan.Op{Name: "/blocks/blocks.0/fc1/MatMul", Type: "MatMul", Phase: "forward", Shard: "tokens"},
				plan.Op{Name: "/blocks/blocks.0/fc2/MatMul", Type: "MatMul", Phase: "forward", Shard: "replicated"})
			for _, m := range []string{"qkv", "proj", "fc1", "fc2"} {
				p.Ops = append(p.Ops, plan.Op{Name: "blocks.0." + m + ".weight/adam", Phase: "update"})
			}
		}, []string{"tp_plan = {\n    \"blocks.0.qkv\": \"colwise\",  # /blocks/blocks.0/qkv/MatMul column\n    \"blocks.0.proj\": \"rowwise\",", `token_split = ["blocks.0.fc1"]`,
			"mesh = [[0, 1], [2, 3]]", "mesh_shape = (2, 2)", "init_device_mesh"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.edit(tc.p)
			doc, err := Render("torch", tc.p, Options{Source: "p.json"})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(doc), w) {
					t.Errorf("no %q in\n%s", w, doc)
				}
			}
			parsePython(t, doc)
			runtimetest.Torch(t, "../testdata/runtimes", runtimetest.TorchVars(t, doc))
		})
	}
	tensor := func(edit func(p *plan.Plan)) *plan.Plan {
		p := launchPlan(16, 1, []int{2}, []int{2}, true)
		edit(p)
		return p
	}
	for _, tc := range []struct {
		name string
		p    *plan.Plan
		want string
	}{
		{"pipeline", blockPlan([]int{2, 2}, 1), "stages: the plan has 2 pipeline stages: the torch-pipelining target"},
		{"placement in a replica", launchPlan(16, 1, []int{2}, []int{2}, false), "stages[0].replica_devices"},
		{"inference", tensor(func(p *plan.Plan) { p.Mode = "infer" }), `mode "infer"`},
		{"batch unknown", tensor(func(p *plan.Plan) { p.Batch = 0 }), "batch: the plan's batch is unknown"},
		{"zero1 with tensor parallelism", tensor(func(p *plan.Plan) { p.Stages[0].Sharding = "zero1" }), "stages[0].sharding: zero1 with tensor_parallel 2"},
		{"a split convolution", tensor(func(p *plan.Plan) {
			p.Ops = append(p.Ops, plan.Op{Name: "/conv1/Conv", Type: "Conv", Phase: "forward", Shard: "column"})
		}), "ops[4].shard: /conv1/Conv (Conv) is split by column"},
		{"two split matmuls in a module", tensor(func(p *plan.Plan) {
			p.Ops = append(p.Ops, plan.Op{Name: "/attn/MatMul", Type: "MatMul", Phase: "forward", Shard: "column"}, plan.Op{Name: "/attn/MatMul_1", Type: "MatMul", Phase: "forward", Shard: "row"},
				plan.Op{Name: "attn.w/adam", Phase: "update"})
		}), "ops[5].shard: module attn holds two split matmuls"},
		{"a weight not the module's", tensor(func(p *plan.Plan) {
			p.Ops = append(p.Ops, plan.Op{Name: "/blocks/blocks.0/MatMul", Type: "MatMul", Phase: "forward", Shard: "column"})
		}), "its weight is no parameter of module blocks.0"},
		{"nothing split", tensor(func(p *plan.Plan) {}), "ops[].shard: no matmul of a weight is split"},
	} {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			_, err := Render("torch", tc.p, Options{Source: "p.json"})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "p.json: ") {
				t.Errorf("%v, want an error naming p.json and saying %q", err, tc.want)
			}
		})
	}
}
