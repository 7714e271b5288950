package main

import (
	"os"
	"runtime/debug"

	"github.com/opplace/opplace/internal/machine"
	"github.com/opplace/opplace/pipeline"
)

// gcPercent is the collector's target heap growth opplace runs with
// unless GOGC is set. A plan holds a graph-sized live heap (the graph,
// its cost table, each strategy's plan and simulation) that the default
// (100) re-marks every time the heap doubles; on a 2-core machine that
// marking took a quarter of `plan`'s time on a 10^5-op graph. At 200
// `auto` there took 3.6 s instead of 4.9 s and heft on 10^6 ops 11.9 s
// instead of 15.8 s, for 30% and 13% more peak memory (docs/costed-graphs.md).
// The Go compiler raises its own GOGC for the same reason
// (cmd/compile/internal/base.AdjustStartingHeap).
const gcPercent = 200

// tuneGC applies gcPercent and, unless GOMEMLIMIT is set, a soft memory
// limit of three quarters of the machine's (or its cgroup's) memory, so
// the extra headroom never becomes an out-of-memory kill: near the limit
// the collector works harder instead. Both environment variables, when
// set, win.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		if total := machine.AvailableMemory(); total > 0 {
			debug.SetMemoryLimit(total / 4 * 3)
		}
	}
}

// collectorOffDuring turns the collector off for the import stage
// (pipeline.Options.AroundStage), unless GOGC is set. Nearly all an
// import allocates is the graph it returns, so marking that heap each
// time it grows is work thrown away: on a costed graph of 10^6 ops
// (321 MB) the import took 2.35-3.09 s with the collector off against
// 2.83-3.14 s at GOGC=200, in interleaved runs, for the same peak memory
// (docs/costed-graphs.md). The soft memory limit tuneGC sets still
// bounds the heap: near it the collector runs regardless.
func collectorOffDuring(stage string) func() {
	if stage != pipeline.StageImport || os.Getenv("GOGC") != "" {
		return func() {}
	}
	old := debug.SetGCPercent(-1)
	return func() { debug.SetGCPercent(old) }
}

// loadModel is pipeline.LoadModel with the collector off, as in a plan's
// import stage.
func loadModel(path string, opts pipeline.ImportOptions) (*pipeline.Model, error) {
	defer collectorOffDuring(pipeline.StageImport)()
	return pipeline.LoadModel(path, opts)
}
