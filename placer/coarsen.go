package placer

import (
	"slices"

	"github.com/opplace/opplace/graph"
)

// Coarsen merges co-placement groups further, to at most about target
// groups, for placers whose cost grows quickly with the graph (ilp). It
// cuts a topological order of the groups into contiguous runs of about
// equal work, which can never make the graph of groups cyclic (every edge
// still runs forward between runs); a run also ends where the next group
// shares no device with it or would pass half the smallest device.
//
// It is not graph.Coarsen (which builds a coarse Graph from any Grouping,
// for fusion) nor partition's coarsenChain (which keeps a subset of a
// lattice's prefix cuts): those take their groups as given, while this
// one chooses them under the placers' device and memory limits.
func Coarsen(p *Problem, gs *Groups, target int) *Groups {
	if target < 1 || gs.Len() <= target {
		return gs
	}
	gg := newGroupGraph(p, gs)
	lim, err := newLimits(p)
	if err != nil {
		return gs
	}
	work := make([]float64, gs.Len())
	mem := make([]int64, gs.Len())
	memCap := groupMemCap(p)
	allowed := make([][]int, gs.Len())
	var total float64
	for g, members := range gs.Members {
		allowed[g] = lim.devices(members[0])
		for _, op := range members {
			work[g] += p.Costs.FastestTime(op)
			mem[g] += unitMemory(p, op)
			allowed[g] = intersect(allowed[g], lim.devices(op))
		}
		total += work[g]
	}
	limit := total / float64(target)
	run := make([]int32, gs.Len())
	var (
		runs    int32 = -1
		runWork float64
		runMem  int64
		runDevs []int
	)
	var runKey int32
	for _, g := range gg.order {
		both := intersect(runDevs, allowed[g])
		key := lim.apartKey(gs.Members[g][0])
		// A group of zero work always joins the current run.
		if runs < 0 || len(both) == 0 || key != runKey || runMem+mem[g] > memCap || runWork > 0 && work[g] > 0 && runWork+work[g] > limit {
			runs++
			runWork, runMem, runDevs, runKey = 0, 0, allowed[g], key
		} else {
			runDevs = both
		}
		run[g] = runs
		runWork += work[g]
		runMem += mem[g]
	}
	out := &Groups{Of: make([]int32, len(gs.Of)), Colocated: gs.Colocated, CoPlaced: gs.CoPlaced, Kept: gs.Kept}
	// Renumber runs by their smallest op so numbering is stable.
	index := map[int32]int32{}
	for i := range gs.Of {
		r := run[gs.Of[i]]
		k, ok := index[r]
		if !ok {
			k = int32(len(out.Members))
			index[r] = k
			out.Members = append(out.Members, nil)
		}
		out.Of[i] = k
		out.Members[k] = append(out.Members[k], graph.OpID(i))
	}
	for _, m := range out.Members {
		slices.Sort(m)
	}
	return out
}
