package pipeline_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/strategy"
)

// BenchmarkTensorParallel is docs/tensor-parallel.md's table (issue 15):
// for the transformers on 8xA100-2host and 4xV100 (training steps), the
// best step of every family with tensor parallelism among them, the
// degrees of auto's plan, its gap to the space's bound and auto's time.
//
//	go test -run '^$' -bench TensorParallel -benchtime 1x -v ./pipeline/
func BenchmarkTensorParallel(b *testing.B) {
	ctx := context.Background()
	families := []string{strategy.FamilyDataParallel, strategy.FamilyPipeline, strategy.FamilyPlacement, strategy.FamilyTensor, strategy.FamilyHybrid}
	cases := []struct {
		model string
		batch int64
	}{{"gpt2_xl", 4}, {"gpt2_xl", 32}, {"gpt2_small", 8}, {"bert_base", 16}}
	var rows []string
	for _, tc := range cases {
		for _, cl := range []string{"8xA100-2host", "4xV100"} {
			b.Run(fmt.Sprintf("%s-b%d/%s", tc.model, tc.batch, cl), func(b *testing.B) {
				var outs []strategy.Outcome
				var best int
				var prob *strategy.Problem
				var elapsed time.Duration
				for i := 0; i < b.N; i++ {
					var cfg strategy.Config
					var err error
					prob, cfg, err = pipeline.Prepare(ctx, opts(tc.model, cl, map[string]int64{"batch": tc.batch}))
					if err != nil {
						b.Fatal(err)
					}
					begin := time.Now()
					outs, best, err = strategy.Search(ctx, prob, cfg, nil)
					elapsed = time.Since(begin)
					if err != nil {
						rows = append(rows, fmt.Sprintf("| %s b%d | %s | no plan: %s |", tc.model, tc.batch, cl, firstClause(err.Error())))
						b.Skip(err)
					}
				}
				bestOf := map[string]strategy.Outcome{}
				for _, o := range outs {
					if o.Sim != nil && o.Fits {
						if v, ok := bestOf[o.Family]; !ok || o.Sim.Step < v.Sim.Step {
							bestOf[o.Family] = o
						}
					}
				}
				cells := []string{fmt.Sprintf("%s b%d", tc.model, tc.batch), cl}
				for _, f := range families {
					if o, ok := bestOf[f]; ok {
						cells = append(cells, fmt.Sprintf("%.1f", o.Sim.Step*1e3))
					} else {
						cells = append(cells, "—")
					}
				}
				o := outs[best]
				space := strategy.SpaceBound(prob, "")
				lb := space.Seconds()
				cells = append(cells, fmt.Sprintf("%s %.1f", o.Strategy, o.Sim.Step*1e3), degrees(o),
					fmt.Sprintf("%.1f (%s)", lb*1e3, space.Kind()), fmt.Sprintf("%.2fx", o.Sim.Step/lb), fmt.Sprintf("%.1f", elapsed.Seconds()))
				if t, ok := bestOf[strategy.FamilyTensor]; ok {
					cells = append(cells, fmt.Sprintf("%.1f", t.Solve.Seconds()))
				} else {
					cells = append(cells, "—")
				}
				rows = append(rows, "| "+strings.Join(cells, " | ")+" |")
				b.ReportMetric(o.Sim.Step*1e3, "step_ms")
				b.ReportMetric(elapsed.Seconds(), "auto_s")
			})
		}
	}
	b.Logf("\n| model | cluster | data-parallel | pipeline | placement | tensor | hybrid | auto (ms) | tensor × stages × replicas | bound (ms) | auto / bound | auto s | tensor s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n%s",
		strings.Join(rows, "\n"))
}

// degrees is a plan's tensor degree × stages × replicas (of its first
// stage), with its micro-batch count.
func degrees(o strategy.Outcome) string {
	pl := o.Plan
	t, r := 1, 1
	if len(pl.Stages) > 0 {
		t, r = max(pl.Stages[0].Tensor, 1), len(pl.Stages[0].Replicas)
	}
	return fmt.Sprintf("%d × %d × %d, M=%d", t, pl.NumStages(), r, max(pl.MicroBatches, 1))
}
