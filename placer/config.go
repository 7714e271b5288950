package placer

import "time"

// Config carries the options of placers that take any (ilp's unit count
// and time limit); zero fields keep each placer's defaults.
type Config struct {
	// Groups is the number of units ilp coarsens the graph to.
	Groups int
	// TimeLimit bounds a placer's own search (ilp's Cbc runs).
	TimeLimit time.Duration
	// Nodes bounds ilp's branch and bound by nodes, which unlike time
	// gives the same answer on every machine; 0 means DefaultILPNodes.
	Nodes int
	// RefineWork bounds the local search (Refine) that strategy local
	// runs: ops simulated over the placements it tries; 0 means
	// DefaultRefineWork.
	RefineWork int64
}

// Configurable is implemented by placers that take a Config.
type Configurable interface {
	Configure(Config)
}

// Configure sets ilp's unit count and Cbc's time and node limits.
func (p *ILP) Configure(c Config) {
	if c.Groups > 0 {
		p.Groups = c.Groups
	}
	if c.TimeLimit > 0 {
		p.MaxSeconds = c.TimeLimit.Seconds()
	}
	if c.Nodes > 0 {
		p.MaxNodes = c.Nodes
	}
}
