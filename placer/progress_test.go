package placer_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/internal/progress"
	"github.com/opplace/opplace/placer"
)

// TestILPProgress checks that the ilp placer reports Cbc's time against
// its limit through the context, ends the task, and places the same with
// or without a reporter.
func TestILPProgress(t *testing.T) {
	b := graphtest.New("par").Input("x", 8).Op("a", 2e9, 8, "x").Op("b", 2e9, 8, "x")
	p := problem(t, b, graphtest.Cluster(giga, 0, dev(giga, 1<<40), dev(giga, 1<<40)))
	rec := &progress.Recorder{}
	got, err := (&placer.ILP{MaxSeconds: 5, MaxNodes: 50}).Place(progress.With(context.Background(), rec), p)
	if err != nil {
		t.Fatal(err)
	}
	want, err := (&placer.ILP{MaxSeconds: 5, MaxNodes: 50}).Place(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("placement %+v with a reporter, %+v without", got, want)
	}
	ev := rec.Events()
	if len(ev) < 2 {
		t.Fatalf("events %+v, want a start and a done", ev)
	}
	if start := ev[0]; start != (progress.Event{Stage: "ilp: Cbc (5s limit)", Op: "start", N: 5000, Unit: progress.Millis}) {
		t.Errorf("start %+v", start)
	}
	if last := ev[len(ev)-1]; last.Op != "done" {
		t.Errorf("last event %+v, want done", last)
	}
}

// TestILPRefusesHugePrograms: on a cluster of 1,500 devices three
// branches joining need millions of transfer rows (one per edge and pair
// of devices), and ilp says so at once instead of building them.
func TestILPRefusesHugePrograms(t *testing.T) {
	b := graphtest.New("branches").Input("x", 8).Op("a", 2e9, 1<<20, "x").Op("b", 2e9, 1<<20, "x").Op("c", 2e9, 1<<20, "x").
		Op("join", 2e9, 1<<20, "a", "b", "c")
	devs := make([]graphtest.Device, 1500)
	for i := range devs {
		devs[i] = dev(giga, 1<<40)
	}
	p := problem(t, b, graphtest.Cluster(giga, 0, devs...))
	_, err := (&placer.ILP{MaxSeconds: 5, MaxNodes: 50}).Place(context.Background(), p)
	if err == nil || !strings.Contains(err.Error(), "transfer rows") {
		t.Fatalf("err = %v, want the program refused for its transfer rows", err)
	}
}
