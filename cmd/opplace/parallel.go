package main

import (
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/strategy"
)

// parallelFlags give one configuration whole (strategy parallel).
type parallelFlags struct {
	parallel string
}

func (f *parallelFlags) registerParallel(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.parallel, "parallel", "", "plan one configuration as given (strategy parallel), as Megatron-LM's arguments state it: tp=T,pp=P[,dp=D][,mbs=B][,recompute=none|full][,zero=none|zero1|zero2|zero3] (tensor, pipeline and data-parallel degrees, dp by default the devices left; micro-batch size; full recomputation; ZeRO level), e.g. tp=8,pp=8,mbs=1,recompute=full")
}

// apply reads --parallel into the options. It gives the whole
// configuration, so the flags that shape a search's space may not come
// with it, and the strategy is parallel.
func (f *parallelFlags) apply(cmd *cobra.Command, opts *pipeline.Options) error {
	if f.parallel == "" {
		return nil
	}
	for _, name := range []string{"zero", "recompute", "tensor-parallel", "microbatches"} {
		if cmd.Flags().Changed(name) {
			return usageError{fmt.Errorf("--parallel gives the whole configuration: drop --%s (zero=, recompute=, tp= and mbs= set it there)", name)}
		}
	}
	if cmd.Flags().Changed("strategy") && opts.Strategy != strategy.ParallelStrategy {
		return usageError{fmt.Errorf("--parallel plans the configuration as given (--strategy %s), not with --strategy %s", strategy.ParallelStrategy, opts.Strategy)}
	}
	opts.Strategy = strategy.ParallelStrategy
	return f.parse(opts)
}

// parse reads --parallel into opts.Strategies.Parallel.
func (f *parallelFlags) parse(opts *pipeline.Options) error {
	c, err := strategy.ParseParallel(f.parallel)
	if err != nil {
		return usageError{fmt.Errorf("--parallel: %w", err)}
	}
	opts.Strategies.Parallel = c
	return nil
}

// applyCompare reads --parallel for compare, which lists the configuration
// as one more row (strategy parallel) beside the strategies it runs.
func (f *parallelFlags) applyCompare(opts *pipeline.Options, strategies []string) error {
	if f.parallel == "" {
		if slices.Contains(strategies, strategy.ParallelStrategy) {
			return usageError{fmt.Errorf("--strategy %s compares a configuration you give: --parallel SPEC", strategy.ParallelStrategy)}
		}
		return nil
	}
	return f.parse(opts)
}
