package partition

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/opplace/opplace/cost"
)

// A four-op training chain on two 1 GFLOP/s devices joined at 1 GB/s,
// split by the exact partitioner under 1F1B with 4 micro-batches.
func Example() {
	g := buildGraph(chain(1e6, 1e9), true)
	table := cost.NewTable(g, testCluster(2, 1<<40, giga), cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1})
	p, err := NewProblem(table, Options{Schedule: OneFOneB, MicroBatches: 4})
	if err != nil {
		fmt.Println(err)
		return
	}
	part, _ := New("exact")
	plan, err := part.Partition(context.Background(), p)
	if err != nil {
		fmt.Println(err)
		return
	}
	plan.Stages[0].Ops, plan.Stages[1].Ops = nil, nil // keep the output short
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.Encode(plan)
	// Output:
	// {
	//   "partitioner": "exact",
	//   "schedule": "1f1b",
	//   "objective": "throughput",
	//   "training": true,
	//   "micro_batches": 4,
	//   "stages": [
	//     {
	//       "index": 0,
	//       "device_type": "dev1e+09",
	//       "devices": [
	//         "d0"
	//       ],
	//       "replicas": 1,
	//       "ops": null,
	//       "first_op": "a",
	//       "last_op": "b",
	//       "compute_ms": 1500,
	//       "comm_ms": 0.25,
	//       "sync_ms": 0,
	//       "time_ms": 1500.25,
	//       "send_bytes": 1000000,
	//       "peak_memory_bytes": 4001000000,
	//       "alive_micro_batches": 2,
	//       "start_ms": 0,
	//       "end_ms": 7501
	//     },
	//     {
	//       "index": 1,
	//       "device_type": "dev1e+09",
	//       "devices": [
	//         "d1"
	//       ],
	//       "replicas": 1,
	//       "ops": null,
	//       "first_op": "c",
	//       "last_op": "d",
	//       "compute_ms": 1500,
	//       "comm_ms": 0.25,
	//       "sync_ms": 0,
	//       "time_ms": 1500.25,
	//       "send_bytes": 0,
	//       "peak_memory_bytes": 4000750000,
	//       "alive_micro_batches": 1,
	//       "start_ms": 500.25,
	//       "end_ms": 6500.75
	//     }
	//   ],
	//   "bottleneck_ms": 1500.25,
	//   "objective_ms": 1500.25,
	//   "step_ms": 7501,
	//   "bubble_fraction": 0.200106652,
	//   "exact": {
	//     "units": 4,
	//     "reduced_units": 4,
	//     "epsilon": 0,
	//     "downsets": 5,
	//     "lower_bound_ms": 1500.25,
	//     "gap": 0,
	//     "optimal": true
	//   }
	// }
}
