package placer

import "time"

// Config carries the options of placers that take any (ilp's unit count
// and time limit); zero fields keep each placer's defaults.
type Config struct {
	// Groups is the number of units ilp coarsens the graph to.
	Groups int
	// TimeLimit bounds a placer's own search (ilp's Cbc run).
	TimeLimit time.Duration
	// RefineWork bounds the local search (Refine) that strategy local
	// runs: ops simulated over the placements it tries; 0 means
	// DefaultRefineWork.
	RefineWork int64
}

// Configurable is implemented by placers that take a Config.
type Configurable interface {
	Configure(Config)
}

// Configure sets ilp's unit count and Cbc time limit.
func (p *ILP) Configure(c Config) {
	if c.Groups > 0 {
		p.Groups = c.Groups
	}
	if c.TimeLimit > 0 {
		p.MaxSeconds = c.TimeLimit.Seconds()
	}
}
