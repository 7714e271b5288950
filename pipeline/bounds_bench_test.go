package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/strategy"
)

// BenchmarkBounds is docs/model.md's table of lower bounds: for every
// shared model on every bundled cluster (training steps), the bound auto's
// plan printed before the memory-forced communication and LP relaxation
// bounds (the work and the critical path over the batch) and after, which
// part binds, auto's gap to each, each new part's value, and what the
// bounds cost: the new bounds of every family on a fresh problem against
// the whole plan run (prepare, which includes the bound stage, and
// auto's search) of the same iteration. Every fitting plan auto ran is
// checked against its family's bound.
//
//	go test -run '^$' -bench Bounds -benchtime 1x -timeout 60m ./pipeline/
func BenchmarkBounds(b *testing.B) {
	ctx := context.Background()
	var rows []string
	for _, m := range sharedModels {
		for _, cl := range []string{"4xV100", "8xA100-2host", "hetero"} {
			b.Run(m.name+"/"+cl, func(b *testing.B) {
				var row string
				for i := 0; i < b.N; i++ {
					begin := time.Now()
					prob, cfg, err := pipeline.Prepare(ctx, opts(m.name, cl, m.dims))
					if err != nil {
						b.Fatal(err)
					}
					prepared := time.Since(begin)
					// The old bound and the new, each on a fresh problem.
					t0 := time.Now()
					old := cost.LowerBound(prob.Costs, prob.Adj, prob.Order)
					oldTime := time.Since(t0)
					fresh := strategy.NewProblem(prob.Problem, prob.Batch)
					fresh.Bound = old
					t1 := time.Now()
					for _, fam := range []string{"", strategy.FamilyPlacement, strategy.FamilyDataParallel, strategy.FamilyPipeline, strategy.FamilyHybrid, strategy.FamilyTensor} {
						strategy.SpaceBound(fresh, fam)
					}
					newTime := time.Since(t1)
					t2 := time.Now()
					outs, best, err := strategy.Search(ctx, prob, cfg, nil)
					searched := time.Since(t2)
					var inf *placer.InfeasibleError
					if errors.As(err, &inf) {
						rows = append(rows, fmt.Sprintf("| %s | %s | no plan fits |", m.name, cl))
						b.Skip("no plan fits")
					}
					if err != nil {
						b.Fatal(err)
					}
					for _, o := range outs {
						if o.Sim != nil && o.Fits {
							if fb := strategy.SpaceBound(prob, o.Family).Seconds(); o.Sim.Step < fb*(1-1e-9) {
								b.Errorf("%s: step %.3f ms below its family's bound %.3f ms", o.Strategy, o.Sim.Step*1e3, fb*1e3)
							}
						}
					}
					step := outs[best].Sim.Step
					// auto's printed bound: the whole space's (family "").
					oldB, oldKind := old.Throughput, "work"
					if prob.Batch > 0 && old.CriticalPath/float64(prob.Batch) > oldB {
						oldB, oldKind = old.CriticalPath/float64(prob.Batch), "critical path / batch"
					}
					nb := strategy.SpaceBound(prob, "")
					part := func(kind string) string {
						p, _ := nb.Part(kind)
						if p.Seconds <= 0 {
							return "—"
						}
						return fmt.Sprintf("%.2f", p.Seconds*1e3)
					}
					plc := strategy.SpaceBound(prob, strategy.FamilyPlacement)
					whole := prepared + searched
					row = fmt.Sprintf("| %s | %s | %s %.2f | %.2f (%s) | %.2f (%s) | %.0f%% → %.0f%% | %s | %s | %.2f (%s) | %.1f | %.1f | %.0f | %.2f%% |",
						m.name, cl, outs[best].Strategy, step*1e3, oldB*1e3, oldKind, nb.Seconds()*1e3, nb.Kind(),
						100*(step/oldB-1), 100*(step/nb.Seconds()-1), part("memory-forced communication"), part("LP relaxation"),
						plc.Seconds()*1e3, plc.Kind(),
						float64(oldTime.Microseconds())/1e3, float64(newTime.Microseconds())/1e3, float64(whole.Milliseconds()), 100*newTime.Seconds()/whole.Seconds())
					b.ReportMetric(newTime.Seconds()*1e3, "bound_ms")
					b.ReportMetric(whole.Seconds()*1e3, "plan_ms")
					for _, p := range nb.Parts {
						if p.Note != "" {
							b.Logf("%s: %s", p.Kind, p.Note)
						}
					}
				}
				rows = append(rows, row)
			})
		}
	}
	b.Logf("\n| model | cluster | auto's plan (ms) | old bound ms | new bound ms | auto's gap | memory-forced ms | LP ms | placement bound ms | old bound compute ms | new bounds compute ms | plan run ms | new / plan |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n%s",
		strings.Join(rows, "\n"))
}
