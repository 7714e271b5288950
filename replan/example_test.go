package replan_test

import (
	"context"
	"fmt"
	"os"

	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/replan"
)

// An elastic launcher written in Go grows a job from two hosts to three
// and asks, in-process, which plan to move to: ResNet-50 at 96 samples a
// step runs 12 on each of eight A100s; on twelve the step is shorter by
// more than moving the state costs over the next 1000 steps.
func ExampleRun() {
	ctx := context.Background()
	shape := map[string][]int64{"input.1": {96, 3, 224, 224}}
	// The plan the job launched with: data parallel on two hosts of four
	// A100s.
	old, err := pipeline.Run(ctx, pipeline.Options{ModelPath: "../testdata/models/resnet50.onnx",
		ClusterPath: "../testdata/clusters/8xA100-2host.yaml", Strategy: "dp", Import: pipeline.ImportOptions{Shapes: shape}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	res, err := replan.Run(ctx, replan.Options{Plan: old.Plan, PlanPath: "the launch plan",
		ClusterPath: "../testdata/clusters/12xA100-3host.yaml", AmortizeSteps: 1000, Planning: pipeline.Options{Import: pipeline.ImportOptions{Shapes: shape}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	c := res.Chosen
	fmt.Printf("added %v\n", res.Devices.Added)
	fmt.Printf("old step %.3f ms\n", old.Plan.PredictedStepMS)
	fmt.Printf("chosen: %s (keep %v), step %.3f ms, %d bytes to move\n", c.Strategy, c.Keep, c.StepMS, c.LinkBytes+c.CheckpointBytes)
	fmt.Printf("from scratch is the chosen plan: %v\n", res.FromScratch.Strategy == c.Strategy && res.FromScratch.StepMS == c.StepMS)
	// Output:
	// added [n2gpu0 n2gpu1 n2gpu2 n2gpu3]
	// old step 24.991 ms
	// chosen: dp (keep false), step 20.515 ms, 1224381312 bytes to move
	// from scratch is the chosen plan: true
}
