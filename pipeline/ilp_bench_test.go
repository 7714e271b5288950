package pipeline_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/strategy"
)

// ilpHeuristics are the placers BenchmarkILP measures ilp against, the
// local search last (it refines the best of those before it, as in auto).
var ilpHeuristics = []string{"m-etf", "heft", "m-sct", "m-topo", "expert", "local"}

// ilpNote reads the MILP's makespan and bound (its coarse model, in ms)
// and how the search ended from ilp's note.
var ilpNote = regexp.MustCompile(`MILP on (\d+) units.*: (optimal|stopped at its limit of \d+ nodes|stopped at its time limit)[^,]* after ([0-9.]+m?s), makespan ([0-9.]+) ms .*bound ([0-9.]+) ms, gap ([0-9.]+)%`)

// BenchmarkILP is docs/strategies.md's table of the ilp placer on the
// shared models' training steps on the three bundled clusters, with
// auto's limits (2 s and 50 nodes per Cbc solve), started from the best
// placement of the heuristics before it: the best heuristic's step and
// ilp's, the MILP's makespan, bound and gap in its own coarse model, how
// its search ended, the placement family's lower bound, and ilp's solve
// time (its own search, warm start given).
//
//	go test -run '^$' -bench 'ILP$' -benchtime 1x -timeout 60m ./pipeline/
func BenchmarkILP(b *testing.B) {
	ctx := context.Background()
	names := append(append([]string{}, ilpHeuristics...), "ilp")
	var rows []string
	for _, m := range sharedModels {
		for _, cl := range []string{"4xV100", "8xA100-2host", "hetero"} {
			b.Run(m.name+"/"+cl, func(b *testing.B) {
				var row string
				for i := 0; i < b.N; i++ {
					prob, cfg, err := pipeline.Prepare(ctx, opts(m.name, cl, m.dims))
					if err != nil {
						b.Fatal(err)
					}
					outs, _, _ := strategy.Search(ctx, prob, cfg, names)
					best := -1
					for k, o := range outs[:len(outs)-1] {
						if o.Sim != nil && o.Fits && (best < 0 || o.Sim.Step < outs[best].Sim.Step) {
							best = k
						}
					}
					bound := strategy.SpaceBound(prob, strategy.FamilyPlacement).Seconds() * 1e3
					ilp := outs[len(outs)-1]
					heur := "—"
					if best >= 0 {
						heur = fmt.Sprintf("%.1f (%s)", outs[best].Sim.Step*1e3, outs[best].Strategy)
					}
					if ilp.Sim == nil || !ilp.Fits {
						why := "no plan"
						if ilp.Err != nil {
							why = strings.TrimPrefix(firstClause(ilp.Err.Error()), "strategy ilp ")
						}
						row = fmt.Sprintf("| %s | %s | %s | — | — | %s | — | %.1f | %.1f |", m.name, cl, heur, why, bound, ilp.Solve.Seconds())
						continue
					}
					vs := "—"
					if best >= 0 {
						vs = fmt.Sprintf("%+.1f%%", 100*(ilp.Sim.Step/outs[best].Sim.Step-1))
						b.ReportMetric(100*(ilp.Sim.Step/outs[best].Sim.Step-1), "ilp-vs-best%")
					}
					note := ilpNote.FindStringSubmatch(strings.Join(ilp.Notes, "\n"))
					model, ended := "—", "—"
					if note != nil {
						model = fmt.Sprintf("%s / %s / %s%% (%s units)", note[4], note[5], note[6], note[1])
						ended = strings.TrimPrefix(note[2], "stopped at its ")
					}
					row = fmt.Sprintf("| %s | %s | %s | %.1f | %s | %s | %s | %.1f | %.1f |", m.name, cl, heur, ilp.Sim.Step*1e3, vs, model, ended, bound, ilp.Solve.Seconds())
				}
				rows = append(rows, row)
			})
		}
	}
	b.Logf("\n| model | cluster | best heuristic ms | ilp ms | ilp vs best | MILP makespan / bound / gap (coarse model) | search ended | placement bound ms | ilp s |\n|---|---|---|---|---|---|---|---|---|\n%s", strings.Join(rows, "\n"))
}
