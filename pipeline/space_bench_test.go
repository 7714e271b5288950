package pipeline_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opplace/opplace/costed/costedtest"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
	"github.com/opplace/opplace/strategy"
)

// BenchmarkPlanSpace is docs/plan-space.md's table: for every shared
// model on every bundled cluster (training steps), the best step of each
// family, auto's choice, the work bound and auto's gap to it, and auto's
// wall time. Families auto pruned are evaluated anyway (outside the timed
// search) to check that the bound that pruned them was sound and that
// auto is never worse than any family's best; the partitioners' analytic
// estimate is compared with the simulator's step for the same split.
//
//	go test -run '^$' -bench PlanSpace -benchtime 1x ./pipeline/
func BenchmarkPlanSpace(b *testing.B) {
	ctx := context.Background()
	families := []string{strategy.FamilyDataParallel, strategy.FamilyPipeline, strategy.FamilyPlacement, strategy.FamilyHybrid, strategy.FamilyTensor}
	var rows, estimates []string
	for _, m := range sharedModels {
		for _, cl := range []string{"4xV100", "8xA100-2host", "hetero"} {
			b.Run(m.name+"/"+cl, func(b *testing.B) {
				var outs []strategy.Outcome
				var best int
				var prob *strategy.Problem
				var cfg strategy.Config
				var elapsed time.Duration
				for i := 0; i < b.N; i++ {
					var err error
					prob, cfg, err = pipeline.Prepare(ctx, opts(m.name, cl, m.dims))
					if err != nil {
						b.Fatal(err)
					}
					begin := time.Now()
					outs, best, err = strategy.Search(ctx, prob, cfg, nil)
					elapsed = time.Since(begin)
					var inf *placer.InfeasibleError
					if errors.As(err, &inf) {
						rows = append(rows, fmt.Sprintf("| %s | %s | no plan fits: %s |", m.name, cl, firstClause(inf.Error())))
						b.Skip("no plan fits")
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				autoStep := outs[best].Sim.Step
				bestOf := map[string]float64{}
				for _, o := range outs {
					if o.Pruned != "" {
						s, _ := strategy.New(o.Strategy, cfg)
						o = strategy.Evaluate(ctx, prob, o.Strategy, s)
						if o.Sim != nil && o.Fits && o.Sim.Step < autoStep*(1-1e-9) {
							b.Errorf("%s was pruned but takes %.3f ms, less than auto's %.3f ms", o.Strategy, o.Sim.Step*1e3, autoStep*1e3)
						}
					}
					if o.Sim != nil && o.Fits {
						if v, ok := bestOf[o.Family]; !ok || o.Sim.Step < v {
							bestOf[o.Family] = o.Sim.Step
						}
					}
					if o.Pipeline != nil && o.Estimate > 0 && o.Sim != nil {
						// The partitioner's own split at its own M, judged.
						if est, judged := pipelineEstimate(b, prob, o); judged > 0 {
							estimates = append(estimates, fmt.Sprintf("| %s | %s | %s | %d | %.3f | %.3f | %+.1f%% |", m.name, cl, o.Strategy,
								o.Pipeline.MicroBatches, est*1e3, judged*1e3, 100*(est/judged-1)))
						}
					}
				}
				for f, v := range bestOf {
					if autoStep > v*(1+1e-9) {
						b.Errorf("auto %.3f ms is worse than the best %s plan %.3f ms", autoStep*1e3, f, v*1e3)
					}
				}
				cells := []string{m.name, cl}
				for _, f := range families {
					if v, ok := bestOf[f]; ok {
						cells = append(cells, fmt.Sprintf("%.2f", v*1e3))
					} else {
						cells = append(cells, "—")
					}
				}
				space := strategy.SpaceBound(prob, "")
				kind := space.Kind()
				lb := space.Seconds()
				cells = append(cells, fmt.Sprintf("%s %.2f", outs[best].Strategy, autoStep*1e3), fmt.Sprintf("%.2f (%s)", lb*1e3, kind),
					fmt.Sprintf("%.0f%%", 100*(autoStep/lb-1)), fmt.Sprintf("%.2f", elapsed.Seconds()))
				rows = append(rows, "| "+strings.Join(cells, " | ")+" |")
				b.ReportMetric(autoStep*1e3, "step_ms")
				b.ReportMetric(elapsed.Seconds(), "auto_s")
			})
		}
	}
	b.Logf("\n| model | cluster | data-parallel | pipeline | placement | hybrid | tensor | auto (ms) | bound | gap | auto s |\n|---|---|---|---|---|---|---|---|---|---|---|\n%s",
		strings.Join(rows, "\n"))
	b.Logf("\n| model | cluster | partitioner | M | estimate ms | judge ms | estimate error |\n|---|---|---|---|---|---|---|\n%s",
		strings.Join(estimates, "\n"))
}

// pipelineEstimate judges the partitioner's split at the micro-batch
// count it chose and returns its estimate and the simulator's step.
func pipelineEstimate(b *testing.B, prob *strategy.Problem, o strategy.Outcome) (float64, float64) {
	pp := o.Pipeline
	pl := strategy.PipelinePlan(prob, pp, pp.MicroBatches)
	res, err := sim.Run(prob.Costs, prob.Adj, prob.Order, pl)
	if err != nil {
		b.Errorf("%s: %v", o.Strategy, err)
		return 0, 0
	}
	return pp.StepMs / 1e3, res.Step
}

// BenchmarkDataParallelScaling is ResNet-50's data-parallel training
// step on 1, 2, 4 and 8 A100s of 8xA100-2host (the global batch of 32
// split over the replicas): the speed-up over one device and the share
// of the step in which the all-reduce runs past the last backward op.
//
//	go test -run '^$' -bench DataParallelScaling -benchtime 1x ./pipeline/
func BenchmarkDataParallelScaling(b *testing.B) {
	ctx := context.Background()
	prob, _, err := pipeline.Prepare(ctx, opts("resnet50", "8xA100-2host", nil))
	if err != nil {
		b.Fatal(err)
	}
	var rows []string
	var one float64
	for _, r := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprint(r), func(b *testing.B) {
			var res *sim.Result
			for i := 0; i < b.N; i++ {
				pl := &sim.Plan{Placement: sim.Placement{Device: make([]int, len(prob.Graph.Ops))}}
				st := sim.Stage{}
				for d := 0; d < r; d++ {
					st.Replicas = append(st.Replicas, []int{d})
				}
				pl.Stages = []sim.Stage{st}
				if res, err = sim.Run(prob.Costs, prob.Adj, prob.Order, pl); err != nil {
					b.Fatal(err)
				}
			}
			if r == 1 {
				one = res.Step
			}
			var reduce, lastBackward float64
			for op := range prob.Graph.Ops {
				if prob.Graph.Ops[op].Phase.String() == "backward" {
					lastBackward = math.Max(lastBackward, res.End[op])
				}
			}
			var bytes int64
			for _, c := range res.Collectives {
				reduce += c.End - c.Start
				bytes += c.Bytes
			}
			exposed := 0.0
			if len(res.Collectives) > 0 {
				exposed = math.Max(0, res.Collectives[len(res.Collectives)-1].End-lastBackward)
			}
			rows = append(rows, fmt.Sprintf("| %d | %.3f | %.2fx | %.1f%% | %.3f | %.1f%% |", r, res.Step*1e3, one/res.Step,
				100*reduce/res.Step, exposed*1e3, 100*exposed/res.Step))
			b.ReportMetric(res.Step*1e3, "step_ms")
		})
	}
	b.Logf("\n| replicas | step ms | speed-up | all-reduce busy (share of step) | exposed all-reduce ms | exposed share |\n|---|---|---|---|---|---|\n%s", strings.Join(rows, "\n"))
}

