package main

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/opplace/opplace/plan"
)

// TestEmitAndRespectDevices plans a TensorFlow model, writes it back with
// each node's device, then plans the annotated model with
// --respect-devices: every op must land where the first plan put it, even
// under a strategy that would choose differently.
func TestEmitAndRespectDevices(t *testing.T) {
	cl := filepath.Join(clusterDir, "8xA100-2host.yaml")
	for _, model := range []string{"emotion.json", "blazeface.pb"} {
		t.Run(model, func(t *testing.T) {
			dir := t.TempDir()
			annotated := filepath.Join(dir, "annotated"+filepath.Ext(model))
			code, stdout, stderr := invoke(t, "plan", filepath.Join("../../testdata/tf", model), "--cluster", cl,
				"--mode", "infer", "--strategy", "m-etf", "--batch", "1", "--emit-model", annotated, "-o", "json")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var first plan.Plan
			if err := json.Unmarshal([]byte(stdout), &first); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr = invoke(t, "plan", annotated, "--cluster", cl, "--mode", "infer",
				"--strategy", "single", "--batch", "1", "--respect-devices", "-o", "json")
			if code != 0 {
				t.Fatalf("re-plan: exit %d: %s", code, stderr)
			}
			var second plan.Plan
			if err := json.Unmarshal([]byte(stdout), &second); err != nil {
				t.Fatal(err)
			}
			where := map[string]string{}
			for _, op := range first.Ops {
				where[op.Name] = op.Device
			}
			used := map[string]bool{}
			for _, op := range second.Ops {
				used[op.Device] = true
				if want, ok := where[op.Name]; !ok || op.Device != want {
					t.Errorf("op %s on %s, the emitted model says %q", op.Name, op.Device, want)
				}
			}
			if len(second.Ops) != len(first.Ops) {
				t.Errorf("re-imported %d ops, planned %d", len(second.Ops), len(first.Ops))
			}
			t.Logf("%d ops on %d devices round-tripped", len(second.Ops), len(used))
		})
	}
	if code, _, stderr := invoke(t, "plan", filepath.Join("../../testdata/tf", "emotion.json"), "--cluster", cl,
		"--device-template", "/job:x/{nope}"); code != 2 {
		t.Errorf("bad --device-template: exit %d: %s", code, stderr)
	}
}
