package strategy

import (
	"fmt"

	"github.com/opplace/opplace/sim"
)

// BatchSplitError is a plan that does not split the step's batch into
// whole samples: a stage's replicas would each run a fraction of a
// sample per micro-batch, which no runtime can launch (DDP, DeepSpeed,
// Megatron-LM and FSDP all take an integer micro-batch size per rank).
type BatchSplitError struct {
	Batch        int64
	MicroBatches int
	Stage        int
	Replicas     int
}

func (e *BatchSplitError) Error() string {
	parts := fmt.Sprintf("%d micro-batch(es)", e.MicroBatches)
	if e.Replicas > 1 {
		parts += fmt.Sprintf(" x %d replicas", e.Replicas)
		if e.Stage > 0 {
			parts = fmt.Sprintf("stage %d's %s", e.Stage, parts)
		}
	}
	return fmt.Sprintf("the batch of %d does not split into %s of whole samples (%.3g each)",
		e.Batch, parts, float64(e.Batch)/float64(e.MicroBatches*e.Replicas))
}

// SplitsBatch returns a *BatchSplitError when plan pl gives some stage's
// replicas a fraction of a sample per micro-batch: the batch must be M ×
// replicas × a whole micro-batch size for every stage. A problem whose
// batch is unknown (0) accepts every plan.
func (p *Problem) SplitsBatch(pl *sim.Plan) error {
	if p.Batch <= 0 {
		return nil
	}
	M := max(pl.MicroBatches, 1)
	if len(pl.Stages) == 0 {
		if p.Batch%int64(M) != 0 {
			return &BatchSplitError{Batch: p.Batch, MicroBatches: M, Replicas: 1}
		}
		return nil
	}
	for i, st := range pl.Stages {
		r := max(len(st.Replicas), 1)
		if p.Batch%(int64(M)*int64(r)) != 0 {
			return &BatchSplitError{Batch: p.Batch, MicroBatches: M, Stage: i, Replicas: r}
		}
	}
	return nil
}

// MicroBatchSize is the samples each replica of a stage with r replicas
// runs per micro-batch when the step's batch is split into M
// micro-batches, or 0 when the batch is unknown or does not split.
func MicroBatchSize(batch int64, M, r int) int64 {
	d := int64(max(M, 1)) * int64(max(r, 1))
	if batch <= 0 || batch%d != 0 {
		return 0
	}
	return batch / d
}
