package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/strategy"
	"github.com/opplace/opplace/train"
)

// dimFlags are the flags that bind what a model leaves to run time: its
// dynamic dimensions, data-dependent loop trip counts and If branches.
// Every command that reads a model takes them.
type dimFlags struct {
	dims      []string
	batch     int64
	shapes    []string
	loopTrips int64
	ifBranch  string

	flags     *pflag.FlagSet // to tell --batch 0 from no --batch
	withBatch bool           // --batch is this struct's
}

func (f *dimFlags) register(cmd *cobra.Command) {
	cmd.Flags().Int64Var(&f.batch, "batch", 0, "bind the leading dimension of every graph input whose leading dimension is dynamic")
	f.registerBut(cmd)
	f.withBatch = true
}

// registerBut registers every flag but --batch, for a command that takes
// a list of batch sizes (sweep).
func (f *dimFlags) registerBut(cmd *cobra.Command) {
	fl := cmd.Flags()
	f.flags = fl
	fl.StringArrayVar(&f.dims, "dim", nil, "bind a symbolic dimension everywhere, NAME=VALUE (repeatable)")
	fl.StringArrayVar(&f.shapes, "shape", nil, "set one input's whole shape, INPUT=D0,D1,... (repeatable)")
	fl.Int64Var(&f.loopTrips, "loop-trips", 0, "iterations assumed for a Loop whose trip count is not a constant (default: count one and warn)")
	fl.StringVar(&f.ifBranch, "if-branch", onnx.IfMax, "branch an If with a run-time condition is shaped and costed as: then, else or max (the one with more FLOPs)")
}

// options parses the flags into importer options.
func (f *dimFlags) options() (onnx.Options, error) {
	opts := onnx.Options{Batch: f.batch, LoopTrips: f.loopTrips, IfBranch: f.ifBranch, Knobs: flagKnobs{}}
	if f.batch < 0 || f.batch == 0 && f.withBatch && f.flags.Changed("batch") {
		return opts, usageError{fmt.Errorf("--batch %d: must be positive", f.batch)}
	}
	if f.loopTrips < 0 {
		return opts, usageError{fmt.Errorf("--loop-trips %d: must be positive", f.loopTrips)}
	}
	switch f.ifBranch {
	case onnx.IfMax, onnx.IfThen, onnx.IfElse:
	default:
		return opts, usageError{fmt.Errorf("--if-branch %q: want then, else or max", f.ifBranch)}
	}
	for _, d := range f.dims {
		name, val, ok := strings.Cut(d, "=")
		v, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		if !ok || strings.TrimSpace(name) == "" || err != nil || v <= 0 {
			return opts, usageError{fmt.Errorf("--dim %q: want NAME=VALUE with a positive integer value, e.g. --dim batch=16", d)}
		}
		if opts.Dims == nil {
			opts.Dims = map[string]int64{}
		}
		opts.Dims[strings.TrimSpace(name)] = v
	}
	for _, s := range f.shapes {
		name, list, ok := strings.Cut(s, "=")
		if !ok || strings.TrimSpace(name) == "" {
			return opts, usageError{fmt.Errorf("--shape %q: want INPUT=D0,D1,..., e.g. --shape input_ids=16,128", s)}
		}
		var dims []int64
		if strings.TrimSpace(list) != "" {
			for _, part := range strings.Split(list, ",") {
				v, err := strconv.ParseInt(strings.TrimSpace(part), 10, 64)
				if err != nil || v <= 0 {
					return opts, usageError{fmt.Errorf("--shape %q: dimension %q is not a positive integer", s, part)}
				}
				dims = append(dims, v)
			}
		}
		if opts.Shapes == nil {
			opts.Shapes = map[string][]int64{}
		}
		opts.Shapes[strings.TrimSpace(name)] = dims
	}
	return opts, nil
}

// flagKnobs spells the importers' settings as the flags above, so their
// messages say "bind it with --dim batch=N or --batch N".
type flagKnobs struct{}

// flagText renders "--name", then " arg" and "=value" when given.
func flagText(name, arg, value string) string {
	s := "--" + name
	if arg != "" {
		s += " " + arg
		if value != "" {
			s += "=" + value
		}
	}
	return s
}

func (flagKnobs) Dim(name, value string) string   { return flagText("dim", name, value) }
func (flagKnobs) Shape(input, dims string) string { return flagText("shape", input, dims) }
func (flagKnobs) Batch(n string) string           { return flagText("batch", n, "") }
func (flagKnobs) LoopTrips(n string) string       { return flagText("loop-trips", n, "") }
func (flagKnobs) IfBranch(b string) string        { return flagText("if-branch", b, "") }

// registerPrecision adds --precision, for every command that costs a step.
func registerPrecision(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "precision", "", "numeric precision of the step: fp32, tf32 (fp32 storage, matmuls on TF32 tensor cores), amp-bf16 or amp-fp16 (torch.autocast: matmuls and convolutions in half precision, fp32 master weights); default: the model file's element types")
}

