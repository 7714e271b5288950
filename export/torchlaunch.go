package export

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/opplace/opplace/plan"
)

func init() {
	Register("torch", "Python: PyTorch-native launch of a single-stage plan (dp, tensor): torchrun per host, micro-batch size and accumulation steps, DDP bucket size, ZeroRedundancyOptimizer (ZeRO-1) or FSDP SHARD_GRAD_OP (ZeRO-2) or FULL_SHARD (ZeRO-3) and its units, autocast, checkpointed modules, the (dp, tp) DeviceMesh and a torch.distributed.tensor.parallel plan from each op's split",
		func() Target { return torchLaunch{} })
}

// torchLaunch writes a Python file of the settings a plan runs under in
// PyTorch's own distributed training: torch.distributed.run (torchrun),
// DistributedDataParallel, ZeroRedundancyOptimizer, FullyShardedDataParallel
// and torch.distributed.tensor.parallel. Pipelined plans are the
// torch-pipelining target's.
type torchLaunch struct{}

// torchRuntime names PyTorch in refusals.
const torchRuntime = "PyTorch's DDP/FSDP/tensor parallelism"

// torchStyles maps a weight matmul's split (ops[].shard) to the name
// tp_plan gives it and the torch.distributed.tensor.parallel style that
// splits an nn.Linear so.
var torchStyles = map[string][2]string{
	"column": {"colwise", "ColwiseParallel"},
	"row":    {"rowwise", "RowwiseParallel"},
}

// masterPort is torchrun's default --master-port.
const masterPort = 29500

