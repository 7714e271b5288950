package replan_test

import (
	"context"
	"fmt"
	"os"

	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/replan"
)

// An elastic launcher written in Go grows a job from two hosts to three
// and asks, in-process, which plan to move to: the plan it launched with
// still runs, and over the next 1000 steps moving nothing beats the
// faster plan from scratch.
func ExampleRun() {
	ctx := context.Background()
	// The plan the job launched with: ResNet-50, data parallel on two
	// hosts of four A100s.
	old, err := pipeline.Run(ctx, pipeline.Options{ModelPath: "../testdata/models/resnet50.onnx",
		ClusterPath: "../testdata/clusters/8xA100-2host.yaml", Strategy: "dp"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	res, err := replan.Run(ctx, replan.Options{Plan: old.Plan, PlanPath: "the launch plan",
		ClusterPath: "../testdata/clusters/12xA100-3host.yaml", AmortizeSteps: 1000})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	c, f := res.Chosen, res.FromScratch
	fmt.Printf("added %v\n", res.Devices.Added)
	fmt.Printf("chosen: %s (keep %v), step %.3f ms, %d bytes to move\n", c.Strategy, c.Keep, c.StepMS, c.LinkBytes+c.CheckpointBytes)
	fmt.Printf("from scratch: a shorter step (%v), %d bytes to move\n", f.StepMS < c.StepMS, f.LinkBytes+f.CheckpointBytes)
	fmt.Printf("it pays off only after K steps or more: %v\n", *res.BreakEvenSteps >= res.AmortizeSteps)
	// Output:
	// added [n2gpu0 n2gpu1 n2gpu2 n2gpu3]
	// chosen: keep (keep true), step 12.855 ms, 0 bytes to move
	// from scratch: a shorter step (true), 290478816 bytes to move
	// it pays off only after K steps or more: true
}
