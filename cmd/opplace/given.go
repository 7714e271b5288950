package main

import (
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/strategy"
)

// givenFlags plan a placement the user gives (strategy given): --placement
// names the file, --fill the placer for the ops it leaves out.
type givenFlags struct {
	placement string
	fill      string
}

func (f *givenFlags) registerGiven(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.placement, "placement", "", "simulate this placement (strategy given): a JSON or YAML map from op names, module:PATH or patterns to devices, or a plan file of an earlier run")
	fl.StringVar(&f.fill, "fill", "", "place the ops --placement leaves out with this placer (e.g. m-etf), the given ones pinned")
}

// apply checks the flags against --strategy (strategyChanged: it was
// given) and passes them on.
func (f *givenFlags) apply(opts *pipeline.Options, strategyChanged, respectDevices bool) error {
	given := opts.Strategy == strategy.GivenStrategy
	switch {
	case f.placement != "" && strategyChanged && !given:
		return usageError{fmt.Errorf("--placement plans the placement as given (--strategy %s), not with --strategy %s; to place the ops it leaves out, use --fill %s", strategy.GivenStrategy, opts.Strategy, opts.Strategy)}
	case f.fill != "" && f.placement == "" && !given:
		return usageError{errors.New("--fill places the ops a given placement leaves out: give --placement FILE")}
	case given && f.placement == "" && !respectDevices:
		return usageError{fmt.Errorf("--strategy %s plans a placement you give: --placement FILE, or the model's own devices with --respect-devices", strategy.GivenStrategy)}
	}
	opts.Placement, opts.Fill = f.placement, f.fill
	return nil
}

// applyCompare checks the flags against compare's --strategy list and
// passes them on: compare lists the given placement as one more row.
func (f *givenFlags) applyCompare(opts *pipeline.Options, strategies []string) error {
	switch {
	case f.fill != "" && f.placement == "":
		return usageError{errors.New("--fill places the ops a given placement leaves out: give --placement FILE")}
	case f.placement == "" && slices.Contains(strategies, strategy.GivenStrategy):
		return usageError{fmt.Errorf("--strategy %s compares a placement you give: --placement FILE", strategy.GivenStrategy)}
	}
	opts.Placement, opts.Fill = f.placement, f.fill
	return nil
}

// explain adds the flag that places what a placement left out to its
// error.
func (f *givenFlags) explain(err error) error {
	var un *pipeline.UnplacedError
	if errors.As(err, &un) {
		return fmt.Errorf("%w: --fill STRATEGY, e.g. --fill m-etf", err)
	}
	return err
}