func (torchLaunch) Export(w io.Writer, p *plan.Plan, o Options) error {
	src := o.source()
	if n := len(p.Stages); n > 1 {
		return errorf(Invalid, "%s: stages: the plan has %d pipeline stages: the torch-pipelining target writes their split_spec and schedule (and the rank-map target where each rank runs); the torch target writes single-stage plans (dp, tensor)", src, n)
	}
	l, err := launchShape(p, o, torchRuntime)
	if err != nil {
		return err
	}
	if l.TP > 1 && l.Sharding == "zero1" {
		return errorf(Invalid, "%s: stages[0].sharding: zero1 with tensor_parallel %d: torch's ZeroRedundancyOptimizer shards plain tensors, not the DTensors parallelize_module makes: plan without sharding or with ZeRO-2 (FSDP SHARD_GRAD_OP over the mesh's dp dimension)", src, l.TP)
	}
	rm, err := BuildRankMap(p, o)
	if err != nil {
		return err
	}
	for _, h := range rm.Hosts {
		if !hostName.MatchString(h.Host) {
			return errorf(Invalid, "%s: devices: host %q is no host name a torchrun command can hold (letters, digits, '.', '-', '_' and ':')", src, h.Host)
		}
	}
	// The mesh: one row per replica, its members' ranks.
	mesh := make([][]int, l.DP)
	for i := range mesh {
		mesh[i] = make([]int, l.TP)
	}
	contiguous := true
	for _, r := range rm.Ranks {
		if r.Replica >= l.DP || r.Member >= l.TP {
			return errorf(Invalid, "%s: stages[0]: rank %d is replica %d member %d of %d x %d; is the plan file edited?", src, r.Rank, r.Replica, r.Member, l.DP, l.TP)
		}
		mesh[r.Replica][r.Member] = r.Rank
		contiguous = contiguous && r.Rank == r.Replica*l.TP+r.Member
	}
	// The tensor-parallel plan: each split weight matmul's module.
	type entry struct{ fqn, style, why string }
	var tpPlan []entry
	var tokens []string
	if l.TP > 1 {
		byModule := map[string]linear{}
		for _, lin := range weightOps(p) {
			style, ok := torchStyles[lin.Shard]
			switch {
			case lin.Shard == "tokens":
				if !slices.Contains(tokens, lin.FQN) {
					tokens = append(tokens, lin.FQN)
				}
				continue
			case !ok:
				continue
			case lin.Type == "Conv":
				return errorf(Invalid, "%s: ops[%d].shard: %s (%s) is split by %s, and torch.distributed.tensor.parallel's ColwiseParallel and RowwiseParallel split nn.Linear and nn.Embedding only: plan without tensor parallelism", src, lin.Index, lin.Op, lin.Type, lin.Shard)
			case !lin.Param:
				return errorf(Invalid, "%s: ops[%d].shard: %s is split by %s, but its weight is no parameter of module %s (the plan updates none), and a parallel style splits an nn.Linear's own weight: plan without tensor parallelism", src, lin.Index, lin.Op, lin.Shard, lin.FQN)
			}
			if prev, dup := byModule[lin.FQN]; dup {
				return errorf(Invalid, "%s: ops[%d].shard: module %s holds two split matmuls (%s by %s, %s by %s), and a parallel style splits one nn.Linear: plan without tensor parallelism", src, lin.Index, lin.FQN, prev.Op, prev.Shard, lin.Op, lin.Shard)
			}
			byModule[lin.FQN] = lin
			tpPlan = append(tpPlan, entry{lin.FQN, style[0], lin.Op + " " + lin.Shard})
		}
		if len(tpPlan) == 0 {
			return errorf(Invalid, "%s: ops[].shard: no matmul of a weight is split by column or row, so the tensor-parallel plan would be empty: plan without tensor parallelism", src)
		}
	}
	units := unitModules(p)
	bucket := medianBucket(p, 0)

	bw := bufio.NewWriter(w)
	pr := func(format string, a ...any) { fmt.Fprintf(bw, format, a...) }
	pr("# PyTorch launch settings, written by opplace export (target torch).\n")
	pr("# plan:     %s (strategy %s, cluster %s, %s)\n", comment(src), comment(p.Strategy), comment(p.Cluster), comment(orDefault(p.Mode, "train")))
	pr("# model:    %s\n", comment(p.Model))
	pr("# step:     %s\n", stepLine(p))
	pr("# ranks:    %d = data %d x tensor %d, on %s\n", rm.WorldSize, l.DP, l.TP, plan.Count(len(rm.Hosts), "host", "hosts"))
	switch l.Sharding {
	case "":
		pr("# data:     DistributedDataParallel(bucket_cap_mb=bucket_cap_mb): gradients all-reduced in buckets of the plan's median size\n")
	case "zero1":
		pr("# data:     ZeRO-1: DistributedDataParallel(bucket_cap_mb=bucket_cap_mb) with torch.distributed.optim.ZeroRedundancyOptimizer, which shards the optimizer state over the ranks\n")
	case "zero2":
		pr("# data:     ZeRO-2: FullyShardedDataParallel(sharding_strategy=ShardingStrategy.SHARD_GRAD_OP), torch's nearest: it shards gradients and optimizer state,\n")
		pr("#           and the weights between steps too (gathered for forward and kept until backward ends); fsdp_units are its units\n")
	case "zero3":
		pr("# data:     ZeRO-3: FullyShardedDataParallel(sharding_strategy=ShardingStrategy.FULL_SHARD): each unit's weights gathered for its forward and\n")
		pr("#           its backward pass and freed after, its gradients reduce-scattered after every micro-batch; fsdp_units are its units\n")
	}
	pr("# batch:    %s of %s per data-parallel rank per step", plan.Count(l.Accum, "micro-batch", "micro-batches"), plan.Count(int(l.MicroBatch), "sample", "samples"))
	switch {
	case l.Accum > 1 && l.Sharding == "zero3":
		pr(" (gradients reduce-scattered after each, as the plan times them: no no_sync())")
	case l.Accum > 1:
		pr(" (gradients accumulated: no_sync() on all but the last)")
	}
	pr("\n")
	switch p.Precision {
	case "amp-bf16", "amp-fp16":
		pr("# precision: %s: torch.autocast(\"cuda\", dtype=getattr(torch, autocast_dtype)) around forward and loss, fp32 weights", p.Precision)
		if p.Precision == "amp-fp16" {
			pr(", torch.amp.GradScaler")
		}
		pr("\n")
	case "tf32":
		pr("# precision: tf32: torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True\n")
	}
	if l.Recompute {
		pr("# recompute: torch.utils.checkpoint around each of checkpoint_modules (apply_activation_checkpointing)\n")
	}
	if why := runtimeKernels(p.Runtime); why != "" {
		pr("# runtime:  %s: %s\n", comment(p.Runtime), why)
	}
	if l.TP > 1 {
		pr("# tensor:   parallelize_module(model, mesh[\"tp\"], {name: STYLES[s]() for name, s in tp_plan.items()}), STYLES = {\"colwise\": ColwiseParallel, \"rowwise\": RowwiseParallel};\n")
		pr("#           a colwise projection leaves each rank 1/tensor_parallel_size of its outputs: the forward must use that share of the heads,\n")
		pr("#           and a fused QKV weight must be ordered so that each rank's rows are its heads' Q, K and V (as Megatron-LM lays it out)\n")
		if len(tokens) > 0 {
			pr("#           token_split: modules the plan splits by tokens (weights whole): torch has no style for a Linear so split\n")
			pr("#           (SequenceParallel is documented for norms and dropout), so they run whole on every rank: the step is slower than predicted\n")
		}
	}
	pr("#\n")
	pr("# On each host (train.py: your training script):\n")
	cmds := map[string]string{}
	for _, h := range rm.Hosts {
		c := fmt.Sprintf("torchrun --nnodes %d --node-rank %d --nproc-per-node %d --master-addr %s --master-port %d train.py", len(rm.Hosts), h.NodeRank, h.Processes, rm.Hosts[0].Host, masterPort)
		if h.CUDAVisibleDevices != nil {
			c = "CUDA_VISIBLE_DEVICES=" + joinInts(h.CUDAVisibleDevices) + " " + c
		}
		cmds[h.Host] = c
		pr("#   %s: %s\n", h.Host, c)
	}
	pr("# In train.py, with this file as planned:\n")
	if contiguous {
		pr("#   mesh = torch.distributed.device_mesh.init_device_mesh(\"cuda\", planned.mesh_shape, mesh_dim_names=planned.mesh_dim_names)\n")
	} else {
		pr("#   mesh = torch.distributed.device_mesh.DeviceMesh(\"cuda\", planned.mesh, mesh_dim_names=planned.mesh_dim_names)\n")
	}
	pr("#   model = DistributedDataParallel(model, process_group=mesh.get_group(\"dp\"), bucket_cap_mb=planned.bucket_cap_mb)  (or FSDP, as data_parallel says)\n")
	pr("\n")

	pr("world_size = %d\n", rm.WorldSize)
	pr("master_addr = %s\n", pyString(rm.Hosts[0].Host))
	pr("master_port = %d\n", masterPort)
	pr("hosts = [\n")
	for _, h := range rm.Hosts {
		vis := "None"
		if h.CUDAVisibleDevices != nil {
			vis = pyString(joinInts(h.CUDAVisibleDevices))
		}
		pr("    {\"host\": %s, \"node_rank\": %d, \"nproc_per_node\": %d, \"first_rank\": %d, \"cuda_visible_devices\": %s},\n", pyString(h.Host), h.NodeRank, h.Processes, h.FirstRank, vis)
	}
	pr("]\n")
	pr("torchrun = {\n")
	for _, h := range rm.Hosts {
		pr("    %s: %s,\n", pyString(h.Host), pyString(cmds[h.Host]))
	}
	pr("}\n\n")
	pr("global_batch_size = %d\n", p.Batch)
	pr("micro_batch_size = %d  # samples per data-parallel rank per micro-batch\n", l.MicroBatch)
	pr("gradient_accumulation_steps = %d\n", l.Accum)
	pr("data_parallel_size = %d\n", l.DP)
	pr("tensor_parallel_size = %d\n", l.TP)
	pr("mesh_shape = (%d, %d)\n", l.DP, l.TP)
	pr("mesh_dim_names = (\"dp\", \"tp\")\n")
	var rows []string
	for _, row := range mesh {
		rows = append(rows, "["+strings.ReplaceAll(joinInts(row), ",", ", ")+"]")
	}
	pr("mesh = [%s]  # ranks: one row per data-parallel replica, its tensor-parallel group\n\n", strings.Join(rows, ", "))

	dp := map[string]string{"": "ddp", "zero1": "ddp+zero1", "zero2": "fsdp", "zero3": "fsdp"}[l.Sharding]
	pr("data_parallel = %s  # ddp, ddp+zero1 (ZeroRedundancyOptimizer) or fsdp\n", pyString(dp))
	if bucket > 0 && l.Sharding != "zero2" && l.Sharding != "zero3" {
		pr("bucket_cap_mb = %.2f  # DistributedDataParallel(bucket_cap_mb=...): the plan's median gradient bucket, %d bytes\n", float64(bucket)/(1<<20), bucket)
	} else {
		pr("bucket_cap_mb = None  # DistributedDataParallel's default\n")
	}
	pr("zero_redundancy_optimizer = %s  # torch.distributed.optim.ZeroRedundancyOptimizer(params, optimizer_class=...)\n", pyBool(l.Sharding == "zero1"))
	if l.Sharding == "zero2" || l.Sharding == "zero3" {
		strategy := map[string]string{"zero2": "SHARD_GRAD_OP", "zero3": "FULL_SHARD"}[l.Sharding]
		pr("fsdp_sharding_strategy = \"%s\"  # torch.distributed.fsdp.ShardingStrategy.%s\n", strategy, strategy)
		pr("fsdp_units = %s  # auto_wrap_policy=functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda m: m in {model.get_submodule(n) for n in fsdp_units})\n", pyList(units))
	} else {
		pr("fsdp_sharding_strategy = None\n")
		pr("fsdp_units = []\n")
	}
	autocast := map[string]string{"amp-bf16": `"bfloat16"`, "amp-fp16": `"float16"`}[p.Precision]
	pr("autocast_dtype = %s\n", orDefault(autocast, "None"))
	pr("grad_scaler = %s\n", pyBool(p.Precision == "amp-fp16"))
	pr("allow_tf32 = %s\n", pyBool(p.Precision == "tf32"))
	pr("torch_compile = %s  # model = torch.compile(model)\n", pyBool(p.Runtime == "compile"))
	pr("scaled_dot_product_attention = %s  # attention through torch.nn.functional.scaled_dot_product_attention\n", pyBool(fusesAttention(p.Runtime)))
	if l.Recompute {
		pr("checkpoint_modules = %s  # apply_activation_checkpointing(model, check_fn=lambda m: m in {model.get_submodule(n) for n in checkpoint_modules})\n", pyList(units))
	} else {
		pr("checkpoint_modules = []\n")
	}
	pr("\n")
	pr("# torch.distributed.tensor.parallel plan: module FQN -> \"colwise\" (ColwiseParallel) or \"rowwise\" (RowwiseParallel)\n")
	if len(tpPlan) == 0 {
		pr("tp_plan = {}\n")
	} else {
		pr("tp_plan = {\n")
		for _, e := range tpPlan {
			pr("    %s: %s,  # %s\n", pyString(e.fqn), pyString(e.style), comment(e.why))
		}
		pr("}\n")
	}
	pr("token_split = %s\n", pyList(tokens))
	return bw.Flush()
}

