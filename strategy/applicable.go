package strategy

import (
	"fmt"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
)

// noReplicas collects why a replicating strategy (dp, dp+PLACER)
// found nothing to propose, so that its error names the true reason: a
// batch too small to split over the replicas the cluster offers, device
// types that cannot run every op, or too few devices of one type.
type noReplicas struct {
	// replicas is the fewest replicas a class offered that the batch
	// could not be split over (0: the batch stopped none).
	replicas int
	// uneven is the fewest replicas a class offered that do not divide
	// the batch (0: none).
	uneven int
	// dev and op, when set, are the first device whose class was
	// passed over because it cannot run op.
	dev int
	op  graph.OpID
	set bool
}

// batch records r replicas that the batch could not be split over.
func (n *noReplicas) batch(r int) {
	if n.replicas == 0 || r < n.replicas {
		n.replicas = r
	}
}

// split records r replicas that do not divide the batch into whole
// samples each.
func (n *noReplicas) split(r int) {
	if n.uneven == 0 || r < n.uneven {
		n.uneven = r
	}
}

// cannotRun records a class of device d passed over because d cannot
// run op.
func (n *noReplicas) cannotRun(d int, op graph.OpID) {
	if !n.set {
		n.dev, n.op, n.set = d, op, true
	}
}

// err is the not-applicable error of strategy name for a step of batch
// samples; none is the reason when neither the batch nor an op stopped
// a class (too few devices of one type).
func (n *noReplicas) err(name string, t *cost.Table, batch int64, none string) error {
	switch {
	case n.replicas > 0:
		unit := "samples"
		if batch == 1 {
			unit = "sample"
		}
		return fmt.Errorf("%s: %w: a batch of %d %s cannot be split over %d replicas (each replica runs at least one sample): plan a batch of %d or more",
			name, ErrNotApplicable, batch, unit, n.replicas, n.replicas)
	case n.uneven > 0:
		return fmt.Errorf("%s: %w: a batch of %d samples does not split over %d replicas (each runs the same whole number of samples): plan a batch that %d divides",
			name, ErrNotApplicable, batch, n.uneven, n.uneven)
	case n.set:
		d := t.Cluster.Devices[n.dev]
		how := "has no time for it"
		if t.Restricted() {
			how = "has no time for it, or the rules keep it off"
		}
		return fmt.Errorf("%s: %w: no two devices of one type run every op: %s (%s) cannot run op %q (its type %s)",
			name, ErrNotApplicable, d.Name, d.Type.Name, t.Graph.Ops[n.op].Name, how)
	}
	return fmt.Errorf("%s: %w: %s", name, ErrNotApplicable, none)
}

// firstUnrunnable is the first op device d cannot run, and false; or
// true when d runs every op of the graph.
func firstUnrunnable(t *cost.Table, d int) (graph.OpID, bool) {
	for op := range t.Graph.Ops {
		if !t.CanRun(graph.OpID(op), d) {
			return graph.OpID(op), false
		}
	}
	return 0, true
}

// canRunAll reports whether device d's type runs every op of the graph.
func canRunAll(t *cost.Table, d int) bool {
	_, ok := firstUnrunnable(t, d)
	return ok
}
