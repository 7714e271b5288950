package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/strategy"
)

type compareFlags struct {
	dimFlags
	givenFlags
	ruleFlags
	cluster    string
	output     string
	strategies []string
	groups     int
	ilpSeconds float64
	searchFlags
	mode      string
	optimizer string
	precision string
	recompute string
	tensor    string
	runtime   string
	parallelFlags
}

func init() { commands = append(commands, newCompareCmd) }

func newCompareCmd() *cobra.Command {
	f := &compareFlags{}
	cmd := &cobra.Command{
		Use:   "compare MODEL --cluster FILE",
		Short: "Run every strategy on a model and tabulate the results",
		Long: `compare plans MODEL on the cluster with every strategy of the plan space
(` + strings.Join(strategy.Names(), ", ") + `),
simulates each plan with the one simulator and prints one row per strategy: its
family, the plan's shape (stages, replicas, micro-batches), the predicted step,
the throughput, its gap to its family's lower bound, whether it fits, the peak
memory of every device, the bytes crossing devices and all-reduced, and the
time the strategy took (solve times vary from run to run; everything else is
deterministic). A strategy that fails is a row with its error. Exit 3 when no
strategy fits. --placement FILE adds the placement you give as strategy given
(a map from op names, module:PATH prefixes or patterns to devices, or a plan
file of an earlier run), --fill STRATEGY placing the ops it leaves out;
--parallel SPEC adds a configuration you give as strategy parallel
(tp=T,pp=P[,dp=D][,mbs=B][,recompute=full][,zero=LEVEL]).`,
		Example: `  opplace compare testdata/models/resnet50.onnx --cluster testdata/clusters/4xV100.yaml
  opplace compare bert.onnx --cluster c.yaml --dim batch=16 --strategy m-etf --strategy heft -o json
  opplace compare model.onnx --cluster c.yaml --groups 60 --ilp-seconds 30
  opplace compare gpt2.onnx --cluster c.yaml --dim batch=8 --placement plan.json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCompare(cmd, args[0], f)
		},
	}
	f.register(cmd)
	f.registerGiven(cmd)
	f.registerRules(cmd)
	f.registerSearch(cmd)
	f.registerParallel(cmd)
	registerRuntime(cmd, &f.runtime)
	fl := cmd.Flags()
	fl.StringVar(&f.cluster, "cluster", "", "cluster file (YAML; see testdata/clusters/)")
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fl.StringArrayVar(&f.strategies, "strategy", nil, "run only this strategy (repeatable; default all)")
	fl.IntVar(&f.groups, "groups", placer.DefaultILPGroups, "ilp: coarsen the graph to about this many units")
	fl.Float64Var(&f.ilpSeconds, "ilp-seconds", placer.DefaultILPSeconds, "ilp: Cbc time limit in seconds (--time-limit, where given, sets it too)")
	fl.StringVar(&f.recompute, "recompute", "auto", "activation recomputation in replicated and pipelined plans (dp, hybrids, pipelines): none, all (every stage recomputes its modules' forward before their backward), or auto (a recomputing variant of every plan that does not fit; the judge keeps the fastest that fits)")
	fl.StringVar(&f.tensor, "tensor-parallel", "auto", "the tensor strategy's group size: auto (2, 4, ... up to a device class), none (no tensor parallelism), or a number of devices")
	fl.StringVar(&f.mode, "mode", pipeline.ModeTrain, "train (forward, backward and optimizer step) or infer (forward pass only)")
	fl.StringVar(&f.optimizer, "optimizer", "adam", "optimizer for --mode train: sgd, momentum or adam (sets state memory)")
	registerPrecision(cmd, &f.precision)
	return cmd
}

func runCompare(cmd *cobra.Command, model string, f *compareFlags) error {
	importOpts, err := f.options()
	if err != nil {
		return err
	}
	if f.output != "table" && f.output != "json" {
		return usageError{fmt.Errorf("-o %q: want table or json", f.output)}
	}
	if err := checkPrecision(f.precision); err != nil {
		return err
	}
	if f.groups < 1 || f.ilpSeconds <= 0 {
		return usageError{fmt.Errorf("--groups and --ilp-seconds must be positive")}
	}
	opts := pipeline.Options{ModelPath: model, ClusterPath: f.cluster, Import: importOpts,
		Mode: f.mode, Optimizer: f.optimizer, Precision: f.precision, Runtime: f.runtime, AroundStage: collectorOffDuring,
		Strategies: strategy.Config{Placer: placer.Config{Groups: f.groups, TimeLimit: time.Duration(f.ilpSeconds * float64(time.Second))}}}
	if opts.Strategies.Recompute, err = strategy.ParseRecompute(f.recompute); err != nil {
		return usageError{fmt.Errorf("--recompute: %w", err)}
	}
	if opts.Strategies.Tensor, err = strategy.ParseTensor(f.tensor); err != nil {
		return usageError{fmt.Errorf("--tensor-parallel: %w", err)}
	}
	if err := f.searchFlags.apply(&opts.Strategies); err != nil {
		return err
	}
	if err := f.givenFlags.applyCompare(&opts, f.strategies); err != nil {
		return err
	}
	if err := f.parallelFlags.applyCompare(&opts, f.strategies); err != nil {
		return err
	}
	if err := f.ruleFlags.apply(&opts); err != nil {
		return err
	}
	c, err := pipeline.Compare(cmd.Context(), pipeline.CompareOptions{Options: opts, Strategies: f.strategies})
	if err != nil {
		return f.explain(err)
	}
	out := cmd.OutOrStdout()
	if f.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(c); err != nil {
			return err
		}
	} else {
		pipeline.WriteComparisonTable(out, c)
	}
	if _, err := c.Best(); err != nil {
		// Every strategy's reason, with exit code 3 when memory is why.
		return c.Failure()
	}
	// Always on stderr (the table lists them too), and only on success,
	// so a failure stays one line.
	for _, w := range c.Warnings {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", oneLine(w))
	}
	return nil
}
