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
	Register("megatron", "text: Megatron-LM's command-line arguments for the plan (tensor and pipeline sizes, the pipeline's layer split when uneven, micro and global batch, recomputation, distributed optimizer or Megatron-FSDP for ZeRO, bf16/fp16), one per line under a comment header; plans of uniform stages on one device type",
		func() Target { return megatronArgs{} })
}

// megatronArgs writes the arguments of Megatron-LM's training scripts
// (pretrain_gpt.py and the others, megatron/training/arguments.py) that
// carry a plan: one "--flag value" per line, after a header of comment
// lines, so that
//
//	torchrun ... pretrain_gpt.py $(grep -v '^#' megatron.args) MODEL_ARGS
//
// passes them. No value holds a space or a shell pattern character.
type megatronArgs struct{}

// megatronRuntime names Megatron-LM in refusals.
const megatronRuntime = "Megatron-LM"

func (megatronArgs) Export(w io.Writer, p *plan.Plan, o Options) error {
	src := o.source()
	l, err := launchShape(p, o, megatronRuntime)
	if err != nil {
		return err
	}
	if len(l.Types) > 1 {
		return errorf(Invalid, "%s: devices: the plan runs on %s, and Megatron-LM assumes one device type (it splits layers evenly and runs one tensor degree); plan on devices of one type", src, strings.Join(l.Types, " and "))
	}
	rm, err := BuildRankMap(p, o)
	if err != nil {
		return err
	}
	if rm.WorldSize != l.TP*l.PP*l.DP {
		return errorf(Invalid, "%s: stages: %d ranks, but tensor %d x pipeline %d x data %d is %d: Megatron-LM's world size is their product; is the plan file edited?", src, rm.WorldSize, l.TP, l.PP, l.DP, l.TP*l.PP*l.DP)
	}
	if p.Batch%(l.MicroBatch*int64(l.DP)) != 0 {
		return errorf(Invalid, "%s: batch: %d is not a multiple of micro-batch size %d x data-parallel size %d, as Megatron-LM's --global-batch-size must be; is the plan file edited?", src, p.Batch, l.MicroBatch, l.DP)
	}
	b := modelBlocks(p)
	if err := transformerLayers(p, b, src); err != nil {
		return err
	}
	layers, err := megatronLayers(p, o, l, b)
	if err != nil {
		return err
	}

	var args [][2]string // flag, value ("" for a switch)
	arg := func(flag, value string) { args = append(args, [2]string{flag, value}) }
	var notes []string // header lines after the fixed ones
	note := func(format string, a ...any) { notes = append(notes, fmt.Sprintf(format, a...)) }

	arg("--tensor-model-parallel-size", fmt.Sprint(l.TP))
	arg("--pipeline-model-parallel-size", fmt.Sprint(l.PP))
	if b != nil {
		arg("--num-layers", fmt.Sprint(len(b.Names)))
		note("layers:   %d transformer layers (%s .. %s, in %s), %s", len(b.Names), comment(b.Names[0]), comment(b.Names[len(b.Names)-1]), comment(b.Container), megatronSplit(layers))
	} else {
		note("layers:   the model has no repeated layers (numbered modules such as blocks.0): give --num-layers with the model's arguments")
	}
	switch split := uneven(layers); {
	case split == nil:
	case split.layout != "":
		arg("--pipeline-model-parallel-layout", split.layout)
		note("layout:   E the embedding, t a transformer layer, L the output layer and loss, | between stages (megatron/core/transformer/pipeline_parallel_layer_layout.py)")
	default:
		if split.first > 0 {
			arg("--decoder-first-pipeline-num-layers", fmt.Sprint(split.first))
		}
		if split.last > 0 {
			arg("--decoder-last-pipeline-num-layers", fmt.Sprint(split.last))
		}
	}
	arg("--micro-batch-size", fmt.Sprint(l.MicroBatch))
	arg("--global-batch-size", fmt.Sprint(p.Batch))
	if l.Recompute {
		arg("--recompute-granularity", "full")
		arg("--recompute-method", "uniform")
		arg("--recompute-num-layers", "1")
	}
	switch l.Sharding {
	case "zero1":
		arg("--use-distributed-optimizer", "")
		note("ZeRO-1:   --use-distributed-optimizer: Megatron-LM's distributed optimizer shards the optimizer state (with the fp32 main weights) over the data-parallel ranks, not the gradients or weights (its docs/source/api-guide/dist_optimizer.md)")
	case "zero2":
		arg("--use-megatron-fsdp", "")
		arg("--data-parallel-sharding-strategy", "optim_grads")
		arg("--ckpt-format", "fsdp_dtensor")
		note("ZeRO-2:   Megatron-FSDP's optim_grads shards the optimizer state and gradients, not the weights (it needs --ckpt-format fsdp_dtensor); Megatron-LM without Megatron-FSDP has no ZeRO-2: plan with ZeRO-1 for --use-distributed-optimizer")
	case "zero3":
		arg("--use-megatron-fsdp", "")
		arg("--data-parallel-sharding-strategy", "optim_grads_params")
		arg("--ckpt-format", "fsdp_dtensor")
		note("ZeRO-3:   Megatron-FSDP's optim_grads_params shards the optimizer state, gradients and weights, gathering each layer's weights for its forward and backward passes (it needs --ckpt-format fsdp_dtensor); Megatron-LM without Megatron-FSDP has no ZeRO-3")
	}
	if l.DP > 1 {
		arg("--overlap-grad-reduce", "")
		if bucket := medianBucket(p, 0); bucket > 0 {
			// Megatron's DDP buckets count parameters; the plan's buckets
			// hold fp32 gradients (fp32 main gradients under bf16 too).
			arg("--ddp-bucket-size", fmt.Sprint((bucket+3)/4))
		}
	}
	switch p.Precision {
	case "amp-bf16":
		arg("--bf16", "")
		note("precision: amp-bf16: --bf16 (bf16 weights and compute, fp32 main weights and gradient reduction in the optimizer, as the plan's fp32 master weights)")
	case "amp-fp16":
		arg("--fp16", "")
		note("precision: amp-fp16: --fp16 (fp16 weights and compute with dynamic loss scaling, fp32 main weights in the optimizer)")
	case "tf32":
		note("precision: tf32: no flag (fp32 weights; TF32 matmuls follow torch.backends.cuda.matmul.allow_tf32)")
	case "":
		note("precision: the model file's element types: no flag (Megatron-LM's default is fp32)")
	default:
		note("precision: %s: no flag (Megatron-LM's default)", comment(p.Precision))
	}
	switch {
	case p.Runtime == "":
	case fusesAttention(p.Runtime):
		note("runtime:  %s: the plan runs each attention core as one fused kernel storing no score matrix, as Megatron-LM's flash or fused attention backends do", comment(p.Runtime))
	default:
		note("runtime:  %s: the plan runs attention as the model writes it; Megatron-LM's fused attention kernels run it faster and with less memory than planned", comment(p.Runtime))
	}
	if l.TP > 1 {
		note("tensor:   %s", tensorSplits(p))
	}
	if l.PP > 1 && p.Schedule == "gpipe" {
		note("schedule: the plan's gpipe; Megatron-LM runs 1F1B, the same bubble with fewer micro-batches in flight")
	}
	switch megatronOrder(rm, l) {
	case "tp-pp-dp":
		arg("--use-tp-pp-dp-mapping", "")
	case "":
		note("ranks:    Megatron-LM numbers its groups tensor first, then data, then pipeline, and the plan's ranks (the rank-map target) hold other places: the same parallelism on other devices, which the prediction did not time")
	}
	switch {
	case l.TP > 1 && (l.Sharding == "zero2" || l.Sharding == "zero3"):
		note("environment: CUDA_DEVICE_MAX_CONNECTIONS unset or above 1 (Megatron-FSDP asserts it; with tensor parallelism Megatron-LM then warns)")
	case l.TP > 1:
		note("environment: CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron-LM asserts it under tensor parallelism on GPUs before Blackwell)")
	}

	bw := bufio.NewWriter(w)
	pr := func(format string, a ...any) { fmt.Fprintf(bw, format, a...) }
	pr("# Megatron-LM arguments, written by opplace export (target megatron).\n")
	pr("# plan:     %s (strategy %s, cluster %s, %s)\n", comment(src), comment(p.Strategy), comment(p.Cluster), comment(orDefault(p.Mode, "train")))
	pr("# model:    %s\n", comment(p.Model))
	pr("# step:     %s\n", stepLine(p))
	pr("# ranks:    %d = tensor %d x pipeline %d x data %d (Megatron-LM takes the data-parallel size as world size / (tensor x pipeline): no flag)\n", rm.WorldSize, l.TP, l.PP, l.DP)
	pr("# hosts:    %s\n", strings.Join(hostsLine(rm.Hosts), ", "))
	pr("# batch:    %s of %s per data-parallel rank per step\n", plan.Count(l.Accum, "micro-batch", "micro-batches"), plan.Count(int(l.MicroBatch), "sample", "samples"))
	for _, n := range notes {
		pr("# %s\n", n)
	}
	pr("# not written: --sequence-parallel (opplace does not model sequence parallelism), virtual pipeline stages (opplace plans none)\n")
	pr("# use:      torchrun --nnodes %d --node-rank N --nproc-per-node %d ... pretrain_gpt.py $(grep -v '^#' megatron.args) followed by the model's and data's arguments\n", len(rm.Hosts), rm.Hosts[0].Processes)
	for _, a := range args {
		if a[1] == "" {
			pr("%s\n", a[0])
		} else {
			pr("%s %s\n", a[0], a[1])
		}
	}
	return bw.Flush()
}