// registerRuntime adds --runtime, the runtime a job runs under.
func registerRuntime(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "runtime", pipeline.RuntimeAuto, "the runtime the job runs under, which decides the kernels: "+runtimeHelp()+"; auto (the default) takes --fusion where the command has it and runs attention as the model writes it")
}

// runtimeHelp lists the runtimes --runtime takes, with what each runs.
func runtimeHelp() string {
	var parts []string
	for _, rt := range pipeline.Runtimes {
		parts = append(parts, rt.Name+" ("+rt.About+")")
	}
	return strings.Join(parts, ", ")
}

// checkPrecision refuses an unknown --precision before any work (exit 2).
func checkPrecision(p string) error {
	if _, err := train.ParsePrecision(p); err != nil {
		return usageError{fmt.Errorf("--precision: %w", err)}
	}
	return nil
}

// searchFlags limit the exact searches (ilp's Cbc solves, the exact
// partitioner's proof) of plan and compare.
type searchFlags struct {
	timeLimit time.Duration
}

func (f *searchFlags) registerSearch(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&f.timeLimit, "time-limit", 0,
		fmt.Sprintf("time each exact search may take: ilp's Cbc solves and pipeline:exact's proof, each keeping its best plan when the time is up (default: %v each in auto; on their own, ilp %gs and pipeline:exact 30s)",
			strategy.AutoILPTimeLimit, placer.DefaultILPSeconds))
}

// apply sets the limits on cfg.
func (f *searchFlags) apply(cfg *strategy.Config) error {
	if f.timeLimit < 0 {
		return usageError{fmt.Errorf("--time-limit %v: want a positive duration such as 5s", f.timeLimit)}
	}
	if f.timeLimit > 0 {
		cfg.Placer.TimeLimit = f.timeLimit
		cfg.Pipeline.TimeLimit = f.timeLimit
	}
	return nil
}

// spaceFlags shape the plan space a search explores: the pipeline
// strategies' micro-batches, objective, schedule and cuts, ZeRO,
// activation recomputation and tensor parallelism. plan and replan take
// them.
type spaceFlags struct {
	// pipeline strategies
	microBatches string
	objective    string
	schedule     string
	opCuts       bool
	// replicated stages
	zero string
	// replicated and pipelined stages
	recompute string
	tensor    string
}

func (f *spaceFlags) registerSpace(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.microBatches, "microbatches", "auto", "pipeline strategies: micro-batches per step, or auto (the best count under memory)")
	fl.StringVar(&f.objective, "objective", "throughput", "pipeline strategies: minimise the slowest stage (throughput) or the time through all stages (latency)")
	fl.StringVar(&f.schedule, "schedule", "1f1b", "pipeline strategies: 1f1b (PipeDream-Flush) or gpipe")
	fl.BoolVar(&f.opCuts, "op-cuts", false, "pipeline strategies: let stages cut between any two ops, inside modules (by default they cut between the modules op names carry, unless that makes the slowest stage, or the step under --objective latency, over 10% worse)")
	fl.StringVar(&f.zero, "zero", "auto", "replicated stages (dp, tensor, hybrids, pipelines): optimizer-state, gradient and weight sharding none, zero1, zero2, zero3 (FSDP FULL_SHARD), or auto (each strategy offers its ZeRO variants and the judge keeps the fastest that fits)")
	fl.StringVar(&f.recompute, "recompute", "auto", "activation recomputation in replicated and pipelined plans (dp, hybrids, pipelines): none, all (every stage recomputes its modules' forward before their backward), or auto (a recomputing variant of every plan that does not fit; the judge keeps the fastest that fits)")
	fl.StringVar(&f.tensor, "tensor-parallel", "auto", "the tensor strategy's group size: auto (2, 4, ... up to a device class), none (no tensor parallelism), or a number of devices")
}

// apply sets the plan space's options on opts.
func (f *spaceFlags) apply(opts *pipeline.Options) error {
	var err error
	if opts.MicroBatches, err = pipeline.ParseMicroBatches(f.microBatches); err != nil {
		return usageError{err}
	}
	opts.Objective, opts.Schedule = f.objective, f.schedule
	opts.Strategies.Pipeline.OpCuts = f.opCuts
	if opts.Strategies.Sharding, err = strategy.ParseSharding(f.zero); err != nil {
		return usageError{fmt.Errorf("--zero: %w", err)}
	}
	if opts.Strategies.Recompute, err = strategy.ParseRecompute(f.recompute); err != nil {
		return usageError{fmt.Errorf("--recompute: %w", err)}
	}
	if opts.Strategies.Tensor, err = strategy.ParseTensor(f.tensor); err != nil {
		return usageError{fmt.Errorf("--tensor-parallel: %w", err)}
	}
	return nil
}