func firstClause(msg string) string {
	if i := strings.Index(msg, "; "); i > 0 {
		return msg[:i]
	}
	return msg
}

// scaleSizes are the op counts of BenchmarkScale and BenchmarkImportRate:
// 10^4 and 10^5, and 10^6 when OPPLACE_BENCH_1M is set (make bench-1m).
func scaleSizes() []int {
	sizes := []int{10_000, 100_000}
	if os.Getenv("OPPLACE_BENCH_1M") != "" {
		sizes = append(sizes, 1_000_000)
	}
	return sizes
}

// synthFile writes the generated costed graph of n ops (seed 1, the
// graph `go run ./internal/synth -ops n` prints) under dir.
func synthFile(b *testing.B, dir string, n int) string {
	b.Helper()
	f, err := costedtest.Generate(costedtest.Config{Ops: n, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, fmt.Sprintf("synth%d.json", n))
	out, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(out)
	if err := f.Encode(w); err != nil {
		b.Fatal(err)
	}
	if err := errors.Join(w.Flush(), out.Close()); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkScale is `opplace plan` on generated costed training graphs of
// 10^4 and 10^5 ops (10^6 with OPPLACE_BENCH_1M=1) on 4xV100, per
// strategy, as a user runs it: bin/opplace (make build) in a child
// process, from reading the file to writing the plan. It reports the
// wall time per plan (ns/op), the child's peak resident memory
// (peak_rss_MB, getrusage's ru_maxrss: the whole process, Go runtime and
// all) and the rate of its import stage (import_MB/s of the file, from
// the stage times -v prints: the import as the command runs it, with its
// garbage-collector settings). The machine's load moves the times;
// compare runs of one session.
//
//	make bench-1m    # or: OPPLACE_BENCH_1M=1 go test -run '^$' -bench Scale -benchtime 1x ./pipeline/
func BenchmarkScale(b *testing.B) {
	bin := builtBinary(b)
	dir := b.TempDir()
	for _, n := range scaleSizes() {
		file := synthFile(b, dir, n)
		st, err := os.Stat(file)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range []string{"m-etf", "heft", "auto"} {
			b.Run(fmt.Sprintf("%d/%s", n, s), func(b *testing.B) {
				var peak int64
				var importing time.Duration
				for i := 0; i < b.N; i++ {
					cmd := exec.Command(bin, "plan", file, "--cluster", filepath.Join(clusters, "4xV100.yaml"),
						"--strategy", s, "-q", "-v", "--out", filepath.Join(dir, "plan.json"))
					var stderr bytes.Buffer
					cmd.Stderr = &stderr
					if err := cmd.Run(); err != nil {
						b.Fatalf("%v: %v\n%s", cmd, err, stderr.Bytes())
					}
					peak = max(peak, peakRSS(cmd.ProcessState))
					d, err := stageTime(stderr.String(), "import")
					if err != nil {
						b.Fatal(err)
					}
					importing += d
				}
				b.ReportMetric(float64(peak)/(1<<20), "peak_rss_MB")
				b.ReportMetric(float64(st.Size())*float64(b.N)/importing.Seconds()/1e6, "import_MB/s")
			})
		}
	}
}

// stageTime reads a stage's time from what `opplace plan -v` prints on
// stderr ("stage import    1.234s").
func stageTime(stderr, stage string) (time.Duration, error) {
	for _, line := range strings.Split(stderr, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "stage" && f[1] == stage {
			return time.ParseDuration(f[2])
		}
	}
	return 0, fmt.Errorf("no %q stage time in:\n%s", stage, stderr)
}

// BenchmarkImportRate is the import stage alone (pipeline.LoadModel) of
// generated costed graphs of 10^4 and 10^5 ops (10^6 with
// OPPLACE_BENCH_1M=1) and of the shared ONNX models, as MB/s of the file
// and ops/s of the graph it gives.
//
//	go test -run '^$' -bench ImportRate -benchtime 5x ./pipeline/
func BenchmarkImportRate(b *testing.B) {
	dir := b.TempDir()
	type input struct {
		name, path string
		dims       map[string]int64
	}
	var inputs []input
	for _, n := range scaleSizes() {
		inputs = append(inputs, input{fmt.Sprintf("costed-%d", n), synthFile(b, dir, n), nil})
	}
	for _, m := range sharedModels {
		inputs = append(inputs, input{"onnx-" + m.name, filepath.Join(models, m.name+".onnx"), m.dims})
	}
	for _, in := range inputs {
		st, err := os.Stat(in.path)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(in.name, func(b *testing.B) {
			var ops int
			b.SetBytes(st.Size())
			for i := 0; i < b.N; i++ {
				m, err := pipeline.LoadModel(in.path, pipeline.ImportOptions{Dims: in.dims})
				if err != nil {
					b.Fatal(err)
				}
				ops = len(m.Graph.Ops)
			}
			b.ReportMetric(float64(ops)*float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}