// orDefault is s, or def when s is empty.
func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// megatronLayers counts the transformer layers (the model's blocks) of
// each pipeline stage, checking that Megatron-LM can place them: whole
// blocks per stage, the modules before the first block (the embedding) in
// stage 0 and those after the last (final norm, output layer) in the last
// stage, nothing between blocks.
func megatronLayers(p *plan.Plan, o Options, l *launch, b *blocks) ([]int, error) {
	src := o.source()
	if l.PP == 1 {
		if b == nil {
			return []int{0}, nil
		}
		return []int{len(b.Names)}, nil
	}
	if b == nil {
		return nil, errorf(Invalid, "%s: stages: the model has no repeated layers (numbered modules such as blocks.0 in one container), and Megatron-LM splits transformer layers over pipeline stages: plan without pipeline stages (the dp or tensor strategy)", src)
	}
	c, err := moduleCuts(p, o, "megatron")
	if err != nil {
		return nil, err
	}
	counts := make([]int, l.PP)
	last := l.PP - 1
	isBlock := func(fqn string) bool { return fqn == b.Container || b.has(fqn) }
	firstB, lastB := -1, -1
	for i, ly := range c.Layers {
		if isBlock(ly.FQN) {
			if firstB < 0 {
				firstB = i
			}
			lastB = i
		}
	}
	seen := 0
	for i, ly := range c.Layers {
		_, blk := blockOf(ly.FQN)
		switch {
		case ly.FQN == b.Container:
			counts[ly.Stage] += len(b.Names)
			seen += len(b.Names)
		case b.has(ly.FQN):
			counts[ly.Stage]++
			seen++
		case blk != "" && b.has(blk):
			return nil, errorf(Invalid, "%s: stages[%d]: the stages are cut inside transformer layer %s (at %s), and Megatron-LM gives each stage whole layers: replan with stages cut between %s", src, ly.Stage, blk, ly.FQN, comment(b.Container+".N"))
		case i < firstB:
			if ly.Stage != 0 {
				return nil, errorf(Invalid, "%s: stages[%d]: module %s comes before the first transformer layer but is not in stage 0, and Megatron-LM runs the embedding on the first stage", src, ly.Stage, ly.FQN)
			}
		case i > lastB:
			if ly.Stage != last {
				return nil, errorf(Invalid, "%s: stages[%d]: module %s comes after the transformer layers but is not in the last stage, and Megatron-LM runs the output layer on the last stage", src, ly.Stage, ly.FQN)
			}
		default:
			return nil, errorf(Invalid, "%s: stages[%d]: module %s sits between transformer layers, and Megatron-LM's stages hold transformer layers only, the embedding first and the output layer last", src, ly.Stage, ly.FQN)
		}
	}
	if seen != len(b.Names) {
		return nil, errorf(Invalid, "%s: stages: they hold %d of the model's %d transformer layers; is the plan file edited?", src, seen, len(b.Names))
	}
	return counts, nil
}

