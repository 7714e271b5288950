package placer

import (
	"context"
	"errors"
	"strings"
)

// Failure is one strategy's error, for CombineFailures.
type Failure struct {
	Strategy string
	Err      error
}

// CombineFailures merges the errors of strategies that all failed on one
// problem (the auto strategy) into one error, so the user sees every
// strategy's reason instead of the first. When any failure is an
// *InfeasibleError the result is one *InfeasibleError, with the bounds of
// the first and a Detail listing each strategy's reason in the order
// given ("each strategy tried: m-etf: after placing ...; heft: ..."); the
// CLI then exits 3 as for one strategy. When none is (bad pins, a solver
// error), or the context was cancelled, that first error is returned
// unchanged. It returns nil for no failures.
func CombineFailures(fails []Failure) error {
	var first *InfeasibleError
	for _, f := range fails {
		if errors.Is(f.Err, context.Canceled) || errors.Is(f.Err, context.DeadlineExceeded) {
			return f.Err
		}
		var inf *InfeasibleError
		if first == nil && errors.As(f.Err, &inf) {
			first = inf
		}
	}
	if first == nil {
		for _, f := range fails {
			if f.Err != nil {
				return f.Err
			}
		}
		return nil
	}
	reasons := make([]string, 0, len(fails))
	for _, f := range fails {
		if f.Err == nil {
			continue
		}
		reason := f.Err.Error()
		var inf *InfeasibleError
		if errors.As(f.Err, &inf) {
			reason = inf.Detail
			if reason == "" {
				reason = "does not fit"
			}
		}
		reasons = append(reasons, f.Strategy+": "+reason)
	}
	combined := *first
	combined.Strategy, combined.Alternative = "", ""
	combined.Detail = "each strategy tried: " + strings.Join(reasons, "; ")
	return &combined
}
