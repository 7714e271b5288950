package profile_test

import (
	"context"
	"testing"

	"github.com/opplace/opplace/internal/progress"
	"github.com/opplace/opplace/profile"
)

// TestMeasureProgress checks that Measure counts the distinct ops it
// measures, through the context, beside its own callback.
func TestMeasureProgress(t *testing.T) {
	rec := &progress.Recorder{}
	res, err := profile.Measure(progress.With(context.Background(), rec), tiny(t), profile.MeasureOptions{
		DeviceType: "test-cpu", CPU: &testCPU, Warmup: 1, Runs: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	ev := rec.Events()
	if len(ev) != res.Distinct+2 {
		t.Fatalf("events %+v, want a start, %d sets and a done", ev, res.Distinct)
	}
	if ev[0] != (progress.Event{Stage: "profile: measuring ops", Op: "start", N: int64(res.Distinct)}) {
		t.Errorf("start %+v", ev[0])
	}
	for i, e := range ev[1 : len(ev)-1] {
		if e.Op != "set" || e.N != int64(i) {
			t.Errorf("event %+v, want set %d", e, i)
		}
	}
	if ev[len(ev)-1].Op != "done" {
		t.Errorf("last event %+v", ev[len(ev)-1])
	}
}