// unitModules are the modules a plan's per-module policies apply to (FSDP
// units, activation checkpointing): the model's repeated blocks, or its
// top-level modules when it has none.
func unitModules(p *plan.Plan) []string {
	if b := modelBlocks(p); b != nil {
		return b.Names
	}
	var out []string
	for _, op := range p.Ops {
		path := modulePath(op.Name)
		if op.Phase != "forward" || path == "" {
			continue
		}
		top := FQN("/" + strings.SplitN(strings.TrimPrefix(path, "/"), "/", 2)[0] + "/")
		if top != "" && !slices.Contains(out, top) {
			out = append(out, top)
		}
	}
	return out
}

// pyList is a Python list of string literals.
func pyList(ss []string) string {
	var q []string
	for _, s := range ss {
		q = append(q, pyString(s))
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// pyBool is a Python boolean literal.
func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// fusesAttention reports whether a plan's runtime (plan.Plan.Runtime)
// runs each attention core as one kernel: pipeline.Runtimes'
// FusedAttention, by name, as the plan records it.
func fusesAttention(rt string) bool { return rt == "compile" || rt == "eager-sdpa" }

// runtimeKernels says how PyTorch runs the kernels the plan's runtime
// (plan.Plan.Runtime) assumed, "" for the default runtime.
func runtimeKernels(rt string) string {
	switch rt {
	case "":
		return ""
	case "eager":
		return "eager mode, attention as the model writes it (no torch.compile, no scaled_dot_product_attention): the plan stores its score matrices"
	case "eager-sdpa":
		return "eager mode, attention through scaled_dot_product_attention (its FlashAttention or memory-efficient kernel), no torch.compile"
	case "compile":
		return "torch.compile(model), attention through scaled_dot_product_attention"
	}
	return "the plan was made for another runtime's kernels; PyTorch's run at other speeds and memory"
}
