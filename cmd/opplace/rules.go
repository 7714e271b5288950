package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/opplace/opplace/constraint"
	"github.com/opplace/opplace/pipeline"
)

// ruleFlags are the user's rules: a constraints file and the same rules
// as repeatable one-line flags (docs/constraints.md).
type ruleFlags struct {
	constraints string
	// values[k] are the values of flag --k, in command-line order.
	values map[constraint.Kind]*[]string
}

// ruleFlagHelp is each rule flag's spelling.
var ruleFlagHelp = map[constraint.Kind]string{
	constraint.Pin:      "run the selected ops on TARGET, SELECTOR=TARGET (repeatable)",
	constraint.Avoid:    "never run the selected ops on TARGET, SELECTOR=TARGET (repeatable)",
	constraint.Colocate: "run the selected ops on one device, SELECTOR (repeatable)",
	constraint.Separate: "never run ops of different groups on one device, SELECTOR,SELECTOR[,...] (repeatable)",
	constraint.Reserve:  "keep memory free on each device of TARGET, TARGET=AMOUNT (2GiB or 10%; TARGET * for all; repeatable)",
	constraint.Cut:      "pipeline stages start only at modules matching PATTERN, or never inside one with not-inside:PREFIX (repeatable)",
	constraint.Limit:    "use at most N devices, or only these: N or TARGET[,TARGET...] (repeatable)",
	constraint.Prefer:   "soft rule: SELECTOR=[!]TARGET[@MS], MS (default 1) added to the objective per op placed against it (repeatable)",
}

func (f *ruleFlags) registerRules(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.constraints, "constraints", "", "rules to plan under, a YAML file (docs/constraints.md); a SELECTOR is name:GLOB, re:REGEX, type:OPTYPE, module:PREFIX or phase:forward|backward|update, a TARGET a device, type:DEVICETYPE, host:HOST or *")
	f.values = map[constraint.Kind]*[]string{}
	for _, k := range constraint.Kinds {
		f.values[k] = new([]string)
		fl.StringArrayVar(f.values[k], string(k), nil, ruleFlagHelp[k])
	}
}

// apply reads the constraints file, then the flags' rules after its own.
func (f *ruleFlags) apply(opts *pipeline.Options) error {
	set := &constraint.Set{}
	if f.constraints != "" {
		s, err := constraint.Load(f.constraints)
		if err != nil {
			return usageError{fmt.Errorf("--constraints: %w", err)}
		}
		set = s
	}
	for _, k := range constraint.Kinds {
		for _, v := range *f.values[k] {
			rule, err := constraint.ParseFlag(k, v)
			if err != nil {
				return usageError{err}
			}
			set.Rules = append(set.Rules, rule)
		}
	}
	if len(set.Rules) > 0 {
		opts.Constraints = set
	}
	return nil
}