// megatronSplit describes the stages' layer counts for the header.
func megatronSplit(counts []int) string {
	if len(counts) == 1 {
		return "on one pipeline stage"
	}
	var s []string
	for _, n := range counts {
		s = append(s, fmt.Sprint(n))
	}
	return "per stage " + strings.Join(s, ", ")
}

// pipelineSplit is how Megatron-LM is told an uneven split: the layers of
// the first and last stages (0: as the others), or a layout string.
type pipelineSplit struct {
	first, last int
	layout      string
}

// uneven is the arguments of a split Megatron-LM does not make by
// itself, nil for an even one (the layers divide by the stages, each
// stage holding as many). Megatron-LM's uneven split sets the first
// and last stages' layers (each more than 0) and splits the rest evenly
// (megatron/core/transformer/transformer_config.py); any other split is
// a layout.
func uneven(counts []int) *pipelineSplit {
	n := len(counts)
	if n == 1 || !slices.ContainsFunc(counts, func(c int) bool { return c != counts[0] }) {
		return nil
	}
	first, last := counts[0], counts[n-1]
	middle := counts[1 : n-1]
	if first > 0 && last > 0 && !slices.ContainsFunc(middle, func(c int) bool { return c != middle[0] || c == 0 }) {
		s := &pipelineSplit{}
		switch {
		case n == 2:
			s.first = first
		default:
			if first != middle[0] {
				s.first = first
			}
			if last != middle[0] {
				s.last = last
			}
		}
		return s
	}
	var b strings.Builder
	b.WriteByte('E')
	for i, c := range counts {
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString(strings.Repeat("t", c))
	}
	b.WriteByte('L')
	return &pipelineSplit{layout: b.String()}
}

