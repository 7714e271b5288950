package pipeline

import (
	"bytes"
	"context"
	"testing"

	"github.com/opplace/opplace/plan"
)

// planJSON is a plan file's bytes (solve times, which vary, left out).
func planJSON(t *testing.T, p *plan.Plan) string {
	t.Helper()
	var b bytes.Buffer
	if err := plan.Write(&b, p, plan.JSON); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestSharedModelLeftAsItWas plans one imported model twice through
// Options.Model and checks that the runs leave it as it was (the device
// an op names included, which resolvePins clears) and plan as a fresh
// import does.
func TestSharedModelLeftAsItWas(t *testing.T) {
	const model, clusterFile = "../testdata/costed/tiny.json", "../testdata/clusters/hetero.yaml"
	m, err := LoadModel(model, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.Graph.Ops[0].Device = "a100"
	warnings := len(m.Warnings)
	fresh, err := Run(context.Background(), Options{ModelPath: model, ClusterPath: clusterFile})
	if err != nil {
		t.Fatal(err)
	}
	for _, respect := range []bool{false, true, false} {
		res, err := Run(context.Background(), Options{ModelPath: model, Model: m, ClusterPath: clusterFile, RespectDevices: respect})
		if err != nil {
			t.Fatal(err)
		}
		if m.Graph.Ops[0].Device != "a100" || len(m.Warnings) != warnings {
			t.Fatalf("respect %v: the shared model changed: op device %q, %d warnings", respect, m.Graph.Ops[0].Device, len(m.Warnings))
		}
		if !respect && planJSON(t, res.Plan) != planJSON(t, fresh.Plan) {
			t.Errorf("the shared model plans otherwise than a fresh import: step %v ms against %v ms", res.Plan.PredictedStepMS, fresh.Plan.PredictedStepMS)
		}
	}
}
