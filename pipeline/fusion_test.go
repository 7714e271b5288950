package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/plan"
)

// Fusion shrinks the graph placement sees, never the plan: every original
// op is listed, fused ops share a device, and the plan is deterministic.
func TestFusionPlans(t *testing.T) {
	for _, tc := range []struct {
		model   string
		dims    map[string]int64
		mode    string
		before  int
		after   int
		mergeds []int
	}{
		// Counts measured on the shared models (infer mode).
		{"resnet50", nil, "vertical", 169, 61, []int{108}},
		{"resnet50", nil, "horizontal", 169, 168, []int{1}},
		{"resnet50", nil, "hybrid", 169, 60, []int{108, 1}},
		{"inception_v3", nil, "hybrid", 316, 120, []int{177, 19}},
		{"bert_base", map[string]int64{"batch": 1}, "hybrid", 1086, 666, []int{420, 0}},
	} {
		t.Run(tc.model+"/"+tc.mode, func(t *testing.T) {
			o := opts(tc.model, "4xV100", tc.dims)
			o.Mode = pipeline.ModeInfer
			var none pipeline.FusionReport
			o.Fusion, o.FusionReport = pipeline.FusionNone, &none
			plain, err := pipeline.Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			var rep pipeline.FusionReport
			o.Fusion, o.FusionReport = tc.mode, &rep
			fused, err := pipeline.Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if none.OpsAfter != tc.before || rep.OpsBefore != tc.before || rep.OpsAfter != tc.after {
				t.Errorf("ops %d -> %d (none: %d), want %d -> %d", rep.OpsBefore, rep.OpsAfter, none.OpsAfter, tc.before, tc.after)
			}
			for i, p := range rep.Passes {
				if i >= len(tc.mergeds) || p.Merged != tc.mergeds[i] {
					t.Errorf("passes %v, want merges %v", rep.Passes, tc.mergeds)
					break
				}
			}
			if len(fused.Plan.Ops) != tc.before || len(fused.Graph.Ops) != tc.before || len(fused.Sim.Start) != tc.before {
				t.Fatalf("plan lists %d ops, graph %d, sim %d; want %d", len(fused.Plan.Ops), len(fused.Graph.Ops), len(fused.Sim.Start), tc.before)
			}
			seen := map[string]bool{}
			devOf := map[string]string{}
			total := 0
			for _, op := range fused.Plan.Ops {
				seen[op.Name] = true
				devOf[op.Name] = op.Device
			}
			for _, d := range fused.Plan.Devices {
				total += d.Ops
			}
			if len(seen) != tc.before || total != tc.before {
				t.Errorf("%d distinct op names, devices count %d ops; want %d", len(seen), total, tc.before)
			}
			c := rep.Coarse
			for k, members := range c.Members {
				for _, m := range members[1:] {
					if devOf[c.Fine.Ops[m].Name] != devOf[c.Fine.Ops[members[0]].Name] {
						t.Fatalf("fused group %q split across devices", c.Graph.Ops[k].Name)
					}
				}
			}
			// Fusion only removes traffic and launches, so the total compute
			// time cannot rise (on one device type); the critical path may,
			// as fused groups wait for all their inputs.
			busy := func(p *plan.Plan) (s float64) {
				for _, d := range p.Devices {
					s += d.BusyMS
				}
				return s
			}
			if b, pb := busy(fused.Plan), busy(plain.Plan); b > pb*(1+1e-9) {
				t.Errorf("busy time %.4f ms fused > %.4f ms unfused", b, pb)
			}
			t.Logf("%s %s: ops %d -> %d, busy %.3f -> %.3f ms, step %.3f -> %.3f ms, bound %.3f -> %.3f ms",
				tc.model, tc.mode, tc.before, tc.after, busy(plain.Plan), busy(fused.Plan),
				plain.Plan.PredictedStepMS, fused.Plan.PredictedStepMS, plain.Plan.LowerBoundMS, fused.Plan.LowerBoundMS)
			again, err := pipeline.Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			var a, b bytes.Buffer
			if err := plan.Write(&a, fused.Plan, plan.JSON); err != nil {
				t.Fatal(err)
			}
			if err := plan.Write(&b, again.Plan, plan.JSON); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a.Bytes(), b.Bytes()) {
				t.Error("two fused runs gave different plans")
			}
		})
	}
}

func TestFusionBadMode(t *testing.T) {
	o := opts("vgg16", "4xV100", nil)
	o.Fusion = "diagonal"
	_, err := pipeline.Run(context.Background(), o)
	var in *pipeline.InputError
	if !errors.As(err, &in) {
		t.Fatalf("err = %v, want an InputError", err)
	}
}