// megatronOrder says how Megatron-LM's rank numbering matches the plan's:
// "tp-dp-pp" when its default (tensor fastest, then data, then pipeline)
// gives every rank the plan's place, "tp-pp-dp" when
// --use-tp-pp-dp-mapping does, "" when neither.
func megatronOrder(rm *RankMap, l *launch) string {
	def, alt := true, true
	for _, r := range rm.Ranks {
		def = def && r.Rank == r.Member+l.TP*(r.Replica+l.DP*r.Stage)
		alt = alt && r.Rank == r.Member+l.TP*(r.Stage+l.PP*r.Replica)
	}
	switch {
	case def:
		return "tp-dp-pp"
	case alt:
		return "tp-pp-dp"
	}
	return ""
}

// tensorSplits compares the plan's splits of its weights' matmuls with
// Megatron-LM's fixed ones, for the header.
func tensorSplits(p *plan.Plan) string {
	count := map[string]int{}
	var other []string
	for _, lin := range weightOps(p) {
		s := orDefault(lin.Shard, "replicated")
		count[s]++
		if s != "column" && s != "row" && len(other) < 2 {
			other = append(other, fmt.Sprintf("%s by %s", comment(lin.FQN), comment(s)))
		}
	}
	var kinds []string
	for _, s := range []string{"column", "row", "tokens", "replicated"} {
		if count[s] > 0 {
			kinds = append(kinds, fmt.Sprintf("%d by %s", count[s], s))
		}
	}
	msg := "Megatron-LM splits each layer's QKV and FC1 by column, its attention output and FC2 by row, the embedding and output layer by vocabulary"
	if len(kinds) > 0 {
		msg += "; the plan splits its weights' matmuls " + strings.Join(kinds, ", ") + " (ops[].shard)"
	}
	if len(other) > 0 {
		msg += ", where Megatron-LM runs its own split (" + strings.Join(other, ", ") + ", ...)"
	}
	return msg
}

// transformerLayers refuses a model Megatron-LM's training scripts do not
// build: they stack transformer layers, so the model's repeated modules,
// when its op names show them, must each hold attention (a Softmax among
// their forward ops), as GPT-2's and BERT's blocks do and ResNet-50's
// bottlenecks and GNMT's LSTM layers do not. A model whose op names show
// no repeated modules is not refused: its layers are the user's to give.
func transformerLayers(p *plan.Plan, b *blocks, src string) error {
	if b == nil {
		return nil
	}
	attention := map[string]bool{}
	for _, op := range p.Ops {
		if op.Phase != "forward" || op.Type != "Softmax" {
			continue
		}
		if path := modulePath(op.Name); path != "" {
			if c, blk := blockOf(FQN(path)); c == b.Container && blk != "" {
				attention[blk] = true
			}
		}
	}
	for _, blk := range b.Names {
		if !attention[blk] {
			return errorf(Invalid, "%s: ops: the model's repeated layers (%s .. %s) are no transformer layers: %s holds no attention (no Softmax among its forward ops), and Megatron-LM builds a stack of transformer layers: export to the torch or deepspeed-config target", src, b.Names[0], b.Names[len(b.Names)-1], blk)
		}
	}
	return nil
}

// hostsLine describes each host's node rank and process count for a
// comment, a run of three or more alike hosts (consecutive node ranks,
// the same process count, all their GPUs) as one entry, so a plan of
// hundreds of hosts reads in a line.
func hostsLine(hosts []RankHost) []string {
	var out []string
	for i := 0; i < len(hosts); {
		h := hosts[i]
		j := i + 1
		for h.CUDAVisibleDevices == nil && j < len(hosts) && hosts[j].CUDAVisibleDevices == nil &&
			hosts[j].Processes == h.Processes && hosts[j].NodeRank == h.NodeRank+(j-i) {
			j++
		}
		if j-i >= 3 {
			out = append(out, fmt.Sprintf("%s .. %s (node ranks %d-%d, %d processes each)", comment(h.Host), comment(hosts[j-1].Host), h.NodeRank, hosts[j-1].NodeRank, h.Processes))
			i = j
			continue
		}
		s := fmt.Sprintf("%s (node rank %d, %d processes", comment(h.Host), h.NodeRank, h.Processes)
		if h.CUDAVisibleDevices != nil {
			s += ", CUDA_VISIBLE_DEVICES=" + joinInts(h.CUDAVisibleDevices)
		}
		out = append(out, s+")")
		i++
	}
	return out
}
