package placer

// StepUnits exposes the ilp's training-aware units (stepUnits, no start)
// to the external tests, which coarsen real training steps with them.
func StepUnits(p *Problem, target int) (*Groups, error) {
	lim, err := newLimits(p)
	if err != nil {
		return nil, err
	}
	return stepUnits(p, lim, target, nil), nil
}
