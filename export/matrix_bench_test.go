package export_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/export"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/placer"
)

// BenchmarkTargetMatrix plans every shared model (its training step,
// Adam, the batch the tests use) with auto on the bundled clusters
// 4xV100, 8xA100-2host and hetero, exports each plan to every target and
// prints, per plan, which targets export it and why the others refuse:
// the table of docs/export.md ("Which plans export where").
//
//	go test -run '^$' -bench TargetMatrix -benchtime 1x -v ./export/
func BenchmarkTargetMatrix(b *testing.B) {
	models := []struct {
		name string
		dims map[string]int64
	}{
		{"resnet50", nil}, {"inception_v3", nil}, {"vgg16", nil}, {"mobilenet_v2", nil},
		{"bert_base", map[string]int64{"batch": 16}}, {"gpt2_small", map[string]int64{"batch": 8}},
		{"transformer", nil}, {"gnmt", nil}, {"gpt2_xl", map[string]int64{"batch": 4}},
	}
	targets := export.Names()
	var rows []string
	why := map[string]int{}
	for range b.N {
		rows = rows[:0]
		for _, m := range models {
			for _, cl := range []string{"4xV100", "8xA100-2host", "hetero"} {
				o := pipeline.Options{ModelPath: filepath.Join("..", "testdata", "models", m.name+".onnx"),
					ClusterPath: filepath.Join("..", "testdata", "clusters", cl+".yaml"), Import: pipeline.ImportOptions{Dims: m.dims}}
				res, err := pipeline.Run(context.Background(), o)
				var inf *placer.InfeasibleError
				if errors.As(err, &inf) {
					rows = append(rows, fmt.Sprintf("| %s | %s | no plan fits | | |", m.name, cl))
					continue
				}
				if err != nil {
					b.Fatalf("%s on %s: %v", m.name, cl, err)
				}
				var ok, refused []string
				for _, t := range targets {
					if _, err := export.Render(t, res.Plan, export.Options{Source: "plan.json"}); err != nil {
						refused = append(refused, t)
						why[t+": "+reason(err)]++
					} else {
						ok = append(ok, t)
					}
				}
				rows = append(rows, fmt.Sprintf("| %s | %s | %s (%s) | %s | %s |", m.name, cl, res.Plan.Family, res.Plan.Strategy,
					strings.Join(ok, ", "), strings.Join(refused, ", ")))
			}
		}
	}
	b.Logf("\n| model | cluster | auto's plan | exports to | refused by |\n|---|---|---|---|---|\n%s", strings.Join(rows, "\n"))
	keys := make([]string, 0, len(why))
	for k := range why {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var lines []string
	for _, k := range keys {
		lines = append(lines, fmt.Sprintf("- %s (%d plans)", k, why[k]))
	}
	b.Logf("refusals, by target and reason:\n%s", strings.Join(lines, "\n"))
}

// reason is a refusal's message without the plan file's name and the
// figures that change from plan to plan, so that one reason counts once.
func reason(err error) string {
	msg := strings.TrimPrefix(err.Error(), "plan.json: ")
	if i := strings.IndexAny(msg, ":("); i > 0 {
		msg = msg[:i]
	}
	return msg
}
